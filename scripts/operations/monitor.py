"""`python -m operations.monitor start|stop|status|metric-names`: a real Prometheus for the servers.

`start` reads run/manifest.json (written by `serving serve`), scrapes every partition's Triton
metrics endpoint, loads the alert rules and serves Prometheus on a free loopback port; it returns
once Prometheus is ready and leaves it running in its own session (state in run/prometheus/).
`stop` stops it. Planning (targets, config, flags) is pure and separate from the process.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from contracts.layout import RUN_DIR as SERVING_RUN_DIR, SERVING_CONFIG, RunLayout
from operations.alert_rules import AlertThresholds, alert_rules_yaml, thresholds_for_config
from operations.errors import MonitorConfigError, MonitorStartError, OperationsError
from contracts.manifest import MANIFEST_PATH, ManifestError, as_manifest, read_manifest
from contracts.processes import free_loopback_ports

RUN_DIR = RunLayout(SERVING_RUN_DIR).prometheus
#: What `start` records in its folder (pid, URL, scrape targets, rules file) for `stop` and `status`.
STATE_FILE = "state.json"
JOB = AlertThresholds.job
SUPERVISOR_JOB = AlertThresholds.supervisor_job


@dataclass(frozen=True)
class ScrapeTarget:
    """One Triton metrics endpoint, labelled with the partition it belongs to."""

    partition: str
    address: str  # host:port
    metrics_path: str = "/metrics"

    @classmethod
    def from_url(cls, partition: str, url: str) -> "ScrapeTarget":
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise MonitorConfigError(
                f"partition {partition!r}: metrics URL {url!r} is not of the form http://HOST:PORT/metrics."
            )
        return cls(partition, f"{parsed.hostname}:{parsed.port}", parsed.path or "/metrics")


def scrape_targets_from_manifest(manifest: Mapping[str, Any]) -> tuple[ScrapeTarget, ...]:
    """One target per partition (models sharing a server share its endpoint), sorted by partition."""
    document = as_manifest(manifest)
    urls = {name: entry.metrics for name, entry in document.partitions.items()}
    if not urls:  # older manifests: only models, each naming its partition
        urls = {e.partition or model: e.metrics for model, e in document.models.items()}
    if not urls:
        raise MonitorConfigError("the manifest lists no partitions or models: start the servers with `make serve`.")
    missing = sorted(name for name, url in urls.items() if not url)
    if missing:
        raise MonitorConfigError(f"partitions {missing} have no `metrics` URL in the manifest.")
    targets = [ScrapeTarget.from_url(name, url) for name, url in sorted(urls.items())]
    seen: dict[tuple[str, str], ScrapeTarget] = {}
    for target in targets:
        seen.setdefault((target.address, target.metrics_path), target)
    return tuple(seen.values())


def supervisor_target_from_manifest(manifest: Mapping[str, Any]) -> ScrapeTarget | None:
    """The supervisor's own metrics endpoint (restarts, crash loops), when the manifest names one."""
    url = as_manifest(manifest).supervisor_metrics
    return ScrapeTarget.from_url("supervisor", url) if url else None


def render_prometheus_config(targets: tuple[ScrapeTarget, ...], rule_files: tuple[Path, ...],
                             scrape_interval: str = "5s", supervisor: ScrapeTarget | None = None) -> dict[str, Any]:
    """prometheus.yml as a mapping: one `triton` job, one static target per partition, and the
    `serving_supervisor` job for the supervisor's endpoint (it outlives every partition it restarts)."""
    if not targets:
        raise MonitorConfigError("no scrape targets: expected at least one Triton metrics endpoint.")
    static = [{"targets": [t.address], "labels": {"partition": t.partition}} for t in targets]
    paths = {t.metrics_path for t in targets}
    if len(paths) != 1:
        raise MonitorConfigError(f"targets use different metrics paths {sorted(paths)}: expected one.")
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": JOB, "metrics_path": paths.pop(), "static_configs": static}] + (
            [{"job_name": SUPERVISOR_JOB, "metrics_path": supervisor.metrics_path,
              "static_configs": [{"targets": [supervisor.address]}]}] if supervisor else []),
    }


@dataclass(frozen=True)
class PrometheusSettings:
    config_file: Path
    storage_dir: Path
    port: int
    host: str = "127.0.0.1"
    retention: str = "2d"

    def to_args_list(self) -> list[str]:
        return [
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.storage_dir}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address={self.host}:{self.port}",
        ]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def find_prometheus() -> Path:
    found = shutil.which("prometheus")
    if not found:
        raise MonitorStartError("no `prometheus` on PATH: install Debian's package (`sudo apt-get install -y prometheus`).")
    return Path(found)


def api_get(base_url: str, path: str, timeout: float = 2.0, **params: str) -> Any:
    """GET a Prometheus HTTP API path and return its `data` (raises OperationsError if not `success`)."""
    url = f"{base_url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise OperationsError(f"Prometheus answered {body} to {url}.")
    return body["data"]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def start_prometheus(settings: PrometheusSettings, log_path: Path, timeout: float = 30.0) -> subprocess.Popen:
    """Start Prometheus in its own session and return once /-/ready answers 200."""
    from contracts.processes import log_tail, stop_pid

    command = [str(find_prometheus()), *settings.to_args_list()]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=settings.config_file.parent)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise MonitorStartError(f"prometheus exited with code {process.returncode} during start-up.\n"
                                    f"Command: {' '.join(command)}\nLast lines of {log_path}:\n{log_tail(log_path)}")
        if _ready(settings.url):
            return process
        time.sleep(0.2)
    stop_pid(process.pid)
    raise MonitorStartError(f"prometheus was not ready after {timeout:.0f} s at {settings.url}.\n{log_tail(log_path)}")


