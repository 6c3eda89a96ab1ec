// Counts requests that are still being answered (a stream may outlive the engine request by the
// time its last chunks take to write), so draining can wait for them before the server stops.
// Each request's guard shares ownership: a request's answer may be destroyed after the server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace ridge {

class ActiveRequests {
 public:
  class Guard {
   public:
    explicit Guard(std::shared_ptr<ActiveRequests> owner) : owner_(std::move(owner)) {
      owner_->Change(+1);
    }
    ~Guard() { owner_->Change(-1); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    std::shared_ptr<ActiveRequests> owner_;
  };

  // True when none is active before `deadline`.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_.wait_until(lock, deadline, [&] { return count_ == 0; });
  }
  int64_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }

 private:
  void Change(int64_t delta) {
    std::lock_guard<std::mutex> lock(mutex_);
    count_ += delta;
    if (count_ == 0) idle_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable idle_;
  int64_t count_ = 0;
};

}  // namespace ridge
