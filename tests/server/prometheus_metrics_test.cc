// The /metrics exposition: documented names, labels, and aggregated solver histograms.
#include "server/prometheus_metrics.h"

#include <gtest/gtest.h>

#include <ctime>

#include "base/build_info.h"
#include "server/process_stats.h"
#include "tests/server/documented_metrics.h"

namespace ridge {
namespace {

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(PrometheusMetricsTest, ExposesEveryDocumentedName) {
  PrometheusMetrics metrics;
  const std::string text = metrics.Serialize();
  for (const char* name : testing::kDocumentedMetricNames) {
    EXPECT_TRUE(Has(text, std::string("# TYPE ") + name + " ")) << name << "\n" << text;
  }
  EXPECT_TRUE(Has(text, "# TYPE ridgeserve_requests_total counter"));
  EXPECT_TRUE(Has(text, "# TYPE ridgeserve_batch_size histogram"));
  EXPECT_TRUE(Has(text, "# TYPE ridgeserve_state_slots_used gauge"));
  EXPECT_TRUE(Has(text, "ridgeserve_solver_iterations_bucket{layer_type=\"mesa\",phase=\"decode\""))
      << text;
}

// The process_* series from /proc, and the build's labels.
TEST(PrometheusMetricsTest, ProcessAndBuildInfo) {
  const ProcessStats stats = ReadProcessStats();
  EXPECT_GT(stats.resident_bytes, 1 << 20);
  EXPECT_GE(stats.virtual_bytes, stats.resident_bytes);
  EXPECT_GE(stats.threads, 1);
  EXPECT_GT(stats.open_fds, 2);  // stdin, stdout, stderr at least
  EXPECT_GE(stats.max_fds, stats.open_fds);
  EXPECT_GE(stats.cpu_seconds, 0.0);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(stats.start_time_seconds, now + 1);
  EXPECT_GT(stats.start_time_seconds, now - 3600);  // this test started within the hour
  PrometheusMetrics metrics;
  metrics.SetProcess(stats);
  metrics.SetProcess(stats);  // the counter adds only what is new
  const std::string text = metrics.Serialize();
  EXPECT_TRUE(Has(text, "# TYPE process_cpu_seconds_total counter")) << text;
  EXPECT_TRUE(Has(text, "process_threads " + std::to_string(stats.threads))) << text;
  EXPECT_TRUE(Has(text, "ridgeserve_build_info{")) << text;
  EXPECT_TRUE(Has(text, "version=\"" + GetBuildInfo().version + "\"")) << text;
  EXPECT_FALSE(GetBuildInfo().version.empty());
}

TEST(PrometheusMetricsTest, RecordsStepsAndRequests) {
  PrometheusMetrics metrics;
  StepReport step;
  step.decode_sequences = 3;
  step.seconds = 0.002;
  // Three solves: 10, 20 and 30 iterations -> mean 20, sum 60, one capped.
  step.decode_solver.Add({10, 1e-4f, false});
  step.decode_solver.Add({20, 1e-4f, false});
  step.decode_solver.Add({30, 1e-2f, true});
  step.running = 3;
  step.slots_used = 3;
  step.slots_total = 8;
  metrics.OnStep(step);
  RequestUsage usage;
  usage.prompt_tokens = 5;
  usage.completion_tokens = 4;
  usage.total_seconds = 0.5;
  metrics.OnRequestFinished(FinishReason::kLength, absl::OkStatus(), usage);
  metrics.OnRequestFinished(FinishReason::kCancelled, absl::CancelledError("x"), usage);
  metrics.OnRejected(absl::ResourceExhaustedError("full"));
  metrics.OnInterTokenLatency(0.01);
  const std::string text = metrics.Serialize();
  EXPECT_TRUE(Has(text, "ridgeserve_requests_total{status=\"ok\"} 1")) << text;
  EXPECT_TRUE(Has(text, "ridgeserve_requests_total{status=\"cancelled\"} 1"));
  EXPECT_TRUE(Has(text, "ridgeserve_requests_total{status=\"resource_exhausted\"} 1"));
  EXPECT_TRUE(Has(text, "ridgeserve_prompt_tokens_total 10"));
  EXPECT_TRUE(Has(text, "ridgeserve_generation_tokens_total 8"));
  EXPECT_TRUE(Has(text, "ridgeserve_state_slots_used 3"));
  EXPECT_TRUE(Has(text, "ridgeserve_state_slots 8"));
  EXPECT_TRUE(
      Has(text, "ridgeserve_solver_iterations_count{layer_type=\"mesa\",phase=\"decode\"} 3"));
  EXPECT_TRUE(
      Has(text, "ridgeserve_solver_iterations_sum{layer_type=\"mesa\",phase=\"decode\"} 60"));
  // All three land in the bucket of the mean (20): le="15" holds none, le="20" all three.
  EXPECT_TRUE(
      Has(text,
          "ridgeserve_solver_iterations_bucket{layer_type=\"mesa\",phase=\"decode\",le=\"15\"} 0"));
  EXPECT_TRUE(
      Has(text,
          "ridgeserve_solver_iterations_bucket{layer_type=\"mesa\",phase=\"decode\",le=\"20\"} 3"));
  EXPECT_TRUE(Has(text, "ridgeserve_solver_capped_total{phase=\"decode\"} 1"));
  EXPECT_TRUE(Has(text, "ridgeserve_step_duration_seconds_count{phase=\"decode\"} 1"));
  EXPECT_TRUE(Has(text, "ridgeserve_batch_size_sum 3"));

  EXPECT_TRUE(Has(text, "ridgeserve_memory_usage_ratio 0.375")) << text;  // 3 of 8 slots

  EngineSnapshot snapshot;
  snapshot.slots_total = 8;
  snapshot.slots_used = 1;
  snapshot.kv_blocks_used = 6;
  snapshot.kv_blocks_total = 10;
  metrics.SetSnapshot(snapshot);
  EXPECT_TRUE(Has(metrics.Serialize(), "ridgeserve_memory_usage_ratio 0.6"));  // the KV pool
  snapshot = EngineSnapshot{};
  snapshot.slots_total = 8;
  metrics.SetSnapshot(snapshot);
  EXPECT_TRUE(Has(metrics.Serialize(), "ridgeserve_state_slots_used 0"));
}

}  // namespace
}  // namespace ridge
