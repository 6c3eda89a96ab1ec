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
  // `first_wave`: the request was one of those submitted at the start.
  void Add(const RequestEvent& event, bool first_wave) {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_ += static_cast<int64_t>(event.tokens.size());
    if (!event.finished) return;
    ++finished_;
    failed_ += event.status.ok() ? 0 : 1;
    ttfts_.push_back(event.usage.time_to_first_token_seconds);
    if (!first_wave) steady_ttfts_.push_back(event.usage.time_to_first_token_seconds);
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
    EngineLoadResult r;
    r.seconds = seconds;
    r.generated_tokens = tokens_;
    r.failed = failed_;
    r.mean_ttft_seconds = Mean(ttfts_);
    std::vector<double> sorted = ttfts_;
    std::sort(sorted.begin(), sorted.end());
    r.p50_ttft_seconds = Quantile(sorted, 0.50);
    r.p99_ttft_seconds = Quantile(sorted, 0.99);
    r.steady_mean_ttft_seconds = Mean(steady_ttfts_);
    r.prefill_token_budget = prefill_token_budget;
    return r;
  }

 private:
  static double Mean(const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  }
  // The nearest-rank quantile of sorted values (0 when there are none).
  static double Quantile(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0.0;
    const auto rank = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(rank, sorted.size() - 1)];
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t tokens_ = 0, finished_ = 0, failed_ = 0;
  std::vector<double> ttfts_, steady_ttfts_;  // of the finished requests
};

class TallySink final : public RequestSink {
 public:
  TallySink(LoadTally* tally, bool first_wave) : tally_(tally), first_wave_(first_wave) {}
  void OnEvent(RequestEvent event) override { tally_->Add(event, first_wave_); }

 private:
  LoadTally* tally_;
  bool first_wave_;
};

}  // namespace

absl::StatusOr<EngineLoadResult> RunEngineLoad(ModelBackend* backend, const EngineLoadOptions& o) {
  if (o.concurrency < 1 || o.requests < 1 || o.prompt_tokens < 1 || o.new_tokens < 1 ||
      o.prompt_id_limit < 1 || o.prompt_id_limit > backend->spec().vocab_size) {
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
  auto first_wave_sink = std::make_shared<TallySink>(&tally, true);
  auto steady_sink = std::make_shared<TallySink>(&tally, false);
  ASSIGN_OR_RETURN(auto engine, Engine::Create(backend, engine_options, nullptr));
  int64_t submitted = 0, finished = 0;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, o.prompt_id_limit - 1);
  auto submit = [&]() -> absl::Status {
    EngineRequest r;
    r.prompt.resize(o.prompt_tokens);
    for (int32_t& t : r.prompt) t = id(rng);
    r.sampling.max_tokens = o.new_tokens;
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    return engine->Submit(std::move(r), submitted < o.concurrency ? first_wave_sink : steady_sink)
        .status();
  };
  const auto start = std::chrono::steady_clock::now();
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
      "%lld: %.0f generated tok/s, %.1f req/s, mean TTFT %.1f ms, %lld failed; TTFT p50 / p99 "
      "%.1f / %.1f ms, mean TTFT after the first %lld requests %.1f ms\n",
      static_cast<long long>(o.concurrency), static_cast<long long>(o.requests),
      static_cast<long long>(o.prompt_tokens), o.new_tokens,
      static_cast<long long>(r.prefill_token_budget), r.generated_tokens / r.seconds,
      o.requests / r.seconds, 1e3 * r.mean_ttft_seconds, static_cast<long long>(r.failed),
      1e3 * r.p50_ttft_seconds, 1e3 * r.p99_ttft_seconds, static_cast<long long>(o.concurrency),
      1e3 * r.steady_mean_ttft_seconds);
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
