"""A Grafana dashboard for the Triton partitions Prometheus scrapes (`python -m operations.dashboard`).

Latency percentiles come from Triton's latency summaries (`--metrics-config=summary_latencies=true`,
set by serving.runtime.server.ServerSettings); averages, queue time and batch size are ratios of Triton's
counters (batch size = inferences / executions, see Triton's metrics docs). Every query selects by
the `$datasource` and `$model` template variables, so the JSON imports into any Grafana.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from operations.alert_rules import AlertThresholds, served_error_share

DASHBOARD_PATH = Path(__file__).with_name("grafana_dashboard.json")
#: Names scraped from a real Triton 2.51 run (how: see the file's header) plus the documented GPU-only ones.
METRIC_NAMES_PATH = Path(__file__).with_name("triton_metric_names.txt")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_M = '{model=~"$model"}'
_RATE_WINDOW = "$__rate_interval"
_RATE = f"[{_RATE_WINDOW}]"


def _per_model_rate(metric: str) -> str:
    return f"sum by (partition, model) (rate({metric}{_M}{_RATE}))"


def _share_of_rates(part: str, rest: str) -> str:
    """part / (part + rest), per model: the share of one of two counters' rates (errors, overhead)."""
    return f"{_per_model_rate(part)} / ({_per_model_rate(part)} + {_per_model_rate(rest)})"


def _ratio(numerator: str, denominator: str) -> str:
    return f"{_per_model_rate(numerator)} / {_per_model_rate(denominator)}"


#: (title, unit, [(expr, legend)]) in display order.
PANELS: tuple[tuple[str, str, list[tuple[str, str]]], ...] = (
    ("Request latency P50 / P90 / P99 (Triton summary, sliding window)", "µs",
     [(f'nv_inference_request_summary_us{{model=~"$model", quantile=~"0.5|0.9|0.99"}}', "{{model}} p{{quantile}}")]),
    ("Average request latency (counters)", "µs",
     [(_ratio("nv_inference_request_duration_us", "nv_inference_request_success"), "{{model}}")]),
    ("Throughput", "reqps",
     [(_per_model_rate("nv_inference_request_success"), "{{model}} requests/s"),
      (_per_model_rate("nv_inference_count"), "{{model}} inferences/s")]),
    ("Queue time per request", "µs",
     [(_ratio("nv_inference_queue_duration_us", "nv_inference_request_success"), "{{model}} mean"),
      (f'nv_inference_queue_summary_us{{model=~"$model", quantile="0.99"}}', "{{model}} p99")]),
    ("Queue depth (pending requests)", "short",
     [(f"sum by (partition, model) (nv_inference_pending_request_count{_M})", "{{model}}")]),
    ("Average batch size (inferences / executions)", "short",
     [(_ratio("nv_inference_count", "nv_inference_exec_count"), "{{model}}")]),
    # Triton adds an execution's whole compute time to each of its requests' duration counters, so
    # these divide by requests (per execution would multiply by the batch size).
    ("Compute time per request (each request is charged its whole batch's time)", "µs",
     [(_ratio("nv_inference_compute_input_duration_us", "nv_inference_request_success"), "{{model}} input"),
      (_ratio("nv_inference_compute_infer_duration_us", "nv_inference_request_success"), "{{model}} infer"),
      (_ratio("nv_inference_compute_output_duration_us", "nv_inference_request_success"), "{{model}} output")]),
    ("Failures and rejections by reason (REJECTED: refused before execution, e.g. queue full or timed out)", "reqps",
     [(f"sum by (partition, model, reason) (rate(nv_inference_request_failure{_M}{_RATE}))", "{{model}} {{reason}}")]),
    ("Error rate (alert above 0.5%)", "percentunit",
     [(served_error_share(_RATE_WINDOW, "partition, model", 'model=~"$model"'), "{{model}}")]),
    ("Utilisation (alert below 30% for 5m while serving)", "percentunit",
     [("nv_cpu_utilization", "host CPU (seen by {{partition}})"), ("nv_gpu_utilization", "GPU {{gpu_uuid}}")]),
    ("Memory used (alert above 90%)", "percentunit",
     [("nv_cpu_memory_used_bytes / nv_cpu_memory_total_bytes", "host {{partition}}"),
      ("nv_gpu_memory_used_bytes / nv_gpu_memory_total_bytes", "GPU {{gpu_uuid}}")]),
    ("Scrape health (1 = up)", "short", [(f'up{{job="{AlertThresholds.job}"}}', "{{partition}} {{instance}}")]),
    # The onnxruntime_cpu backend's own batch metrics (serving/backend/metrics.py): batch fill and
    # scheduling overhead, as the field reports ask.
    ("Executed batch size: requests and rows per execution (backend histograms)", "short",
     [(f"histogram_quantile(0.5, sum by (partition, model, le) (rate(serving_batch_requests_bucket{_M}{_RATE})))", "{{model}} p50 requests"),
      (f"histogram_quantile(0.99, sum by (partition, model, le) (rate(serving_batch_requests_bucket{_M}{_RATE})))", "{{model}} p99 requests"),
      (_ratio("serving_batch_rows_sum", "serving_batch_rows_count"), "{{model}} mean rows")]),
    ("Padding efficiency: real / computed tokens (alert below 50% for 10m)", "percentunit",
     [(_ratio("serving_batch_real_tokens_total", "serving_batch_computed_tokens_total"), "{{model}}")]),
    ("Framework calls per sequence-length bucket", "ops",
     [(f"sum by (partition, model, bucket) (rate(serving_batch_bucket_calls_total{_M}{_RATE}))", "{{model}} <= {{bucket}} tokens")]),
    ("Time outside the framework call per execution (overhead share)", "percentunit",
     [(_share_of_rates("serving_batch_overhead_seconds_sum", "serving_batch_framework_seconds_sum"), "{{model}} overhead share")]),
    ("Time outside the framework call per execution (mean)", "s",
     [(_ratio("serving_batch_overhead_seconds_sum", "serving_batch_overhead_seconds_count"), "{{model}} mean overhead")]),
    ("Framework calls per ONNX Runtime session (wide: a thread per core; narrow: 1 thread) and why", "ops",
     [(f"sum by (partition, model, session, reason) (rate(serving_framework_calls_total{_M}{_RATE}))",
       "{{model}} {{session}} ({{reason}})")]),
    ("Session choice: median lone-call time per session and size (elements fed)", "s",
     [(f"max by (partition, model, model_instance, session, size_class) (serving_session_choice_median_seconds{_M})",
       "{{model}}/{{model_instance}} {{session}} {{size_class}}")]),
    ("Requests refused by the backend (input contract, isolated framework failures)", "reqps",
     [(f"sum by (partition, model, reason) (rate(serving_rejected_requests_total{_M}{_RATE}))", "{{model}} {{reason}}")]),
    # Generation models (serving/generation/metrics.py): the scheduler and KV cache inside the model.
    ("LLM: running and waiting sequences against the running slots (alerts: waiting keeps growing, or stays at the slots)", "short",
     [(f"sum by (partition, model) (llm_sequences_running{_M})", "{{model}} running"),
      (f"sum by (partition, model) (llm_sequences_waiting{_M})", "{{model}} waiting"),
      (f"sum by (partition, model) (llm_running_slots{_M})", "{{model}} running slots (max_running)")]),
    ("LLM: KV cache blocks in use (alert above 90%)", "percentunit",
     [(f"sum by (partition, model) (llm_kv_blocks_used{_M}) / (sum by (partition, model) (llm_kv_blocks_used{_M})"
       f" + sum by (partition, model) (llm_kv_blocks_free{_M}))", "{{model}}")]),
    ("LLM: prefix cache hit rate (prompt tokens served from shared blocks)", "percentunit",
     [(_ratio("llm_prefix_cache_hit_tokens_total", "llm_prefix_cache_lookup_tokens_total"), "{{model}}")]),
    ("LLM: time to first token P50 / P99", "s",
     [(f"histogram_quantile(0.5, sum by (le, model) (rate(llm_time_to_first_token_seconds_bucket{_M}{_RATE})))", "{{model}} p50"),
      (f"histogram_quantile(0.99, sum by (le, model) (rate(llm_time_to_first_token_seconds_bucket{_M}{_RATE})))", "{{model}} p99")]),
    ("LLM: inter-token latency P50 / P99", "s",
     [(f"histogram_quantile(0.5, sum by (le, model) (rate(llm_inter_token_latency_seconds_bucket{_M}{_RATE})))", "{{model}} p50"),
      (f"histogram_quantile(0.99, sum by (le, model) (rate(llm_inter_token_latency_seconds_bucket{_M}{_RATE})))", "{{model}} p99")]),
    ("LLM: output tokens/s and finished requests by reason", "short",
     [(_per_model_rate("llm_generated_tokens_total"), "{{model}} tokens/s"),
      (f"sum by (partition, model, reason) (rate(llm_requests_finished_total{_M}{_RATE}))", "{{model}} {{reason}}/s")]),
)


