"""The generation model's metric names are one source of truth for the alert rules and dashboard."""
from __future__ import annotations

from operations.alert_rules import AlertThresholds, render_alert_rules
from operations.dashboard import promql_metric_names, render_dashboard, triton_metric_names
from serving.generation.metrics import ALL_METRICS


def sample_names() -> set[str]:
    names = set()
    for metric in ALL_METRICS:
        names |= {f"{metric.name}_{s}" for s in ("bucket", "sum", "count")} if metric.kind == "histogram" else {metric.name}
    return names


def test_the_scraped_metric_list_holds_exactly_the_defined_generation_metrics():
    assert {n for n in triton_metric_names() if n.startswith("llm_")} == sample_names()


def test_kv_and_wait_queue_alerts_select_generation_metrics():
    rules = {r["alert"]: r for g in render_alert_rules(AlertThresholds())["groups"] for r in g["rules"]}
    assert rules["LlmKvCacheNearlyFull"]["expr"].endswith("> 0.9")
    assert promql_metric_names(rules["LlmWaitQueueGrowing"]["expr"]) == {"llm_sequences_waiting"}


def test_dashboard_has_the_generation_panels():
    titles = " | ".join(p["title"] for p in render_dashboard()["panels"])
    for topic in ("running and waiting", "KV cache", "prefix cache hit rate", "time to first token", "inter-token latency", "tokens/s"):
        assert topic in titles, topic
    used = {n for p in render_dashboard()["panels"] for t in p["targets"] for n in promql_metric_names(t["expr"])}
    assert {n for n in used if n.startswith("llm_")} <= sample_names()
