"""Shared fixtures. Integration tests (marker `server`) share ONE real tritonserver per session,
started on free loopback ports against the built model repository; a failing server test gets the
server log's tail attached to its report."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from contracts.layout import ARTIFACTS_DIR, MODEL_REPOSITORY, PROJECT_ROOT, SERVING_CONFIG  # noqa: F401 (tests import them from here)
from contracts.onnx_sessions import keep_onnxruntime_offline

#: Before any test imports onnxruntime: no telemetry from the tests' in-process sessions either, and the
#: servers they start inherit it (the launcher sets it too: test_onnxruntime_telemetry.py).
keep_onnxruntime_offline()

#: The checkout's places, as contracts.layout knows them (the names the tests import from here).
ARTIFACTS = ARTIFACTS_DIR
REPOSITORY = MODEL_REPOSITORY
#: The `[priorities]` table of the unit tests' serving specs: two levels, each with its queue cap
#: and timeout (the served serving.toml has the same shape with its own numbers).
TWO_PRIORITY_LEVELS = {
    "realtime": {"level": 1, "max_queue_size": 4, "default_timeout_microseconds": 1000},
    "batch": {"level": 2, "max_queue_size": 8, "default_timeout_microseconds": 5000},
}
#: gdb's `thread apply all bt` of a real perf_analyzer 2.51 that never left its warm-up (Poisson 40 req/s, 10
#: warm-up requests, 7 answered; docs/measurements/2026-12-05-intel-xeon/perf-analyzer-2.51/): the main thread
#: joins the load workers, the last worker waits to be resumed with nothing in flight.
PERF_ANALYZER_WARMUP_HANG = (Path(__file__).parent / "unit/perf_sweep/perf_analyzer_warmup_hang.gdb.txt").read_text()
#: The same, with that worker still waiting for its schedule's next slot (a request of its own may be in flight).
PERF_ANALYZER_STILL_SENDING = PERF_ANALYZER_WARMUP_HANG.replace(
    "RequestRateWorker::HandleExecuteOff() ()", "RequestRateWorker::SleepIfNecessary() ()")


def free_ports(count: int) -> list[int]:
    from contracts.processes import free_loopback_ports

    return free_loopback_ports(count)


@dataclass(frozen=True)
class RunningServer:
    http_url: str
    grpc_url: str
    metrics_url: str
    log_path: Path
    process: object  # serving.runtime.server.TritonServerProcess
    #: The empty /tmp/python_env_* folders that appeared while this server started: its Python-based
    #: backends' (each makes one at a fixed place and removes it only when it shuts down cleanly), or
    #: another process's that started in the same seconds (a second `make test` or `make serve`).
    python_env_dirs: tuple[Path, ...] = ()

    def url(self, protocol: str) -> str:
        return self.http_url if protocol == "http" else self.grpc_url

    def discard(self) -> None:
        """A fixture's teardown: SIGTERM and, at once, SIGKILL to the server's process group
        (`TritonServerProcess.stop(timeout=0)`), which still removes what a killed server leaves
        (Triton's shared-memory regions, the models' activity files); its backends' empty python_env
        folders wait for the session's end (`remove_killed_servers_python_env_dirs`). Not a graceful stop, on purpose: Triton 2.51's Python backend sleeps 1 s
        per model instance while it unloads (StubLauncher::UpdateHealth), one instance after another,
        so a graceful stop takes 2.5-9 s a server (~40 s of `make test`). The graceful stops are tested
        where stopping is the subject (test_generation_serving's stopping pod and cut stream, the
        supervisor's tests, test_faults' kill and reload)."""
        self.process.stop(timeout=0)
        KILLED_SERVERS_PYTHON_ENV_DIRS.extend(self.python_env_dirs)  # removed at the session's end


def remove_killed_servers_python_env_dirs() -> None:
    """At the session's end: the folders `discard` left, if no tritonserver of this user is running.
    Why not at once: which server made a folder is only known by when it appeared, and another
    process's server (a second `make test`, `make serve`) may have started in the same seconds; with
    none running, none is in use."""
    running = subprocess.run(["pgrep", "-u", str(os.getuid()), "-x", "tritonserver"], capture_output=True).returncode == 0
    for folder in () if running else KILLED_SERVERS_PYTHON_ENV_DIRS:
        with contextlib.suppress(OSError):  # not empty (an execution environment), or already gone
            folder.rmdir()
    KILLED_SERVERS_PYTHON_ENV_DIRS.clear()


def serve_loopback_http(handler: type, port: int = 0):
    """A ThreadingHTTPServer for `handler` on 127.0.0.1 (port 0: a free one), answering from a daemon
    thread; the caller shuts it down (`shutdown()`, then `server_close()`). What unit tests of an
    HTTP client stand up in place of a server's health or metrics endpoint."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_test_server(workdir: Path, models: tuple[str, ...], repository: Path = REPOSITORY,
                      env: dict[str, str] | None = None, **settings):
    from serving.runtime.server import ServerSettings, TritonServerProcess, find_tritonserver, prepare_backend_dir

    missing = [m for m in models if not (repository / m / "config.pbtxt").exists()]
    if missing:
        pytest.fail(f"models {missing} are not built into {repository}: run `make build-engines` first.")
    installation = find_tritonserver()
    backend_dir = prepare_backend_dir(installation, workdir / "backends")
    http, grpc, metrics = free_ports(3)
    server_settings = ServerSettings(
        model_repository=repository, backend_dir=backend_dir, http_port=http, grpc_port=grpc,
        metrics_port=metrics, models=models, **settings,
    )
    python_envs_before = set(PYTHON_ENV_DIRS.parent.glob(PYTHON_ENV_DIRS.name))  # servers start one at a time here
    process = TritonServerProcess(installation, server_settings, workdir / "tritonserver.log", extra_env=env).start()
    process.wait_ready(timeout=120)
    own_python_envs = tuple(sorted(set(PYTHON_ENV_DIRS.parent.glob(PYTHON_ENV_DIRS.name)) - python_envs_before))
    return RunningServer(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"http://127.0.0.1:{metrics}/metrics",
                         workdir / "tritonserver.log", process, own_python_envs)