def render_dashboard(title: str = "Triton model serving") -> dict[str, Any]:
    panels = []
    for index, (panel_title, unit, queries) in enumerate(PANELS):
        panels.append({
            "id": index + 1, "type": "timeseries", "title": panel_title, "datasource": DATASOURCE,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
                        for i, (expr, legend) in enumerate(queries)],
        })
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
        {"name": "model", "type": "query", "datasource": DATASOURCE, "query": "label_values(nv_inference_count, model)",
         "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"}, "refresh": 2},
    ]
    return {
        "title": title, "uid": "triton-model-serving", "schemaVersion": 39, "version": 1, "editable": True,
        "tags": ["triton", "inference"], "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
        "templating": {"list": variables}, "panels": panels,
    }


_PROMQL_WORDS = {"by", "without", "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "bool", "offset"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (label matchers, ranges, groupings and functions removed)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    stripped = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", stripped)
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", stripped)
    names = set(re.findall(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", stripped))
    return {n for n in names if n not in _PROMQL_WORDS and not re.fullmatch(r"[0-9.e]+", n)}


def triton_metric_names(gpu: bool = True) -> set[str]:
    """The fixture's metric names; `gpu=False` keeps only those scraped here (no GPU on this host)."""
    scraped, documented = METRIC_NAMES_PATH.read_text().split("# GPU-only", 1)
    names = lambda text: {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}
    return names(scraped) | (names(documented.split("\n", 1)[1]) if gpu else set())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="operations.dashboard", description="Write the Grafana dashboard JSON (render_dashboard()).")
    parser.add_argument("--output", type=Path, default=DASHBOARD_PATH)
    args = parser.parse_args(argv)
    args.output.write_text(json.dumps(render_dashboard(), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
