"""Alert rules: generated == committed, field-report thresholds, and promtool proving each alert fires and stays quiet."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from operations.alert_rules import (RULES_PATH, RULES_TEST_PATH, AlertThresholds, alert_rules_yaml, render_alert_rules,
                                    thresholds_for_config)
from operations.dashboard import promql_metric_names, triton_metric_names
from operations.errors import MonitorConfigError


def rules_by_name(thresholds: AlertThresholds = AlertThresholds()) -> dict[str, dict]:
    return {r["alert"]: r for g in render_alert_rules(thresholds)["groups"] for r in g["rules"]}


def test_committed_rule_file_is_the_generated_one():
    assert RULES_PATH.read_text() == alert_rules_yaml(thresholds_for_config()), "run `python -m operations.alert_rules`"


def test_default_thresholds_are_the_field_reports():
    rules = rules_by_name()
    for twin in ("Gpu", "Cpu"):
        assert "< 0.3" in rules[f"Triton{twin}UtilisationLow"]["expr"]  # the CPU one: per host, while it serves
        assert rules[f"Triton{twin}UtilisationLow"]["for"] == "5m"
        assert rules[f"Triton{twin}MemoryHigh"]["expr"].endswith("> 0.9")
    assert "/ 1e6 > 0.08 unless" in rules["TritonP99LatencyNearSla"]["expr"]  # 80% of 100 ms, in seconds
    assert "> 0.005 and " in rules["TritonErrorRateHigh"]["expr"]
    assert rules["TritonErrorRateHigh"]["expr"].endswith(">= 5")
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


def with_own_realtime_queue(spec, sizes: dict[str, int]):
    """`spec` with some models given their own realtime queue size (`[models.<name>] max_queue_size`)."""
    from dataclasses import replace

    return replace(spec, models=tuple(replace(m, max_queue_size={"realtime": sizes[m.name]}) if m.name in sizes else m
                                      for m in spec.models))


def backlog_exprs(thresholds: AlertThresholds) -> list[str]:
    """The TritonQueueBacklogged rules' expressions (one rule per depth)."""
    return [r["expr"] for g in render_alert_rules(thresholds)["groups"] for r in g["rules"] if r["alert"] == "TritonQueueBacklogged"]


def test_the_backlog_depth_is_the_served_realtime_queue_cap(serving_spec):
    """Derived from serving.toml, not restated: the shared realtime cap, and a model's own cap where
    it sets one (it was one copied number, 24, that a model with a queue of 8 never reached)."""
    realtime = min(serving_spec.priorities, key=lambda level: level.level)
    shared = AlertThresholds.for_serving(serving_spec)
    assert shared.queue_backlog_depth == realtime.queue.max_queue_size and shared.queue_backlog_depth_by_model == {}
    assert backlog_exprs(shared) == [f"nv_inference_pending_request_count >= {realtime.queue.max_queue_size}"]

    own = AlertThresholds.for_serving(with_own_realtime_queue(serving_spec, {"digit_classifier": 8, "text_embedder": 8,
                                                                              "digit_classifier_small": realtime.queue.max_queue_size}))
    assert own.queue_backlog_depth_by_model == {"digit_classifier": 8, "text_embedder": 8}  # the shared size is not repeated
    assert backlog_exprs(own) == ['nv_inference_pending_request_count{model=~"digit_classifier|text_embedder"} >= 8',
                                  f'nv_inference_pending_request_count{{model!~"digit_classifier|text_embedder"}} >= {realtime.queue.max_queue_size}']


def test_the_llm_backlog_depth_is_the_models_own_running_slots_gauge():
    expr = rules_by_name()["LlmWaitQueueBacklogged"]["expr"]
    # one-to-one on every label (no `on (...)`, which would drop the labels it does not list: a
    # cluster's namespace and pod)
    assert expr == "llm_sequences_waiting >= llm_running_slots"


@pytest.mark.parametrize("by_model, problem", [({"digits": 0}, "queue_backlog_depth_by_model\\['digits'\\]"),
                                               ({"Bad-Name": 4}, "model names")])
def test_an_invalid_per_model_depth_names_the_model(by_model, problem):
    with pytest.raises(MonitorConfigError, match=problem):
        AlertThresholds(queue_backlog_depth_by_model=by_model)


def test_a_missing_or_unreadable_serving_config_is_named(tmp_path):
    with pytest.raises(MonitorConfigError, match="nowhere.toml"):
        thresholds_for_config(tmp_path / "nowhere.toml")
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(MonitorConfigError, match="binary.toml"):
        thresholds_for_config(tmp_path / "binary.toml")


def test_a_config_served_beyond_loopback_still_gives_its_thresholds(tmp_path):
    """The rules read queue sizes, not where the server binds: a host that `serve --allow-non-loopback`
    accepts is no reason to refuse the monitor."""
    from conftest import SERVING_CONFIG

    config = tmp_path / "serving.toml"
    config.write_text(SERVING_CONFIG.read_text().replace('host = "127.0.0.1"', 'host = "0.0.0.0"', 1))
    assert thresholds_for_config(config).queue_backlog_depth == thresholds_for_config().queue_backlog_depth


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)")
def test_promtool_fires_the_backlog_alert_at_each_models_own_queue_cap(serving_spec, tmp_path):
    """A model with a realtime queue of 8 of its own fires at 8 waiting; the others at the shared cap."""
    shared = min(serving_spec.priorities, key=lambda level: level.level).queue.max_queue_size
    thresholds = AlertThresholds.for_serving(with_own_realtime_queue(serving_spec, {"digit_classifier": 8}))
    (tmp_path / "rules.yml").write_text(alert_rules_yaml(thresholds))
    pending = 'nv_inference_pending_request_count{{job="triton",instance="127.0.0.1:8002",partition="main",model="{}",version="1"}}'
    waiting = {"digit_classifier": 8, "text_embedder": shared - 1, "digit_classifier_small": shared}
    labels = {"severity": "warning", "resource": "queue", "job": "triton", "instance": "127.0.0.1:8002", "partition": "main", "version": "1"}
    # the two rules of one alert name differ by their cap (promtool's lint refuses duplicates)
    cap_of = {"digit_classifier": "8", "digit_classifier_small": str(shared)}
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [{"series": pending.format(m), "values": f"{n}x12"} for m, n in waiting.items()],
                   "alert_rule_test": [{"eval_time": "8m", "alertname": "TritonQueueBacklogged",
                                        "exp_alerts": [{"exp_labels": {**labels, "model": m, "queue_cap": cap_of[m]}, "exp_annotations": {
                                            "summary": f"Request queue at {depth} or more for 5m",
                                            "description": f"{m} on 127.0.0.1:8002: {waiting[m]} requests waiting, never fewer than {depth} "
                                                           "for 5m: the model is saturated (a full queue answers 503); add capacity or shed load."}}
                                                       for m, depth in (("digit_classifier", 8), ("digit_classifier_small", shared))]}]}]}))
    done = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    linted = subprocess.run(["promtool", "check", "rules", "--lint-fatal", "rules.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr  # two rules of one name: distinct by their labels