#: Where Triton 2.51's Python backend makes its folder for execution environments (mkdtemp, a fixed
#: template in its EnvironmentManager), one per Python-based backend a server loads.
PYTHON_ENV_DIRS = Path("/tmp/python_env_*")
#: What `RunningServer.discard` left for `remove_killed_servers_python_env_dirs`.
KILLED_SERVERS_PYTHON_ENV_DIRS: list[Path] = []


def scrape_text(metrics_url: str) -> str:
    """One scrape of a Prometheus endpoint (Triton's /metrics or the supervisor's), as text."""
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return response.read().decode()


def series_total(text: str, name: str, **labels: str) -> float | None:
    """The sum of `name`'s samples in one scrape whose labels include `labels` (exact values, read by
    the project's own parser, perf_sweep.results); None when no sample matches."""
    from perf_sweep.results import parse_prometheus_text

    values = [value for (sample, have), value in parse_prometheus_text(text).items()
              if sample == name and all((k, v) in have for k, v in labels.items())]
    return sum(values) if values else None


def in_process_probabilities(model: str, images) -> "np.ndarray":
    """What the served ONNX file of a digits model answers in-process (ONNX Runtime, the build's
    session): the reference every serving test compares a served answer with."""
    from model_build.onnx_export.export import onnxruntime_session

    return onnxruntime_session(REPOSITORY / model / "1" / "model.onnx").run(None, {"image": images})[0]


def raw_triton_client(server, protocol: str, timeout_s: float):
    """(tritonclient module, client) for a `RunningServer`: for tests that build requests by hand
    (wrong dtypes, shapes, headers), which `model_client` would refuse before sending."""
    if protocol == "http":
        import tritonclient.http as module

        return module, module.InferenceServerClient(server.http_url, connection_timeout=timeout_s, network_timeout=timeout_s)
    import tritonclient.grpc as module

    return module, module.InferenceServerClient(server.grpc_url)