def read_monitor_state(run_dir: Path) -> dict[str, Any] | None:
    """The state `start_monitoring` recorded in `run_dir`; None when there is none (never started, or
    stopped). `start`, `stop` and `status` all read it here."""
    try:
        return json.loads((Path(run_dir) / STATE_FILE).read_text())
    except FileNotFoundError:
        return None


def start_monitoring(manifest_path: Path = MANIFEST_PATH, run_dir: Path = RUN_DIR, port: int | None = None,
                     scrape_interval: str = "5s", sla_ms: float | None = None, timeout: float = 30.0,
                     serving_config: Path = SERVING_CONFIG) -> dict[str, Any]:
    """Write prometheus.yml for the manifest's partitions and the alert rules for `serving_config`
    (each model's backlog depth is its own queue cap: the served file's, not the committed rules'
    model_repository/serving.toml), start Prometheus, record its pid and URL."""
    from contracts.processes import pid_alive

    run_dir = Path(run_dir).resolve()
    state_path = run_dir / STATE_FILE
    previous = read_monitor_state(run_dir)
    if previous is not None and pid_alive(previous["pid"]):
        raise MonitorStartError(f"Prometheus already runs (see {state_path}); stop it with `make monitor-stop`.")
    try:
        manifest = read_manifest(Path(manifest_path))
    except ManifestError as exc:
        raise MonitorConfigError(str(exc)) from None
    targets = scrape_targets_from_manifest(manifest)
    (run_dir / "data").mkdir(parents=True, exist_ok=True)
    rules = run_dir / "alert_rules.yml"
    rules.write_text(alert_rules_yaml(thresholds_for_config(Path(serving_config), sla_ms)))
    import yaml

    config_path = run_dir / "prometheus.yml"
    supervisor = supervisor_target_from_manifest(manifest)
    config_path.write_text(yaml.safe_dump(render_prometheus_config(targets, (rules,), scrape_interval, supervisor),
                                          sort_keys=False))
    settings = PrometheusSettings(config_path, run_dir / "data", port or free_loopback_ports(1)[0])
    process = start_prometheus(settings, run_dir / "prometheus.log", timeout)
    state = {"pid": process.pid, "url": settings.url, "targets": [t.address for t in targets], "rules": str(rules)}
    state_path.write_text(json.dumps(state, indent=2))
    return state


def stop_monitoring(run_dir: Path = RUN_DIR) -> bool:
    """Stop the Prometheus that `start_monitoring` recorded; False if none was running."""
    from contracts.processes import pid_alive, stop_pid

    state = read_monitor_state(run_dir)
    if state is None:
        return False
    pid = state["pid"]
    running = pid_alive(pid) and b"prometheus" in Path(f"/proc/{pid}/cmdline").read_bytes()
    if running:
        stop_pid(pid)
    (Path(run_dir) / STATE_FILE).unlink()
    return running


def scrape_metric_names(metrics_url: str, timeout: float = 5.0) -> list[str]:
    """The sample names (what PromQL selects, labels stripped) one scrape of a Triton endpoint shows."""
    with urllib.request.urlopen(metrics_url, timeout=timeout) as resp:
        lines = resp.read().decode().splitlines()
    return sorted({line.split("{")[0].split(" ")[0] for line in lines if line and not line.startswith("#")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="operations.monitor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start Prometheus scraping every partition in the manifest")
    start.add_argument("--manifest", type=Path, default=MANIFEST_PATH)
    start.add_argument("--port", type=int, help="loopback port (default: a free one)")
    start.add_argument("--scrape-interval", default="5s")
    start.add_argument("--sla-ms", type=float, help=f"P99 SLA for the latency alert (default: {AlertThresholds.p99_sla_ms:g})")
    start.add_argument("--config", type=Path, default=SERVING_CONFIG,
                       help="the serving.toml the servers serve: each model's queue cap for the backlog alert (default: %(default)s)")
    sub.add_parser("stop", help="stop the Prometheus `start` started")
    sub.add_parser("status", help="show Prometheus's targets and firing alerts")
    names = sub.add_parser("metric-names", help="print the metric names one scrape of a Triton endpoint shows")
    names.add_argument("url")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            state = start_monitoring(args.manifest, args.run_dir, args.port, args.scrape_interval, args.sla_ms,
                                     serving_config=args.config)
            print(f"[monitor] Prometheus {state['url']} (pid {state['pid']}) scraping {', '.join(state['targets'])}; rules {state['rules']}")
        elif args.command == "stop":
            print("[monitor] stopped Prometheus" if stop_monitoring(args.run_dir) else "[monitor] nothing to stop")
        elif args.command == "status":
            state = read_monitor_state(args.run_dir)
            if state is None:
                raise MonitorStartError(f"{args.run_dir / STATE_FILE} is missing: is Prometheus started (`make monitor-start`)?")
            for target in api_get(state["url"], "/api/v1/targets")["activeTargets"]:
                print(f"{target['labels'].get('partition') or target['labels'].get('job')}: {target['scrapeUrl']} {target['health']} {target['lastError']}")
            for alert in api_get(state["url"], "/api/v1/alerts")["alerts"]:
                print(f"ALERT {alert['labels']['alertname']} {alert['state']}: {alert['annotations'].get('description')}")
        else:
            print("\n".join(scrape_metric_names(args.url)))
    except FileNotFoundError as exc:
        print(f"operations.monitor: error: {exc.filename} is missing: is Prometheus started (`make monitor-start`)?", file=sys.stderr)
        return 1
    except (OperationsError, urllib.error.URLError) as exc:
        print(f"operations.monitor: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
