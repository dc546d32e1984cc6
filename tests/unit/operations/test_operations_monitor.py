"""Monitoring plan (targets from the manifest, prometheus.yml, flags) without starting anything."""
from __future__ import annotations

from pathlib import Path

import pytest

from operations.errors import MonitorConfigError
from operations.monitor import PrometheusSettings, ScrapeTarget, main, render_prometheus_config, scrape_targets_from_manifest, start_monitoring


def endpoints(metrics_port: int) -> dict[str, str]:
    return {"http": "127.0.0.1:1", "grpc": "127.0.0.1:2", "metrics": f"http://127.0.0.1:{metrics_port}/metrics"}


def test_one_target_per_partition_from_the_manifest():
    manifest = {
        "partitions": {"b": endpoints(9102), "a": endpoints(9002)},
        "models": {"m1": {**endpoints(9002), "partition": "a"}, "m2": {**endpoints(9102), "partition": "b"}},
    }
    assert scrape_targets_from_manifest(manifest) == (ScrapeTarget("a", "127.0.0.1:9002"), ScrapeTarget("b", "127.0.0.1:9102"))


def test_models_only_manifest_shares_one_endpoint_per_partition():
    manifest = {"models": {"m1": {**endpoints(9002), "partition": "p"}, "m2": {**endpoints(9002), "partition": "p"}}}
    assert scrape_targets_from_manifest(manifest) == (ScrapeTarget("p", "127.0.0.1:9002"),)


@pytest.mark.parametrize("manifest, message", [
    ({}, "no partitions"),
    ({"partitions": {"p": {"http": "127.0.0.1:1"}}}, "no `metrics` URL"),
    ({"partitions": {"p": {"metrics": "127.0.0.1:8002"}}}, "http://HOST:PORT/metrics"),
])
def test_bad_manifest_is_explained(manifest, message):
    with pytest.raises(MonitorConfigError, match=message):
        scrape_targets_from_manifest(manifest)


def test_prometheus_config_labels_each_partition_and_loads_the_rules():
    targets = (ScrapeTarget("a", "127.0.0.1:9002"), ScrapeTarget("b", "127.0.0.1:9102"))
    config = render_prometheus_config(targets, (Path("/r/alert_rules.yml"),), scrape_interval="2s")
    assert config["rule_files"] == ["/r/alert_rules.yml"]
    assert config["global"] == {"scrape_interval": "2s", "evaluation_interval": "2s"}
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "triton"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9002"], "labels": {"partition": "a"}},
                                     {"targets": ["127.0.0.1:9102"], "labels": {"partition": "b"}}]


def test_prometheus_binds_loopback_with_its_own_storage(tmp_path):
    args = PrometheusSettings(tmp_path / "p.yml", tmp_path / "data", 19090).to_args_list()
    assert "--web.listen-address=127.0.0.1:19090" in args
    assert f"--storage.tsdb.path={tmp_path / 'data'}" in args


def test_start_without_manifest_says_how_to_get_one(tmp_path):
    with pytest.raises(MonitorConfigError, match="make serve"):
        start_monitoring(tmp_path / "manifest.json", tmp_path / "prometheus")


def test_stop_with_nothing_started_is_harmless(tmp_path, capsys):
    assert main(["--run-dir", str(tmp_path), "stop"]) == 0
    assert "nothing to stop" in capsys.readouterr().out


def test_status_with_nothing_started_names_the_missing_state_and_the_fix(tmp_path, capsys):
    from contracts.layout import RUN_DIR as SERVING_RUN_DIR
    from operations.monitor import RUN_DIR, STATE_FILE, read_monitor_state

    assert RUN_DIR == SERVING_RUN_DIR / "prometheus"  # run/prometheus, RunLayout's `prometheus`
    assert read_monitor_state(tmp_path) is None
    assert main(["--run-dir", str(tmp_path), "status"]) == 1
    assert (f"operations.monitor: error: {tmp_path / STATE_FILE} is missing: is Prometheus started (`make monitor-start`)?"
            in capsys.readouterr().err)


def test_reads_the_manifest_the_serving_launcher_writes(tmp_path):
    from serving.runtime.launcher import RunLayout, build_manifest
    from contracts.layout import PROJECT_ROOT
    from contracts.partition_plan import plan_for_this_host
    from contracts.serving_spec import load_serving_spec

    plan, _ = plan_for_this_host(load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml"), force_cpu=True)
    targets = scrape_targets_from_manifest(build_manifest(plan, RunLayout(tmp_path), {}))
    assert {t.partition for t in targets} == {p.name for p in plan.partitions}
    assert {f"http://{t.address}{t.metrics_path}" for t in targets} == {p.endpoints["metrics"] for p in plan.partitions}
