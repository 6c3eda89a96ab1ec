#include "server/prometheus_metrics.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "absl/status/status.h"
#include "base/build_info.h"
#include "prometheus/text_serializer.h"

namespace ridge {
namespace {

using prometheus::Histogram;

const Histogram::BucketBoundaries kRequestSeconds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                     5,    10,    20,   40,  80,   160, 320, 640};
const Histogram::BucketBoundaries kFirstTokenSeconds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                        0.1,   0.25,  0.5,  0.75, 1,    2.5,  5,
                                                        7.5,   10,    20,   40,   80};
const Histogram::BucketBoundaries kTokenGapSeconds = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
                                                      0.06,  0.08,   0.1,   0.15, 0.2,  0.3,
                                                      0.4,   0.5,    0.75,  1,    2.5};
const Histogram::BucketBoundaries kQueueSeconds = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                   0.5,   1,     2.5,  5,     10,   30,  60};
const Histogram::BucketBoundaries kStepSeconds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,    0.25,  0.5,    1,     2.5,  5};
const Histogram::BucketBoundaries kBatchSizes = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
const Histogram::BucketBoundaries kIterations = {1,  2,  3,  4,  5,  6,   8,   10,  12,  15,  20,
                                                 25, 30, 40, 50, 75, 100, 150, 200, 500, 1000};
const Histogram::BucketBoundaries kResiduals = {1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3,
                                                1e-2, 3e-2, 1e-1, 3e-1, 1};

prometheus::Histogram& AddHistogram(prometheus::Registry& registry, const std::string& name,
                                    const std::string& help,
                                    const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

// `count` observations of `mean` (in its bucket), adding `sum` to the histogram's sum.
void ObserveAggregate(Histogram& histogram, const Histogram::BucketBoundaries& bounds, double mean,
                      int64_t count, double sum) {
  if (count <= 0) return;
  std::vector<double> increments(bounds.size() + 1, 0.0);
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), mean) - bounds.begin();
  increments[bucket] = static_cast<double>(count);
  histogram.ObserveMultiple(increments, sum);
}

}  // namespace

