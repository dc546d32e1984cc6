"""Alert rules: generated == committed, field-report thresholds, and promtool proving each alert fires and stays quiet."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from operations.alert_rules import RULES_PATH, RULES_TEST_PATH, AlertThresholds, alert_rules_yaml, render_alert_rules
from operations.dashboard import promql_metric_names, triton_metric_names
from operations.errors import MonitorConfigError


def rules_by_name(thresholds: AlertThresholds = AlertThresholds()) -> dict[str, dict]:
    return {r["alert"]: r for g in render_alert_rules(thresholds)["groups"] for r in g["rules"]}


def test_committed_rule_file_is_the_generated_one():
    assert RULES_PATH.read_text() == alert_rules_yaml(AlertThresholds()), "run `python -m operations.alert_rules`"


def test_default_thresholds_are_the_field_reports():
    rules = rules_by_name()
    for twin in ("Gpu", "Cpu"):
        assert "< 0.3" in rules[f"Triton{twin}UtilisationLow"]["expr"]  # the CPU one: per host, while it serves
        assert rules[f"Triton{twin}UtilisationLow"]["for"] == "5m"
        assert rules[f"Triton{twin}MemoryHigh"]["expr"].endswith("> 0.9")
    assert "/ 1e6 > 0.08 unless" in rules["TritonP99LatencyNearSla"]["expr"]  # 80% of 100 ms, in seconds
    assert rules["TritonErrorRateHigh"]["expr"].endswith("> 0.005")
    assert rules["TritonErrorRateHigh"]["labels"]["severity"] == "critical"
    assert rules["TritonQueueDepthGrowing"]["labels"]["severity"] == "critical"


def test_sla_is_configurable():
    rule = rules_by_name(AlertThresholds(p99_sla_ms=250))["TritonP99LatencyNearSla"]
    assert "> 0.2 unless" in rule["expr"] and "250 ms" in rule["annotations"]["summary"]


@pytest.mark.parametrize("field, value", [
    ("p99_sla_ms", 0), ("error_rate", 1.5), ("memory_fraction", True), ("low_utilisation_for", "5 minutes"),
    ("queue_min_depth", 0), ("job", "bad job"),
])
def test_invalid_threshold_names_the_field(field, value):
    with pytest.raises(MonitorConfigError, match=field):
        AlertThresholds(**{field: value})


def test_rules_select_only_real_triton_and_supervisor_metrics():
    from serving.backend.metrics import exposed_metric_names
    from serving.runtime.supervisor_metrics import METRIC_FAMILIES

    known = triton_metric_names() | set(METRIC_FAMILIES) | exposed_metric_names() | {"up"}
    for name, rule in rules_by_name().items():
        assert promql_metric_names(rule["expr"]) <= known, name


def test_every_alert_has_a_firing_and_a_quiet_promtool_case():
    cases = [c for t in yaml.safe_load(RULES_TEST_PATH.read_text())["tests"] for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert fired == quiet == set(rules_by_name())


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)")
@pytest.mark.parametrize("command", [["check", "rules", RULES_PATH.name], ["test", "rules", RULES_TEST_PATH.name]])
def test_promtool_accepts_rules_and_their_tests(command):
    result = subprocess.run(["promtool", *command], cwd=RULES_PATH.parent, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_latency_quantile_the_alerts_and_the_dashboard_read_is_one_the_server_publishes():
    """Triton publishes only the quantiles of `[server] latency_summary_quantiles`: a rule or panel
    reading another one would have no data (and an alert on it would never fire)."""
    import re

    from contracts.layout import SERVING_CONFIG
    from contracts.serving_spec import load_serving_spec
    from operations.dashboard import PANELS

    exprs = [r["expr"] for r in rules_by_name().values()] + [e for _, _, queries in PANELS for e, _ in queries]
    read = set()
    for expr in exprs:
        for values in re.findall(r'quantile=~?"([^"]+)"', expr):
            read |= set(values.split("|"))
    published = {f"{q:g}" for q, _ in load_serving_spec(SERVING_CONFIG).server.latency_summary_quantiles}
    assert "0.99" in read and read <= published, (read, published)


def test_the_backlog_thresholds_are_the_served_queue_cap_and_slot_count(serving_spec):
    """Two thresholds restate serving.toml (the realtime queue's cap; the generation model's running
    slots): a change there must come here too, or the alerts mean something else."""
    thresholds = AlertThresholds()
    realtime = min(serving_spec.priorities, key=lambda level: level.level)
    assert thresholds.queue_backlog_depth == realtime.queue.max_queue_size, "set AlertThresholds.queue_backlog_depth"
    slots = {int(m.options["max_running"]) for m in serving_spec.models if "max_running" in m.options}
    assert slots == {thresholds.llm_backlog_depth}, "set AlertThresholds.llm_backlog_depth"
