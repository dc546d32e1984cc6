"""The supervisor's own Prometheus endpoint: what happened to each partition, for alerts.

Why: a partition that keeps dying publishes no Triton metric at all while it is down, and Triton
knows nothing about restarts, backoff or a spent restart budget. The supervisor does, so it serves
them itself (loopback, `[server] supervisor_metrics_port`, default 8090), and
`make monitor-start` scrapes them as job `serving_supervisor`. The alert rules
(scripts/operations/alert_rules.py) fire on a crash loop, on repeated restarts and on a partition
that stays down.

`render_supervisor_metrics` is pure (the `SupervisorState` of run/supervisor.json in, exposition text out);
`SupervisorMetricsServer` is the thin HTTP part (a daemon thread of the supervisor).
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping

from contracts.errors import ServerStartError
from contracts.supervisor_state import PARTITION_STATES, SupervisorState
from serving.runtime.stub_watch import StubStatus
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: Any) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


#: name -> (type, help) of every metric the supervisor publishes.
METRIC_FAMILIES: dict[str, tuple[str, str]] = {
    "serving_supervisor_info": ("gauge", "1, labelled with the supervisor's status and mechanism"),
    "serving_partition_up": ("gauge", "1 when the partition's tritonserver is ready"),
    "serving_partition_state": ("gauge", "1 for the partition's current supervisor state, 0 for the others"),
    "serving_partition_crash_loop": ("gauge", "1 while the restart budget is spent and the partition is retried slowly"),
    "serving_partition_restarts_total": ("counter", "restarts since the supervisor started"),
    "serving_partition_restarts_in_window": ("gauge", "restarts inside the restart budget's window"),
    "serving_partition_restart_budget": ("gauge", "restarts allowed per window before the crash loop"),
    "serving_partition_crash_loops_total": ("counter", "times the restart budget was spent"),
    "serving_model_stub_reloads_total": ("counter", "reloads of a model whose backend stub died"),
    "serving_model_ready": ("gauge", "1 when Triton reported the model ready at its partition's last start, 0 when it "
                                     "failed to load (its requests get 404/400; Triton exports no series for it)"),
    "serving_model_stubs_unhealed": ("gauge", "1 while a model's dead backend stub is not reloaded (reload budget spent, "
                                              "or no admin key): requests reaching that instance fail"),
    "serving_supervisor_state_unwritten": ("gauge", "1 while the last write of run/supervisor.json or run/manifest.json "
                                                    "failed (a full or read-only disk): `make status` and clients read "
                                                    "stale state; serving goes on"),
}
#: Stub-watch states in which a dead stub stays dead.
UNHEALED_STUB_STATES = (StubStatus.GAVE_UP.value, StubStatus.NO_KEY.value)


def render_supervisor_metrics(state: SupervisorState, state_unwritten: bool = False) -> str:
    """Prometheus text exposition (format 0.0.4) of the supervisor's state; `state_unwritten`: the
    supervisor's last write of that state to its files failed (not part of the state itself, which
    is what those files hold)."""
    families = {name: (kind, help_text, []) for name, (kind, help_text) in METRIC_FAMILIES.items()}

    def add(name: str, labels: str, value: float) -> None:
        families[name][2].append(f"{name}{labels} {value:g}")

    add("serving_supervisor_info", _labels(status=state.status, mechanism=state.mechanism), 1)
    add("serving_supervisor_state_unwritten", "", 1 if state_unwritten else 0)
    for partition, part in sorted(state.partitions.items()):
        add("serving_partition_up", _labels(partition=partition), 1 if part.state == "ready" else 0)
        for name in PARTITION_STATES:
            add("serving_partition_state", _labels(partition=partition, state=name), 1 if part.state == name else 0)
        add("serving_partition_crash_loop", _labels(partition=partition), 1 if part.crash_loop else 0)
        add("serving_partition_restarts_total", _labels(partition=partition), part.restarts)
        add("serving_partition_restarts_in_window", _labels(partition=partition), part.restarts_in_window)
        add("serving_partition_restart_budget", _labels(partition=partition), part.restart_budget)
        add("serving_partition_crash_loops_total", _labels(partition=partition), part.crash_loops)
        for model, stubs in sorted(part.stubs.items()):
            add("serving_model_stub_reloads_total", _labels(partition=partition, model=model), stubs.reloads)
            add("serving_model_stubs_unhealed", _labels(partition=partition, model=model),
                1 if stubs.status in UNHEALED_STUB_STATES else 0)
        if part.state == "ready":  # a partition that is down has its own alert; its models' state is not known
            for model, ok in sorted(part.models_ready.items()):
                add("serving_model_ready", _labels(partition=partition, model=model), 1 if ok else 0)
    lines = []
    for name, (kind, help_text, samples) in families.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
    return "\n".join(lines) + "\n"


class SupervisorMetricsServer:
    """GET /metrics -> `render()` on a loopback port, from a daemon thread."""

    def __init__(self, host: str, port: int, render: Callable[[], str]):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's API
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                body = render().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # scrapes every few seconds: keep the log quiet
                pass

        try:
            self.httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ServerStartError(
                f"the supervisor's metrics endpoint cannot listen on {host}:{port} ({exc.strerror}): set "
                f"[server] supervisor_metrics_port in serving.toml (or --supervisor-metrics-port) to a free port."
            ) from None
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="supervisor-metrics", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/metrics"

    def start(self) -> "SupervisorMetricsServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