def http_call(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
              timeout_s: float = 10.0):
    """(status, parsed JSON body or text) of one raw HTTP call to a test server; never raises for HTTP
    errors. Why raw: the status itself is what a test checks (tritonclient and model_client map it)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return status, raw.decode(errors="replace")


def poll_until(read, done, timeout_s: float, interval_s: float = 0.05):
    """Call `read()` until `done(value)` or `timeout_s` has passed; the last value either way (the
    caller asserts on it, so a timeout fails with what was seen)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


def settled_model_stats(http_url: str, model: str, count_of, expected: int, timeout_s: float = 10.0) -> dict:
    """Triton's statistics for `model` once `count_of(stats) >= expected`, or the last ones read when
    `timeout_s` runs out. Triton records a model's statistics after it has handed the responses on,
    so a client (above all one behind an ensemble) can see its answer before the count includes it;
    the caller asserts on the returned stats."""
    import tritonclient.http as http

    with http.InferenceServerClient(http_url) as client:
        return poll_until(lambda: client.get_inference_statistics(model)["model_stats"][0],
                          lambda stats: count_of(stats) >= expected, timeout_s)


@pytest.fixture(params=["http", "grpc"])
def client(request, triton_server):
    """A model_client.client.TritonModelClient on the session server, once per protocol."""
    from model_client.client import TritonModelClient

    with TritonModelClient(triton_server.url(request.param), request.param) as c:
        yield c


@pytest.fixture(scope="module")
def admin_key():
    """A fresh repository-API key per module, for a server started with `restricted_api_flags(admin_key)`."""
    import secrets

    from serving.runtime.security import AdminKey

    return AdminKey(secrets.token_urlsafe(32), "test")


@pytest.fixture(scope="session")
def serving_spec():
    from contracts.serving_spec import load_serving_spec

    return load_serving_spec(SERVING_CONFIG)


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory, serving_spec):
    """One real tritonserver serving every model in serving.toml, for the whole session."""
    server = start_test_server(tmp_path_factory.mktemp("triton"), tuple(m.name for m in serving_spec.models),
                               latency_summary_quantiles=serving_spec.server.latency_summary_quantiles,
                               max_input_bytes=serving_spec.server.max_input_bytes)
    yield server
    server.discard()


@pytest.fixture(scope="session")
def digits_test_split():
    """(images, labels) of the served classifier's held-out split, through contracts.digit_split's reader."""
    from contracts.digit_split import DigitSplitError, digit_test_split_path, load_digit_test_split

    try:
        return load_digit_test_split(digit_test_split_path(ARTIFACTS))
    except DigitSplitError as exc:  # missing ("run `make build-engines` first") or not what the build writes
        pytest.fail(str(exc))


def pytest_sessionfinish(session, exitstatus):
    remove_killed_servers_python_env_dirs()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "triton_server" in getattr(item, "fixturenames", ()):
        server = item.funcargs.get("triton_server")
        if server is not None:
            from contracts.processes import log_tail

            report.sections.append(("tritonserver log (tail)", log_tail(server.log_path, 60)))


#: a C compiler, for the native helpers' tests (serving/runtime/native/)
CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture
def guarded_tritonserver(tmp_path) -> Callable[..., tuple[Path, Path]]:
    """`build(stand_in_c, program_c, *libraries)`: (the request guard built here, a program named
    tritonserver built from `program_c` against `stand_in_c`, a stand-in for the few libtritonserver
    calls the program makes, and `libraries` such as "-lz")."""
    from serving.runtime.native import REQUEST_GUARD, build_helper

    def build(stand_in: str, program: str, *libraries: str) -> tuple[Path, Path]:
        library, what = build_helper(REQUEST_GUARD, tmp_path / "librequest_guard.so")
        assert library, what
        (tmp_path / "stand_in.c").write_text(stand_in)
        (tmp_path / "program.c").write_text(program)
        subprocess.run([CC, "-shared", "-fPIC", "-o", str(tmp_path / "libfake_triton.so"), str(tmp_path / "stand_in.c")], check=True)
        subprocess.run([CC, "-o", str(tmp_path / "tritonserver"), str(tmp_path / "program.c"), f"-L{tmp_path}", "-lfake_triton",
                        *libraries, f"-Wl,-rpath,{tmp_path}"], check=True)
        return library, tmp_path / "tritonserver"
    return build
