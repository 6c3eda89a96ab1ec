// The Prometheus metrics of docs/DESIGN.md, fed by the engine (EngineObserver) and the HTTP
// layer, exposed in the text format for GET /metrics. This class owns the registry.
//
// Solver histograms: the engine reports per step, per phase, aggregated SolverStats (solves,
// total iterations, sum of relative residuals), not each solve. Each step adds `solves`
// observations to solver_iterations{phase} and solver_relative_residual{phase}, all placed in
// the bucket of that step's mean, with the exact total added to _sum. So _count is the number
// of head solves and _sum / _count the exact mean; the buckets are the distribution of per-step
// means weighted by solves (individual solves of one step are not resolved).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "engine/engine_observer.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/process_stats.h"

namespace ridge {

class PrometheusMetrics final : public EngineObserver {
 public:
  // layer_type: the solver series' label ("mesa", "gka"), "" for a model without solves.
  explicit PrometheusMetrics(std::string layer_type = "mesa");

  void OnStep(const StepReport& report) override;
  void OnRequestFinished(FinishReason reason, const absl::Status& status,
                         const RequestUsage& usage) override;
  void OnInterTokenLatency(double seconds) override;
  void OnRejected(const absl::Status& status) override;

  // Gauges from the engine's current state (called before each scrape, so an idle engine that
  // runs no more steps still shows freed slots).
  void SetSnapshot(const EngineSnapshot& snapshot);

  // ridgeserve_http_connections{state="open"|"limit"} (called before each scrape).
  void SetHttpConnections(int64_t open, int64_t limit);
  // The standard process_* series (called before each scrape).
  void SetProcess(const ProcessStats& stats);

  // The Prometheus text exposition format (version 0.0.4).
  std::string Serialize() const;

  // requests_total{status}: "ok" or the lower-case status code name ("cancelled",
  // "deadline_exceeded", "resource_exhausted", "invalid_argument", ...).
  static std::string StatusLabel(const absl::Status& status);

 private:
  // The KV gauges and ridgeserve_memory_usage_ratio from the pools' use.
  void SetMemory(int64_t slots_used, int64_t slots_total, int64_t blocks_used,
                 int64_t blocks_total);
  void ObserveSolver(const char* phase, const SolverStats& stats);

  std::string layer_type_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_total_;
  prometheus::Histogram& request_duration_;
  prometheus::Histogram& time_to_first_token_;
  prometheus::Histogram& inter_token_latency_;
  prometheus::Histogram& queue_time_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generation_tokens_;
  prometheus::Gauge& requests_running_;
  prometheus::Gauge& requests_waiting_;
  prometheus::Gauge& slots_used_;
  prometheus::Gauge& slots_total_;
  prometheus::Gauge& kv_blocks_used_;
  prometheus::Gauge& kv_blocks_total_;
  prometheus::Gauge& memory_usage_;
  prometheus::Counter& preemptions_;
  prometheus::Counter& prefix_queried_tokens_;
  prometheus::Counter& prefix_hit_tokens_;
  prometheus::Gauge& prefix_snapshots_;
  prometheus::Gauge& prefix_bytes_;
  prometheus::Counter& prefix_evictions_;
  prometheus::Family<prometheus::Gauge>& http_connections_;
  prometheus::Counter& process_cpu_;
  double process_cpu_reported_ = 0;  // what process_cpu_ has counted (under process_mutex_)
  std::mutex process_mutex_;
  prometheus::Gauge& process_resident_;
  prometheus::Gauge& process_virtual_;
  prometheus::Gauge& process_open_fds_;
  prometheus::Gauge& process_max_fds_;
  prometheus::Gauge& process_threads_;
  prometheus::Gauge& process_start_time_;
  prometheus::Histogram& batch_size_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Histogram>& solver_iterations_;
  prometheus::Family<prometheus::Histogram>& solver_residual_;
  prometheus::Family<prometheus::Counter>& solver_capped_;
};

}  // namespace ridge
