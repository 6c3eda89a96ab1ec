// A scripted GenerationBackend for the HTTP tests: no model, text chosen by the test.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/generation_backend.h"
#include "tests/server/tiny_tokenizer.h"

namespace ridge::testing {

constexpr char kScript[] = "Hello world, this is ridgeserve speaking. ";

// Emits the bytes of `script` (kScript unless a test sets it; as tiny-tokenizer ids), one token
// per event every `interval`, up to max_tokens, then finishes with `finish_reason` ("length"
// unless a test sets it). Cancel ends a request with kCancelled.
// Prompt logprobs the fake gives (EngineRequest::prompt_logprobs = n): prompt token t + 1 has
// logprob -0.25 (t + 1) and rank t + 2; the alternatives are the tiny tokens of 'a', 'b', ...
// with logprobs -0.1, -0.2, ...
inline std::vector<LogprobEntry> ScriptedPromptLogprobs(const EngineRequest& request) {
  std::vector<LogprobEntry> out;
  if (request.prompt_logprobs < 0) return out;
  for (size_t t = 0; t + 1 < request.prompt.size(); ++t) {
    LogprobEntry e{
        request.prompt[t + 1], -0.25f * static_cast<float>(t + 1), {}, static_cast<int32_t>(t + 2)};
    for (int32_t k = 0; k < request.prompt_logprobs; ++k) {
      e.top.emplace_back(TinyTokenId(static_cast<unsigned char>('a' + k)), -0.1f * (k + 1));
    }
    out.push_back(std::move(e));
  }
  return out;
}

class FakeBackend final : public GenerationBackend {
 public:
  ~FakeBackend() override {
    for (auto& t : threads_) t.join();
  }

  absl::StatusOr<RequestId> Submit(EngineRequest request,
                                   std::shared_ptr<RequestSink> sink) override {
    if (!reject.ok()) return reject;
    std::lock_guard<std::mutex> lock(mutex_);
    const RequestId id = next_id_++;
    last_request = request;
    all_requests.push_back(request);
    ++running_;
    threads_.emplace_back([this, id, request, sink] { Generate(id, request, sink); });
    return id;
  }

  void Cancel(RequestId id, CancelReason reason = CancelReason::kClient) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_[id] = true;
    ++cancels;
    if (reason == CancelReason::kStopString) ++stop_string_cancels;
  }

  EngineSnapshot Snapshot() const override {
    EngineSnapshot s;
    s.running = s.slots_used = running_;
    s.slots_total = 4;
    std::lock_guard<std::mutex> lock(mutex_);
    s.backend_failure = backend_failure_;
    return s;
  }

  // As the engine reports a backend that can never step again.
  void SetBackendFailure(std::string why) {
    std::lock_guard<std::mutex> lock(mutex_);
    backend_failure_ = std::move(why);
  }

  absl::Status reject;
  std::chrono::milliseconds interval{1};
  std::atomic<int> cancels{0};
  std::atomic<int> stop_string_cancels{0};
  EngineRequest last_request;
  std::vector<EngineRequest> all_requests;  // every Submit, in order
  std::string script = kScript;             // set before the first request
  FinishReason finish_reason = FinishReason::kLength;

 private:
  bool IsCancelled(RequestId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_[id];
  }

  void Generate(RequestId id, EngineRequest request, std::shared_ptr<RequestSink> sink) {
    RequestEvent last;
    last.id = id;
    last.finished = true;
    last.finish_reason = finish_reason;
    last.usage.prompt_tokens = static_cast<int64_t>(request.prompt.size());
    int32_t i = 0;
    for (; i < request.sampling.max_tokens; ++i) {
      std::this_thread::sleep_for(interval);
      if (IsCancelled(id)) break;
      RequestEvent event;
      event.id = id;
      if (i == 0) event.prompt_logprobs = ScriptedPromptLogprobs(request);
      const int32_t token = TinyTokenId(static_cast<unsigned char>(script[i % script.size()]));
      event.tokens = {token};
      if (request.logprobs) event.logprobs = {{token, -0.5f, {{token, -0.5f}}}};
      sink->OnEvent(std::move(event));
    }
    if (IsCancelled(id)) {
      last.finish_reason = FinishReason::kCancelled;
      last.status = absl::CancelledError("cancelled by the client");
    }
    last.usage.completion_tokens = i;
    last.usage.decode_solver.Add({5, 1e-3f, false});
    --running_;
    sink->OnEvent(std::move(last));
  }

  mutable std::mutex mutex_;
  std::string backend_failure_;
  RequestId next_id_ = 1;
  std::map<RequestId, bool> cancelled_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> running_{0};
};

}  // namespace ridge::testing
