// The metric names docs/DESIGN.md promises, checked by the unit and integration tests alike.
#pragma once

namespace ridge::testing {

inline constexpr const char* kDocumentedMetricNames[] = {
    "ridgeserve_requests_total",
    "ridgeserve_request_duration_seconds",
    "ridgeserve_time_to_first_token_seconds",
    "ridgeserve_inter_token_latency_seconds",
    "ridgeserve_queue_time_seconds",
    "ridgeserve_prompt_tokens_total",
    "ridgeserve_generation_tokens_total",
    "ridgeserve_requests_running",
    "ridgeserve_requests_waiting",
    "ridgeserve_state_slots_used",
    "ridgeserve_state_slots",
    "ridgeserve_batch_size",
    "ridgeserve_step_duration_seconds",
    "ridgeserve_solver_iterations",
    "ridgeserve_solver_relative_residual",
    "ridgeserve_solver_capped_total",
    "ridgeserve_kv_blocks_used",
    "ridgeserve_kv_blocks",
    "ridgeserve_memory_usage_ratio",
    "ridgeserve_preemptions_total",
    "ridgeserve_prefix_cache_queried_tokens_total",
    "ridgeserve_prefix_cache_hit_tokens_total",
    "ridgeserve_prefix_cache_snapshots",
    "ridgeserve_prefix_cache_bytes",
    "ridgeserve_prefix_cache_evictions_total",
    "ridgeserve_http_connections",
    "ridgeserve_build_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_threads",
    "process_start_time_seconds"};

}  // namespace ridge::testing
