// A RequestSink for tests that collects a request's events; Wait() blocks until the final one.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/request.h"

namespace ridge::testing {

// Collects a request's events; Wait() blocks until the final one.
class CollectingSink : public RequestSink {
 public:
  void OnEvent(RequestEvent event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_.insert(tokens_.end(), event.tokens.begin(), event.tokens.end());
    for (auto& lp : event.logprobs) logprobs_.push_back(lp);
    if (!event.prompt_logprobs.empty()) {
      EXPECT_TRUE(prompt_logprobs_.empty()) << "prompt logprobs in two events";
      EXPECT_TRUE(tokens_.size() == event.tokens.size()) << "prompt logprobs after the first event";
      prompt_logprobs_ = event.prompt_logprobs;
    }
    if (event.finished) {
      EXPECT_FALSE(final_.has_value()) << "two final events";
      final_ = std::move(event);
    }
    changed_.notify_all();
  }
  RequestEvent Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    EXPECT_TRUE(
        changed_.wait_for(lock, std::chrono::seconds(60), [&] { return final_.has_value(); }));
    return final_.value_or(RequestEvent{});
  }
  void WaitForTokens(size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(60),
                      [&] { return tokens_.size() >= n || final_.has_value(); });
  }
  std::vector<int32_t> tokens() {
    std::lock_guard<std::mutex> lock(mutex_);
    return tokens_;
  }
  std::vector<LogprobEntry> logprobs() {
    std::lock_guard<std::mutex> lock(mutex_);
    return logprobs_;
  }
  std::vector<LogprobEntry> prompt_logprobs() {
    std::lock_guard<std::mutex> lock(mutex_);
    return prompt_logprobs_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int32_t> tokens_;
  std::vector<LogprobEntry> logprobs_;
  std::vector<LogprobEntry> prompt_logprobs_;
  std::optional<RequestEvent> final_;
};

}  // namespace ridge::testing
