"""A real Prometheus (Debian's) scraping the session's real tritonserver, started and stopped by
operations.monitor: the target comes UP, Triton metrics and every dashboard query answer through
Prometheus's HTTP API, and all alert rules evaluate without error."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from conftest import poll_until
from operations.alert_rules import alert_rules_yaml, render_alert_rules, thresholds_for_config
from operations.dashboard import PANELS, promql_metric_names, triton_metric_names
from operations.monitor import api_get, scrape_metric_names, start_monitoring, stop_monitoring

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)"),
]
DEADLINE_S = 45.0


def wait_for(check, what: str, deadline: float):
    """`check()`'s first truthy value before `deadline` (monotonic), else the test fails naming `what`."""
    result = poll_until(check, bool, max(0.0, deadline - time.monotonic()), interval_s=0.5)
    if not result:
        pytest.fail(f"timed out waiting for {what}")
    return result


def instant(url: str, expr: str) -> list[dict]:
    return api_get(url, "/api/v1/query", query=expr.replace("$model", ".*").replace("$__rate_interval", "30s"))["result"]


@pytest.fixture(scope="module")
def prometheus(triton_server, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("monitor")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"partitions": {"default": {"metrics": triton_server.metrics_url}}}))
    state = start_monitoring(manifest, tmp_path / "prometheus", scrape_interval="1s", timeout=30)
    yield state
    assert stop_monitoring(tmp_path / "prometheus"), "Prometheus was no longer running at teardown"


def test_prometheus_scrapes_triton_and_answers_every_dashboard_query(prometheus, triton_server):
    url, deadline = prometheus["url"], time.monotonic() + DEADLINE_S
    up = lambda: [t for t in api_get(url, "/api/v1/targets")["activeTargets"] if t["health"] == "up"]
    (target,) = wait_for(up, "the Triton target to be UP", deadline)
    assert target["labels"]["partition"] == "default" and target["scrapeUrl"] == triton_server.metrics_url
    counts = wait_for(lambda: instant(url, 'nv_inference_count{model="digit_classifier"}'), "nv_inference_count", deadline)
    assert counts[0]["metric"]["job"] == "triton"

    live = set(scrape_metric_names(triton_server.metrics_url))
    assert triton_metric_names(gpu=False) - live == set(), "the metric-name fixture no longer matches this Triton"
    for _, _, queries in PANELS:
        for expr, _ in queries:
            if promql_metric_names(expr) <= live | {"up"}:  # GPU panels have no data without a GPU
                wait_for(lambda: instant(url, expr), f"data for dashboard query {expr}", deadline)


def test_prometheus_loads_and_evaluates_every_alert_rule(prometheus):
    url, deadline = prometheus["url"], time.monotonic() + DEADLINE_S
    rules = lambda: [r for g in api_get(url, "/api/v1/rules")["groups"] for r in g["rules"] if r.get("lastEvaluation", "0001").startswith("20")]
    # the rules rendered for the served serving.toml (each model's backlog alert at its own queue cap)
    assert Path(prometheus["rules"]).read_text() == alert_rules_yaml(thresholds_for_config())
    expected = sum(len(group["rules"]) for group in render_alert_rules(thresholds_for_config())["groups"])
    evaluated = wait_for(lambda: len(rules()) == expected and rules(), f"all {expected} rules to be evaluated", deadline)
    assert {r["health"] for r in evaluated} == {"ok"}, [(r["name"], r.get("lastError")) for r in evaluated]
    assert not [r for r in evaluated if r["name"] == "TritonTargetDown" and r["state"] != "inactive"]
