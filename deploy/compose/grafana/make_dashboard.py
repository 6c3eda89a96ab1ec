"""Writes dashboards/ridgeserve.json, the Grafana dashboard of the Compose stack (and of any
Grafana scraping ridgeserve): requests and errors by status, latency percentiles, tokens/s,
running and waiting requests, slots, KV blocks and memory use, solver iterations by phase and
layer type (a heatmap), capped solves, preemptions, and the prefix cache (hit rate, what it
holds, evictions) and open HTTP connections. The JSON is committed; tests/deploy checks
it is what this script writes and that every metric it names is exported.

    python3 deploy/compose/grafana/make_dashboard.py
"""
import json
import pathlib

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}


def panel(title, exprs, x, y, w=12, h=8, unit="short", kind="timeseries", legends=None,
          overrides=()):
    targets = []
    for i, expr in enumerate(exprs):
        target = {"datasource": DATASOURCE, "expr": expr, "refId": chr(ord("A") + i)}
        if legends:
            target["legendFormat"] = legends[i]
        if kind == "heatmap":
            target["format"] = "heatmap"
            target["legendFormat"] = "{{le}}"
        targets.append(target)
    return {
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": list(overrides)},
        "targets": targets,
    }


def quantiles(metric, title, x, y):
    exprs = [f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[1m])))"
             for q in ("0.5", "0.9", "0.99")]
    return panel(title, exprs, x, y, unit="s", legends=["p50", "p90", "p99"])


def dashboard():
    panels = [
        panel("Requests by status (per second)",
              ["sum by (status) (rate(ridgeserve_requests_total[1m]))"], 0, 0,
              unit="reqps", legends=["{{status}}"]),
        panel("Generated and prompt tokens per second",
              ["sum(rate(ridgeserve_generation_tokens_total[1m]))",
               "sum(rate(ridgeserve_prompt_tokens_total[1m]))"], 12, 0,
              legends=["generated", "prompt"]),
        quantiles("ridgeserve_time_to_first_token_seconds", "Time to first token", 0, 8),
        quantiles("ridgeserve_inter_token_latency_seconds", "Inter-token latency", 12, 8),
        quantiles("ridgeserve_request_duration_seconds", "End-to-end request latency", 0, 16),
        quantiles("ridgeserve_queue_time_seconds", "Time in the queue", 12, 16),
        panel("Running and waiting requests",
              ["sum(ridgeserve_requests_running)", "sum(ridgeserve_requests_waiting)"], 0, 24,
              legends=["running", "waiting"]),
        panel("State slots and KV blocks in use",
              ["sum(ridgeserve_state_slots_used)", "sum(ridgeserve_state_slots)",
               "sum(ridgeserve_kv_blocks_used)", "sum(ridgeserve_kv_blocks)"], 12, 24,
              legends=["slots used", "slots", "KV blocks used", "KV blocks"]),
        panel("Memory use (the fuller pool)", ["ridgeserve_memory_usage_ratio"], 0, 32,
              unit="percentunit", legends=["{{instance}}"]),
        panel("Preemptions per second", ["sum(rate(ridgeserve_preemptions_total[5m]))"], 12, 32),
        # One heatmap a phase; the model's recurrent layers are one layer type ("mesa" or "gka").
        panel("Solver iterations per solve, decode (heatmap)",
              ["sum by (le) (rate(ridgeserve_solver_iterations_bucket{phase=\"decode\"}[1m]))"],
              0, 40, kind="heatmap"),
        panel("Solver iterations per solve, prefill (heatmap)",
              ["sum by (le) (rate(ridgeserve_solver_iterations_bucket{phase=\"prefill\"}[1m]))"],
              12, 40, kind="heatmap"),
        panel("Mean solver iterations",
              ["sum by (phase, layer_type) (rate(ridgeserve_solver_iterations_sum[1m]))"
               " / sum by (phase, layer_type) (rate(ridgeserve_solver_iterations_count[1m]))"],
              0, 48, legends=["{{phase}} {{layer_type}}"]),
        panel("Capped solves (share of solves)",
              ["sum by (phase) (rate(ridgeserve_solver_capped_total[5m]))"
               " / sum by (phase) (rate(ridgeserve_solver_iterations_count[5m]))"],
              12, 48, unit="percentunit", legends=["{{phase}}"]),
        panel("Step duration p90 by phase",
              ["histogram_quantile(0.9, sum by (le, phase) "
               "(rate(ridgeserve_step_duration_seconds_bucket[1m])))"], 0, 56,
              unit="s", legends=["{{phase}}"]),
        panel("Batch size (mean sequences a step)",
              ["sum(rate(ridgeserve_batch_size_sum[1m])) / sum(rate(ridgeserve_batch_size_count[1m]))"],
              12, 56),
        # Prefix cache: the share of admitted prompt tokens restored instead of computed (the
        # clamp keeps an idle server at 0 rather than no data), what it holds, what it drops.
        panel("Prefix cache hit rate",
              ["sum(rate(ridgeserve_prefix_cache_hit_tokens_total[5m]))"
               " / clamp_min(sum(rate(ridgeserve_prefix_cache_queried_tokens_total[5m])), 1)"],
              0, 64, unit="percentunit", legends=["hit tokens / queried tokens"]),
        panel("Prefix cache snapshots and memory",
              ["sum(ridgeserve_prefix_cache_snapshots)", "sum(ridgeserve_prefix_cache_bytes)"],
              12, 64, legends=["snapshots", "memory"],
              overrides=[{"matcher": {"id": "byName", "options": "memory"},
                          "properties": [{"id": "unit", "value": "bytes"},
                                         {"id": "custom.axisPlacement", "value": "right"}]}]),
        panel("Prefix cache evictions per second",
              ["sum(rate(ridgeserve_prefix_cache_evictions_total[5m]))"], 0, 72),
        # Sockets (streams and idle keep-alive ones) against --http-max-connections.
        panel("HTTP connections",
              ['sum(ridgeserve_http_connections{state="open"})',
               'sum(ridgeserve_http_connections{state="limit"})'],
              12, 72, legends=["open", "limit"]),
    ]
    for i, p in enumerate(panels):
        p["id"] = i + 1
    return {
        "uid": "ridgeserve",
        "title": "ridgeserve",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "tags": ["ridgeserve", "inference"],
        "panels": panels,
    }


def main():
    out = pathlib.Path(__file__).parent / "dashboards" / "ridgeserve.json"
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")


if __name__ == "__main__":
    main()
