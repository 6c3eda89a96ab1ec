#include "tools/bench/engine_load.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>

#include "base/status_macros.h"
#include "engine/engine.h"

namespace ridge {
namespace {

// Counts a load's finished requests and tokens; the driver waits on it.
class LoadTally {
 public:
  void Add(const RequestEvent& event) {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_ += static_cast<int64_t>(event.tokens.size());
    if (!event.finished) return;
    ++finished_;
    failed_ += event.status.ok() ? 0 : 1;
    ttft_sum_ += event.usage.time_to_first_token_seconds;
    changed_.notify_all();
  }
  // Blocks until more than `seen` requests have finished; returns how many have.
  int64_t WaitBeyond(int64_t seen) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return finished_ > seen; });
    return finished_;
  }
  EngineLoadResult Result(double seconds, int64_t prefill_token_budget) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {seconds, tokens_, failed_, finished_ > 0 ? ttft_sum_ / finished_ : 0.0,
            prefill_token_budget};
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t tokens_ = 0, finished_ = 0, failed_ = 0;
  double ttft_sum_ = 0;
};

class TallySink final : public RequestSink {
 public:
  explicit TallySink(LoadTally* tally) : tally_(tally) {}
  void OnEvent(RequestEvent event) override { tally_->Add(event); }

 private:
  LoadTally* tally_;
};

}  // namespace

absl::StatusOr<EngineLoadResult> RunEngineLoad(ModelBackend* backend, const EngineLoadOptions& o) {
  if (o.concurrency < 1 || o.requests < 1 || o.prompt_tokens < 1 || o.new_tokens < 1 ||
      o.prompt_id_limit < 1 || o.prompt_id_limit > backend->config().vocab_size) {
    return absl::InvalidArgumentError("engine load: sizes must be >= 1, ids within the vocabulary");
  }
  EngineOptions engine_options;
  engine_options.max_slots = o.concurrency;
  engine_options.max_waiting = o.concurrency;
  engine_options.prefill_token_budget = o.prefill_token_budget > 0
                                            ? o.prefill_token_budget
                                            : backend->preferred_prefill_tokens_per_step();
  engine_options.max_prompt_tokens = std::max(engine_options.max_prompt_tokens, o.prompt_tokens);
  LoadTally tally;  // outlives the engine, whose sinks point at it
  auto sink = std::make_shared<TallySink>(&tally);
  ASSIGN_OR_RETURN(auto engine, Engine::Create(backend, engine_options, nullptr));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, o.prompt_id_limit - 1);
  auto submit = [&]() -> absl::Status {
    EngineRequest r;
    r.prompt.resize(o.prompt_tokens);
    for (int32_t& t : r.prompt) t = id(rng);
    r.sampling.max_tokens = o.new_tokens;
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    return engine->Submit(std::move(r), sink).status();
  };
  const auto start = std::chrono::steady_clock::now();
  int64_t submitted = 0, finished = 0;
  for (; submitted < std::min(o.concurrency, o.requests); ++submitted) RETURN_IF_ERROR(submit());
  while (finished < o.requests) {
    finished = tally.WaitBeyond(finished);
    for (; submitted < o.requests && submitted - finished < o.concurrency; ++submitted) {
      RETURN_IF_ERROR(submit());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return tally.Result(seconds, engine_options.prefill_token_budget);
}

absl::Status ReportEngineLoad(ModelBackend* backend, const EngineLoadOptions& o) {
  ASSIGN_OR_RETURN(const EngineLoadResult r, RunEngineLoad(backend, o));
  std::printf(
      "engine load: %lld clients, %lld requests of %lld prompt + %d new tokens, prefill budget "
      "%lld: %.0f generated tok/s, %.1f req/s, mean TTFT %.1f ms, %lld failed\n",
      static_cast<long long>(o.concurrency), static_cast<long long>(o.requests),
      static_cast<long long>(o.prompt_tokens), o.new_tokens,
      static_cast<long long>(r.prefill_token_budget), r.generated_tokens / r.seconds,
      o.requests / r.seconds, 1e3 * r.mean_ttft_seconds, static_cast<long long>(r.failed));
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> EngineLoadClients(const std::vector<double>& list) {
  std::vector<int64_t> clients;
  for (double c : list) {
    if (!(c >= 1 && c <= 4096) || c != static_cast<int64_t>(c)) {
      return absl::InvalidArgumentError("--engine-load must be whole numbers from 1 to 4096");
    }
    clients.push_back(static_cast<int64_t>(c));
  }
  return clients;
}

}  // namespace ridge