PrometheusMetrics::PrometheusMetrics(std::string layer_type)
    : layer_type_(std::move(layer_type)),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_total_(prometheus::BuildCounter()
                          .Name("ridgeserve_requests_total")
                          .Help("Finished or rejected generation requests by final status (ok, "
                                "cancelled, deadline_exceeded, resource_exhausted, ...).")
                          .Register(*registry_)),
      request_duration_(AddHistogram(*registry_, "ridgeserve_request_duration_seconds",
                                     "End-to-end request latency, submit to last token.",
                                     kRequestSeconds)),
      time_to_first_token_(AddHistogram(*registry_, "ridgeserve_time_to_first_token_seconds",
                                        "Submit to first generated token.", kFirstTokenSeconds)),
      inter_token_latency_(AddHistogram(*registry_, "ridgeserve_inter_token_latency_seconds",
                                        "Time between consecutive tokens of a request.",
                                        kTokenGapSeconds)),
      queue_time_(AddHistogram(*registry_, "ridgeserve_queue_time_seconds",
                               "Submit to admission into a state slot.", kQueueSeconds)),
      prompt_tokens_(prometheus::BuildCounter()
                         .Name("ridgeserve_prompt_tokens_total")
                         .Help("Prompt tokens of finished requests.")
                         .Register(*registry_)
                         .Add({})),
      generation_tokens_(prometheus::BuildCounter()
                             .Name("ridgeserve_generation_tokens_total")
                             .Help("Generated tokens of finished requests.")
                             .Register(*registry_)
                             .Add({})),
      requests_running_(prometheus::BuildGauge()
                            .Name("ridgeserve_requests_running")
                            .Help("Requests holding a state slot.")
                            .Register(*registry_)
                            .Add({})),
      requests_waiting_(prometheus::BuildGauge()
                            .Name("ridgeserve_requests_waiting")
                            .Help("Requests queued for a state slot.")
                            .Register(*registry_)
                            .Add({})),
      slots_used_(prometheus::BuildGauge()
                      .Name("ridgeserve_state_slots_used")
                      .Help("State slots in use.")
                      .Register(*registry_)
                      .Add({})),
      slots_total_(prometheus::BuildGauge()
                       .Name("ridgeserve_state_slots")
                       .Help("State slots in the pool (--slots).")
                       .Register(*registry_)
                       .Add({})),
      kv_blocks_used_(prometheus::BuildGauge()
                          .Name("ridgeserve_kv_blocks_used")
                          .Help("KV-cache blocks held by sequences (0 without attention layers).")
                          .Register(*registry_)
                          .Add({})),
      kv_blocks_total_(prometheus::BuildGauge()
                           .Name("ridgeserve_kv_blocks")
                           .Help("KV-cache blocks in the pool (--kv-blocks, --kv-cache-memory).")
                           .Register(*registry_)
                           .Add({})),
      memory_usage_(prometheus::BuildGauge()
                        .Name("ridgeserve_memory_usage_ratio")
                        .Help("The fuller of the state-slot and KV-block pools, as a fraction "
                              "(0 to 1): the cache usage a load balancer routes by.")
                        .Register(*registry_)
                        .Add({})),
      preemptions_(prometheus::BuildCounter()
                       .Name("ridgeserve_preemptions_total")
                       .Help("Sequences preempted for KV blocks (recomputed when readmitted).")
                       .Register(*registry_)
                       .Add({})),
      prefix_queried_tokens_(
          prometheus::BuildCounter()
              .Name("ridgeserve_prefix_cache_queried_tokens_total")
              .Help("Prompt tokens of admitted requests looked up in the prefix cache.")
              .Register(*registry_)
              .Add({})),
      prefix_hit_tokens_(prometheus::BuildCounter()
                             .Name("ridgeserve_prefix_cache_hit_tokens_total")
                             .Help("Prompt tokens restored from the prefix cache, not computed.")
                             .Register(*registry_)
                             .Add({})),
      prefix_snapshots_(prometheus::BuildGauge()
                            .Name("ridgeserve_prefix_cache_snapshots")
                            .Help("States the prefix cache holds (--prefix-cache-memory).")
                            .Register(*registry_)
                            .Add({})),
      prefix_bytes_(prometheus::BuildGauge()
                        .Name("ridgeserve_prefix_cache_bytes")
                        .Help("Memory the prefix cache holds: its states, and the KV blocks "
                              "no running sequence shares.")
                        .Register(*registry_)
                        .Add({})),
      prefix_evictions_(prometheus::BuildCounter()
                            .Name("ridgeserve_prefix_cache_evictions_total")
                            .Help("Prefix-cache states evicted, least recently used first.")
                            .Register(*registry_)
                            .Add({})),
      http_connections_(prometheus::BuildGauge()
                            .Name("ridgeserve_http_connections")
                            .Help("HTTP connections: open now (state=\"open\"), and the most "
                                  "accepted at once (state=\"limit\").")
                            .Register(*registry_)),
      process_cpu_(prometheus::BuildCounter()
                       .Name("process_cpu_seconds_total")
                       .Help("User and system CPU time of the process, in seconds.")
                       .Register(*registry_)
                       .Add({})),
      process_resident_(prometheus::BuildGauge()
                            .Name("process_resident_memory_bytes")
                            .Help("Resident memory of the process, in bytes.")
                            .Register(*registry_)
                            .Add({})),
      process_virtual_(prometheus::BuildGauge()
                           .Name("process_virtual_memory_bytes")
                           .Help("Virtual memory of the process, in bytes.")
                           .Register(*registry_)
                           .Add({})),
      process_open_fds_(prometheus::BuildGauge()
                            .Name("process_open_fds")
                            .Help("Open file descriptors (sockets included).")
                            .Register(*registry_)
                            .Add({})),
      process_max_fds_(prometheus::BuildGauge()
                           .Name("process_max_fds")
                           .Help("The most file descriptors the process may open.")
                           .Register(*registry_)
                           .Add({})),
      process_threads_(prometheus::BuildGauge()
                           .Name("process_threads")
                           .Help("Threads of the process.")
                           .Register(*registry_)
                           .Add({})),
      process_start_time_(prometheus::BuildGauge()
                              .Name("process_start_time_seconds")
                              .Help("When the process started, in seconds since the Unix epoch.")
                              .Register(*registry_)
                              .Add({})),
      batch_size_(AddHistogram(*registry_, "ridgeserve_batch_size",
                               "Sequences advanced by one engine step (prefill and decode).",
                               kBatchSizes)),
      step_duration_(prometheus::BuildHistogram()
                         .Name("ridgeserve_step_duration_seconds")
                         .Help("Wall time of an engine step's model work, by phase: prefill "
                               "(prompt chunks only), decode (one token per sequence only) or "
                               "mixed.")
                         .Register(*registry_)),
      solver_iterations_(prometheus::BuildHistogram()
                             .Name("ridgeserve_solver_iterations")
                             .Help("Solver iterations per head solve, by phase and layer type "
                                   "(aggregated per step: buckets hold per-step means weighted "
                                   "by solves; _sum and _count are exact).")
                             .Register(*registry_)),
      solver_residual_(prometheus::BuildHistogram()
                           .Name("ridgeserve_solver_relative_residual")
                           .Help("Final relative residual ||r||/||r0|| per head solve, by phase "
                                 "and layer type (aggregated per step like "
                                 "ridgeserve_solver_iterations).")
                           .Register(*registry_)),
      solver_capped_(prometheus::BuildCounter()
                         .Name("ridgeserve_solver_capped_total")
                         .Help("Head solves stopped by max_iterations before reaching the "
                               "tolerance, by phase.")
                         .Register(*registry_)) {
  // Create every labelled series up front so a scrape shows them before the first request.
  SetHttpConnections(0, 0);
  const BuildInfo& build = GetBuildInfo();
  prometheus::BuildGauge()
      .Name("ridgeserve_build_info")
      .Help("Always 1; the labels say what this binary is.")
      .Register(*registry_)
      .Add({{"version", build.version},
            {"revision", build.revision},
            {"build_type", build.build_type},
            {"compiler", build.compiler},
            {"cuda", build.cuda ? "yes" : "no"}})
      .Set(1);
  for (const char* status : {"ok", "cancelled", "deadline_exceeded", "resource_exhausted"}) {
    requests_total_.Add({{"status", status}});
  }
  for (const char* phase : {"prefill", "decode", "mixed"}) {
    step_duration_.Add({{"phase", phase}}, kStepSeconds);
  }
  for (const char* phase : {"prefill", "decode"}) {
    if (layer_type_.empty()) continue;
    solver_iterations_.Add({{"phase", phase}, {"layer_type", layer_type_}}, kIterations);
    solver_residual_.Add({{"phase", phase}, {"layer_type", layer_type_}}, kResiduals);
    solver_capped_.Add({{"phase", phase}});
  }
}

std::string PrometheusMetrics::StatusLabel(const absl::Status& status) {
  if (status.ok()) return "ok";
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

void PrometheusMetrics::ObserveSolver(const char* phase, const SolverStats& stats) {
  if (stats.solves == 0) return;
  const prometheus::Labels labels = {{"phase", phase}, {"layer_type", layer_type_}};
  ObserveAggregate(solver_iterations_.Add(labels, kIterations), kIterations, stats.MeanIterations(),
                   stats.solves, static_cast<double>(stats.total_iterations));
  ObserveAggregate(solver_residual_.Add(labels, kResiduals), kResiduals,
                   stats.MeanRelativeResidual(), stats.solves, stats.sum_relative_residual);
  if (stats.capped > 0) solver_capped_.Add({{"phase", phase}}).Increment(stats.capped);
}

void PrometheusMetrics::OnStep(const StepReport& report) {
  const int64_t sequences = report.prefill_sequences + report.decode_sequences;
  if (sequences > 0) {
    batch_size_.Observe(static_cast<double>(sequences));
    const char* phase = report.prefill_sequences == 0  ? "decode"
                        : report.decode_sequences == 0 ? "prefill"
                                                       : "mixed";
    step_duration_.Add({{"phase", phase}}, kStepSeconds).Observe(report.seconds);
  }
  ObserveSolver("prefill", report.prefill_solver);
  ObserveSolver("decode", report.decode_solver);
  requests_running_.Set(static_cast<double>(report.running));
  requests_waiting_.Set(static_cast<double>(report.waiting));
  slots_used_.Set(static_cast<double>(report.slots_used));
  slots_total_.Set(static_cast<double>(report.slots_total));
  SetMemory(report.slots_used, report.slots_total, report.kv_blocks_used, report.kv_blocks_total);
  if (report.preemptions > 0) preemptions_.Increment(static_cast<double>(report.preemptions));
  prefix_queried_tokens_.Increment(static_cast<double>(report.prefix_queried_tokens));
  prefix_hit_tokens_.Increment(static_cast<double>(report.prefix_hit_tokens));
  prefix_evictions_.Increment(static_cast<double>(report.prefix_evictions));
  prefix_snapshots_.Set(static_cast<double>(report.prefix_snapshots));
  prefix_bytes_.Set(static_cast<double>(report.prefix_snapshot_bytes));
}

void PrometheusMetrics::OnRequestFinished(FinishReason reason, const absl::Status& status,
                                          const RequestUsage& usage) {
  (void)reason;
  requests_total_.Add({{"status", StatusLabel(status)}}).Increment();
  request_duration_.Observe(usage.total_seconds);
  queue_time_.Observe(usage.queue_seconds);
  if (usage.completion_tokens > 0) time_to_first_token_.Observe(usage.time_to_first_token_seconds);
  prompt_tokens_.Increment(static_cast<double>(usage.prompt_tokens));
  generation_tokens_.Increment(static_cast<double>(usage.completion_tokens));
}

void PrometheusMetrics::OnInterTokenLatency(double seconds) {
  inter_token_latency_.Observe(seconds);
}

void PrometheusMetrics::OnRejected(const absl::Status& status) {
  requests_total_.Add({{"status", StatusLabel(status)}}).Increment();
}

void PrometheusMetrics::SetSnapshot(const EngineSnapshot& snapshot) {
  requests_running_.Set(static_cast<double>(snapshot.running));
  requests_waiting_.Set(static_cast<double>(snapshot.waiting));
  slots_used_.Set(static_cast<double>(snapshot.slots_used));
  slots_total_.Set(static_cast<double>(snapshot.slots_total));
  prefix_snapshots_.Set(static_cast<double>(snapshot.prefix_snapshots));
  prefix_bytes_.Set(static_cast<double>(snapshot.prefix_cache_bytes));
  SetMemory(snapshot.slots_used, snapshot.slots_total, snapshot.kv_blocks_used,
            snapshot.kv_blocks_total);
}

void PrometheusMetrics::SetMemory(int64_t slots_used, int64_t slots_total, int64_t blocks_used,
                                  int64_t blocks_total) {
  kv_blocks_used_.Set(static_cast<double>(blocks_used));
  kv_blocks_total_.Set(static_cast<double>(blocks_total));
  auto share = [](int64_t used, int64_t total) {
    return total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
  };
  memory_usage_.Set(std::max(share(slots_used, slots_total), share(blocks_used, blocks_total)));
}

void PrometheusMetrics::SetHttpConnections(int64_t open, int64_t limit) {
  http_connections_.Add({{"state", "open"}}).Set(static_cast<double>(open));
  http_connections_.Add({{"state", "limit"}}).Set(static_cast<double>(limit));
}

void PrometheusMetrics::SetProcess(const ProcessStats& stats) {
  {
    std::lock_guard<std::mutex> lock(process_mutex_);
    if (stats.cpu_seconds > process_cpu_reported_) {
      process_cpu_.Increment(stats.cpu_seconds - process_cpu_reported_);
      process_cpu_reported_ = stats.cpu_seconds;
    }
  }
  process_resident_.Set(static_cast<double>(stats.resident_bytes));
  process_virtual_.Set(static_cast<double>(stats.virtual_bytes));
  process_open_fds_.Set(static_cast<double>(stats.open_fds));
  process_max_fds_.Set(static_cast<double>(stats.max_fds));
  process_threads_.Set(static_cast<double>(stats.threads));
  process_start_time_.Set(stats.start_time_seconds);
}

std::string PrometheusMetrics::Serialize() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace ridge
