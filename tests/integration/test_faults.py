"""Faults with real servers: model files missing or corrupt at start-up, a Python model that raises,
a backend stub that dies (on a plain server, then under the supervisor, which reloads the model),
and kill -9 of a partition under load (restarted by the supervisor).

Every request a test sends is accounted for (a correct answer or an explicit error) and none may
take longer than its client timeout."""
from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from serving.runtime.security import restricted_api_flags
from contracts.layout import RunLayout
from contracts.processes import cpu_ticks, pid_alive
from contracts.supervisor_state import read_supervisor_state
from conftest import in_process_probabilities, poll_until, raw_triton_client
from supervision import partition_pid, serving_cli, supervised_server, write_serving_config

pytestmark = pytest.mark.server
GOOD = "digit_classifier"
BROKEN = "broken_classifier"      # model.onnx is random bytes
MISSING = "missing_classifier"    # config.pbtxt but no model.onnx
RAISING = "raising_model"         # tests/integration/models/raising_model
TEST_MODELS = Path(__file__).parent / "models"
CLIENT_TIMEOUT_S = 5.0
#: A request may overrun its client timeout by this much (thread scheduling on 2 busy cores).
TIMEOUT_SLACK_S = 4.0


def raising_model_config():
    """config.pbtxt of the test model (a Python model has no ONNX graph to render it from).
    No dynamic batching: each execution holds one request, so only a trigger request fails."""
    from contracts.model_config import ModelConfig, TensorSpec, model_input, model_output

    tensor = TensorSpec("x", "TYPE_FP32", (4,))
    return ModelConfig(name=RAISING, backend="python", max_batch_size=8, input=[model_input(tensor)],
                       output=[model_output(TensorSpec("y", "TYPE_FP32", (4,)))], instance_group=[{"count": 1, "kind": "KIND_CPU"}])


def build_fault_repository(root: Path) -> Path:
    """A repository with a good model, a corrupt one, one whose file is missing, and raising_model."""
    from conftest import REPOSITORY

    repo = root / "repository"
    shutil.copytree(REPOSITORY / GOOD, repo / GOOD)
    from contracts.model_config import read_model_config, write_model_config

    for name in (BROKEN, MISSING):
        config = read_model_config(repo / GOOD)
        config.name = name
        (repo / name / "1").mkdir(parents=True)
        write_model_config(repo / name, config)
    (repo / BROKEN / "1" / "model.onnx").write_bytes(np.random.default_rng(0).bytes(4096))
    shutil.copytree(TEST_MODELS / RAISING, repo / RAISING, ignore=shutil.ignore_patterns("__pycache__"))
    write_model_config(repo / RAISING, raising_model_config())
    return repo


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory, admin_key):
    """One tritonserver started as the launcher starts it (--exit-on-error=false, admin key set)
    on a repository where two of the four models cannot load."""
    from conftest import start_test_server

    workdir = tmp_path_factory.mktemp("faults")
    repo = build_fault_repository(workdir)
    server = start_test_server(workdir, (GOOD, BROKEN, MISSING, RAISING), repository=repo,
                               restricted=restricted_api_flags(admin_key))
    yield server
    server.discard()


def expected_probabilities(images: np.ndarray) -> np.ndarray:
    return in_process_probabilities(GOOD, images)


def host_port(url: str) -> tuple[str, int]:
    host, _, port = url.rpartition(":")
    return host, int(port)


# --- model files missing or corrupt at start-up ---------------------------------------------------

def test_missing_and_corrupt_model_files_fail_alone_and_the_good_model_is_served(fault_server, admin_key, digits_test_split):
    from model_client.client import TritonModelClient
    from serving.runtime.model_readiness import check_models_loaded, model_ready

    host, port = host_port(fault_server.http_url)
    assert model_ready(host, port, GOOD) and model_ready(host, port, RAISING)
    assert not model_ready(host, port, BROKEN) and not model_ready(host, port, MISSING)
    # the reasons, once from the server log (no key) and once from the restricted index (key)
    for source in ({"log_path": fault_server.log_path}, {"key": admin_key}):
        failed = check_models_loaded(host, port, [GOOD, BROKEN, MISSING, RAISING], **source)
        assert set(failed) == {BROKEN, MISSING}, source
        assert "Protobuf parsing failed" in failed[BROKEN] and f"{BROKEN}/1/model.onnx" in failed[BROKEN]
        assert "does not exist" in failed[MISSING] and f"{MISSING}/1/model.onnx" in failed[MISSING]
        assert all("\n" not in reason and "At:" not in reason for reason in failed.values())
    images, _ = digits_test_split
    for protocol in ("http", "grpc"):
        with TritonModelClient(fault_server.url(protocol), protocol) as client:
            served = client.infer(GOOD, {"image": images[:8]})["probabilities"]
            np.testing.assert_allclose(served, expected_probabilities(images[:8]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_to_a_model_that_failed_to_load_get_a_clear_error(fault_server, protocol):
    from model_client.client import TritonModelClient
    from model_client.errors import ModelNotFoundError

    with TritonModelClient(fault_server.url(protocol), protocol) as client:
        for model in (BROKEN, MISSING):
            with pytest.raises(ModelNotFoundError, match=model):
                client.infer(model, {"image": np.zeros((1, 1, 8, 8), np.float32)})


def test_launcher_names_failed_models_serves_the_rest_and_exits_1(tmp_path, digits_test_split):
    """`python -m serving serve` on that repository: exit code 1, each failed model named with its
    reason on stderr, `status` shows them NOT READY, the good model answers; then `stop`."""
    from conftest import free_ports
    from model_client.client import TritonModelClient

    repo = build_fault_repository(tmp_path)
    shutil.rmtree(repo / RAISING)
    config = write_serving_config(repo / "serving.toml", [GOOD, BROKEN, MISSING])
    http, grpc, metrics, supervisor = free_ports(4)
    run_dir = tmp_path / "run"
    common = ["--run-dir", str(run_dir)]
    try:
        served = serving_cli("serve", "--config", str(config), "--http-port", str(http), "--grpc-port", str(grpc),
                             "--metrics-port", str(metrics), "--supervisor-metrics-port", str(supervisor),
                             "--timeout", "90", *common)
        assert served.returncode == 1, served.stdout + served.stderr
        assert f"model {BROKEN} (partition default) failed to load: version 1: " in served.stderr
        assert "Protobuf parsing failed" in served.stderr and "does not exist" in served.stderr
        assert f"2 model(s) not served: ['{BROKEN}', '{MISSING}']; every other model is served" in served.stderr
        assert "locked with" in served.stdout
        status = serving_cli("status", *common)
        assert status.returncode == 1
        assert f"model {BROKEN} NOT READY" in status.stdout and f"model {MISSING} NOT READY" in status.stdout
        images, _ = digits_test_split
        with TritonModelClient(f"127.0.0.1:{http}", "http") as client:
            np.testing.assert_allclose(client.infer(GOOD, {"image": images[:4]})["probabilities"],
                                       expected_probabilities(images[:4]), rtol=1e-5, atol=1e-6)
    finally:
        stopped = serving_cli("stop", *common)
    assert stopped.returncode == 0 and "stopped the supervisor" in stopped.stdout


# --- a Python-backend model that raises, and one whose stub process dies ---------------------------

def raising_infer(client, module, values: float, timeout_s: float = CLIENT_TIMEOUT_S):
    tensor = module.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), values, np.float32))
    kwargs = {"client_timeout": timeout_s} if module.__name__.endswith("grpc") else {}
    return client.infer(RAISING, [tensor], **kwargs).as_numpy("y")


def raw_client(server, protocol):
    return raw_triton_client(server, protocol, CLIENT_TIMEOUT_S)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_model_that_raises_answers_that_request_with_the_error_and_keeps_serving(fault_server, protocol):
    from tritonclient.utils import InferenceServerException

    module, client = raw_client(fault_server, protocol)
    try:
        np.testing.assert_array_equal(raising_infer(client, module, 1.5), np.full((1, 4), 3.0, np.float32))
        with pytest.raises(InferenceServerException, match=r"RuntimeError: raising_model: trigger value -1.0 in the input") as info:
            raising_infer(client, module, -1.0)
        assert info.value.status() in ("500", "StatusCode.INTERNAL")
        np.testing.assert_array_equal(raising_infer(client, module, 2.0), np.full((1, 4), 4.0, np.float32))
    finally:
        client.close()


def test_concurrent_good_and_raising_requests_are_each_accounted_for(fault_server):
    """24 requests from 6 threads, every third one a trigger: each trigger gets the model's error,
    each good one its own correct answer; nothing hangs."""
    from concurrent.futures import ThreadPoolExecutor

    from tritonclient.utils import InferenceServerException

    def one(i):
        value = -1.0 if i % 3 == 0 else float(i)
        module, client = raw_client(fault_server, "http" if i % 2 else "grpc")
        start = time.monotonic()
        try:
            return i, value, raising_infer(client, module, value), time.monotonic() - start
        except InferenceServerException as exc:
            return i, value, exc, time.monotonic() - start
        finally:
            client.close()

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(24)))
    assert len(results) == 24
    for i, value, outcome, seconds in results:
        assert seconds < CLIENT_TIMEOUT_S + TIMEOUT_SLACK_S
        if value == -1.0:
            assert isinstance(outcome, InferenceServerException) and "trigger value" in str(outcome), (i, outcome)
        else:
            np.testing.assert_array_equal(outcome, np.full((1, 4), 2 * value, np.float32))


@pytest.mark.alone  # a killed stub is noticed by Triton only so fast: timing-sensitive under load
def test_a_dead_backend_stub_gives_explicit_errors_until_the_model_is_reloaded(fault_server, admin_key):
    """The stub process exits (as after a native crash). A plain tritonserver (no supervisor): this
    is Triton 2.51's own behaviour, which the supervisor heals (the test at the end of this file).
    The model stays READY but every request gets "Stub process ... is not healthy" until it is
    reloaded through the (key-protected) repository API; no request hangs. A plain load reloads it
    here only because its stub wrote __pycache__ into the version directory (Triton reloads a model
    whose files changed); the supervisor sends a config override instead (serving.runtime.stub_watch)."""
    from tritonclient.utils import InferenceServerException

    from serving.runtime.model_readiness import model_ready
    from serving.runtime.pod_liveness import check as pod_liveness

    module, client = raw_client(fault_server, "http")
    host, port = host_port(fault_server.http_url)

    def live() -> list[str]:  # what a pod's liveness probe sees (serving.runtime.pod_liveness)
        return pod_liveness(port, (GOOD, RAISING), fault_server.process.settings.backend_dir, fault_server.process.pid)

    try:
        assert live() == []
        for value in (-2.0, 1.0, 1.0):  # the crash, then requests after it
            start = time.monotonic()
            with pytest.raises(InferenceServerException, match=r"Stub process '.*' is not healthy"):
                raising_infer(client, module, value)
            assert time.monotonic() - start < CLIENT_TIMEOUT_S + TIMEOUT_SLACK_S
        assert model_ready(host, port, RAISING)  # readiness does not notice: see docs/operations.md
        # a pod has no supervisor to reload it: its liveness check fails, and the kubelet restarts it
        assert live() == [f"model {RAISING} has 0 of its 1 backend stub(s): requests reaching the missing instance "
                          f"fail (\"Stub process ... is not healthy\")"]
        with pytest.raises(InferenceServerException, match="restricted"):
            client.load_model(RAISING)  # recovery needs the admin key
        client.load_model(RAISING, headers=admin_key.http_headers())
        np.testing.assert_array_equal(raising_infer(client, module, 1.0), np.full((1, 4), 2.0, np.float32))
        assert live() == []
    finally:
        client.close()


# --- kill -9 of a partition server under load (helper B1's supervisor restarts it) ---------------

@dataclass(frozen=True)
class Outcome:
    ok: bool
    seconds: float
    detail: str


class LoadGenerator:
    """Threads sending one-image requests (HTTP and gRPC alternately) with client timeouts until
    stopped; every request's outcome is recorded, and answers are checked against ONNX Runtime."""

    def __init__(self, http_url: str, grpc_url: str, images: np.ndarray, threads: int = 4):
        self.urls = {"http": http_url, "grpc": grpc_url}
        self.images, self.expected = images, expected_probabilities(images)
        self.outcomes: list[tuple[float, Outcome]] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.workers = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def __enter__(self):
        for worker in self.workers:
            worker.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=CLIENT_TIMEOUT_S + 10)
        assert not any(w.is_alive() for w in self.workers), "a load thread is stuck past its timeout"

    def _client(self, protocol):
        if protocol == "http":
            import tritonclient.http as module

            return module, module.InferenceServerClient(self.urls["http"], connection_timeout=CLIENT_TIMEOUT_S,
                                                        network_timeout=CLIENT_TIMEOUT_S)
        import tritonclient.grpc as module

        return module, module.InferenceServerClient(self.urls["grpc"])

    def _run(self, worker: int) -> None:
        protocol = "http" if worker % 2 == 0 else "grpc"
        module, client = self._client(protocol)
        n = 0
        while not self.stop.is_set():
            i = (worker * 7 + n) % len(self.images)
            n += 1
            tensor = module.InferInput("image", [1, 1, 8, 8], "FP32")
            tensor.set_data_from_numpy(self.images[i:i + 1])
            kwargs = {"client_timeout": CLIENT_TIMEOUT_S} if protocol == "grpc" else {}
            with self.lock:
                self.sent += 1
            start = time.monotonic()
            try:
                result = client.infer(GOOD, [tensor], **kwargs).as_numpy("probabilities")
                ok = bool(np.allclose(result[0], self.expected[i], rtol=1e-5, atol=1e-6))
                outcome = Outcome(ok, time.monotonic() - start, "answer" if ok else f"WRONG answer for image {i}")
            except Exception as exc:  # every failure is recorded as an explicit error
                outcome = Outcome(False, time.monotonic() - start, f"{protocol}: {type(exc).__name__}: {str(exc)[:120]}")
                client.close()
                time.sleep(0.05)
                module, client = self._client(protocol)  # a fresh connection, as a retrying caller would
            with self.lock:
                self.outcomes.append((start, outcome))
        client.close()

    def answers_after(self, t: float) -> int:
        with self.lock:
            return sum(1 for start, o in self.outcomes if start > t and o.ok)


@pytest.fixture(scope="module")
def supervised(tmp_path_factory):
    """`python -m serving serve` (the real supervisor) for digit_classifier on free ports, with the
    request guard's per-input size limit off, so that Triton 2.51's bad_alloc crash stays reachable."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SERVING_REQUEST_GUARD_MAX_INPUT_BYTES", "0")
        with supervised_server(tmp_path_factory.mktemp("supervised"), [GOOD]) as server:
            yield server


def wait_for_new_pid(manifest: Path, old_pid: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = partition_pid(manifest)
            if pid != old_pid:
                return pid
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
            pass
        time.sleep(0.2)
    pytest.fail(f"the supervisor did not restart the partition within {timeout_s:.0f} s")


def assert_every_request_accounted(load: LoadGenerator) -> None:
    outcomes = [o for _, o in load.outcomes]
    assert len(outcomes) == load.sent, "a request has no recorded outcome"
    slow = [o for o in outcomes if o.seconds > CLIENT_TIMEOUT_S + TIMEOUT_SLACK_S]
    assert not slow, f"requests overran their {CLIENT_TIMEOUT_S} s timeout: {slow[:3]}"
    wrong = [o for o in outcomes if o.detail.startswith("WRONG")]
    assert not wrong, wrong[:3]


def wait_until(predicate, timeout_s: float) -> bool:
    return bool(poll_until(predicate, bool, timeout_s, interval_s=0.1))


def test_kill_9_of_a_partition_under_load_is_restarted_and_every_request_accounted(supervised, digits_test_split):
    images, _ = digits_test_split
    old_pid = partition_pid(supervised["manifest"])
    with LoadGenerator(supervised["http"], supervised["grpc"], images[:32]) as load:
        assert wait_until(lambda: load.answers_after(0) >= 20, 20), "no answers before the kill"
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        new_pid = wait_for_new_pid(supervised["manifest"], old_pid, 60)
        recovered = wait_until(lambda: load.answers_after(killed_at + 0.5) >= 20, 60)
    assert recovered, "no correct answers after the restart"
    assert new_pid != old_pid
    outcomes = [o for _, o in load.outcomes]
    errors = [o for o in outcomes if not o.ok]
    assert errors, "killing the server under load produced no error at all (was it really killed?)"
    assert_every_request_accounted(load)
    status = serving_cli("status", *supervised["common"])
    assert status.returncode == 0 and "restarts 1" in status.stdout, status.stdout
    back_after = min(start for start, o in load.outcomes if o.ok and start > killed_at) - killed_at
    print(f"\nkill -9 under load: {len(outcomes)} requests, {len(outcomes) - len(errors)} answered correctly, "
          f"{len(errors)} explicit errors (e.g. {errors[0].detail}); restarted as pid {new_pid}; "
          f"first correct answer {back_after:.1f} s after the kill")


def test_a_request_that_crashes_triton_2_51_is_contained_by_the_supervisor(supervised, digits_test_split):
    """Known upstream bug (Triton 2.51): an HTTP JSON request whose declared shape needs more memory
    than the host can allocate aborts tritonserver (std::bad_alloc). The binary and gRPC paths check
    the shape first. The request guard refuses such a shape (test_isolation); with its limit off (this
    module's server) the supervisor restarting the partition is what is left. The caller of the bad request gets a dropped connection (an explicit error)."""
    images, _ = digits_test_split
    old_pid = partition_pid(supervised["manifest"])
    # 1e16 elements (40 PB): beyond any host's memory, so the allocation fails everywhere
    body = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 99999999, 99999999], "datatype": "FP32",
                                   "data": [0.0] * 64}]}).encode()
    request = urllib.request.Request(f"http://{supervised['http']}/v2/models/{GOOD}/infer", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with LoadGenerator(supervised["http"], supervised["grpc"], images[:32], threads=2) as load:
        assert wait_until(lambda: load.answers_after(0) >= 10, 20)
        sent_at = time.monotonic()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT_S)
        crashed_at = time.monotonic()  # the connection drops when the process aborts
        assert crashed_at - sent_at < CLIENT_TIMEOUT_S + TIMEOUT_SLACK_S
        new_pid = wait_for_new_pid(supervised["manifest"], old_pid, 60)
        # only the restarted server can answer requests sent after the crash
        recovered = wait_until(lambda: load.answers_after(crashed_at + 0.5) >= 10, 60)
    assert recovered and new_pid != old_pid
    assert not pid_alive(old_pid)
    assert "std::bad_alloc" in Path(json.loads(supervised["manifest"].read_text())["partitions"]["default"]["log"]).read_text(errors="replace")
    assert_every_request_accounted(load)


# --- a backend stub dies under the supervisor: the model is reloaded --------------------------------

@pytest.mark.alone  # a killed stub is noticed by Triton only so fast: timing-sensitive under load
def test_the_supervisor_reloads_a_model_whose_backend_stub_died(supervised, digits_test_split):
    """kill -9 of one of digit_classifier's two stubs (as after a native crash in it). Requests that
    Triton hands to that instance fail "Stub process ... is not healthy" (the plain-server test
    above) until the supervisor sees the stub missing (its 2 s scan) and reloads the model with the
    key it started the server with. Then every request is answered correctly by the same server (no
    partition restart), the supervisor log and run/supervisor.json record the reload, and the replaced
    instance's surviving stub, which Triton 2.51 never finalizes once requests reached the dead one,
    is gone within the supervisor's grace (serving.runtime.stub_watch.LEFTOVER_GRACE_S)."""
    from model_client.client import TritonModelClient
    from model_client.errors import ModelRestartingError
    from serving.runtime.stub_processes import scan_stubs
    from serving.runtime.stub_watch import LEFTOVER_GRACE_S

    layout = RunLayout(supervised["manifest"].parent)
    log_path = layout.supervisor_log

    def partition():
        return read_supervisor_state(layout.supervisor_state).partitions["default"]

    pid = partition().pid
    stubs = [s for s in scan_stubs(pid) if s.model == GOOD]
    # the supervisor has taken these two as the model's instances (its first scan after ready)
    assert wait_until(lambda: list(getattr(partition().stubs.get(GOOD), "pids", ())) == [s.pid for s in stubs], 10), partition()
    before = partition()
    assert len(stubs) == before.stubs[GOOD].expected == 2 and before.stubs[GOOD].status == "watching"
    assert before.pid == pid
    images, _ = digits_test_split
    images = images[:8]
    # Kill the stub that lone requests reach: the model's first instance takes every request that
    # finds it free (rate-limiter priority 1, contracts.model_config.render_instance_groups), so
    # sequential requests would never reach the other one. Which stub that is: the one whose CPU
    # time grows under a few hundred sequential requests.
    ticks_before = {s.pid: cpu_ticks(Path(f"/proc/{s.pid}/stat").read_text()) for s in stubs}
    with TritonModelClient(supervised["http"], "http", network_timeout_s=CLIENT_TIMEOUT_S) as client:
        for i in range(300):
            client.infer(GOOD, {"image": images[i % len(images):i % len(images) + 1]})
    grew = {s.pid: cpu_ticks(Path(f"/proc/{s.pid}/stat").read_text()) - ticks_before[s.pid] for s in stubs}
    stubs.sort(key=lambda s: -grew[s.pid])  # stubs[0]: the one to kill; stubs[1]: its sibling
    expected = expected_probabilities(images)
    sent, answered, stub_errors = 0, 0, []
    reloaded_after = healed_after = None

    def one(client, i):
        nonlocal sent, answered
        sent += 1
        try:
            served = client.infer(GOOD, {"image": images[i:i + 1]})["probabilities"]
        except ModelRestartingError as exc:  # the only error allowed: the dead instance's (retried by a resilient client)
            assert "is not healthy" in str(exc) and "reloads it within seconds" in str(exc), exc
            stub_errors.append(str(exc))
            return False
        np.testing.assert_allclose(served, expected[i:i + 1], rtol=1e-5, atol=1e-6)
        answered += 1
        return True

    with TritonModelClient(supervised["http"], "http", network_timeout_s=CLIENT_TIMEOUT_S) as client:
        killed_at, killed_wall = time.monotonic(), time.time()
        os.kill(stubs[0].pid, signal.SIGKILL)
        for i in range(4):  # before the supervisor's next scan: the dead instance gets some of these
            one(client, i)
        assert stub_errors, "no request failed after the kill (was the stub really killed?)"
        while time.monotonic() - killed_at < 30:
            if reloaded_after is None and partition().stubs[GOOD].reloads > before.stubs[GOOD].reloads:
                reloaded_after = time.monotonic() - killed_at
            if all([one(client, i) for i in range(len(images))]) and reloaded_after is not None:
                healed_after = time.monotonic() - killed_at
                break
            time.sleep(0.2)
        errors_before_heal = len(stub_errors)
        for i in range(len(images)):  # healed for good: both instances answer
            assert one(client, i)
    assert healed_after is not None, f"not healed within 30 s:\n{log_path.read_text()[-2000:]}"
    assert sent == answered + len(stub_errors) and len(stub_errors) == errors_before_heal
    after = partition()
    assert (after.pid, after.restarts, after.state) == (before.pid, before.restarts, "ready")
    record = after.stubs[GOOD]
    assert record.status == "watching" and record.reloads == before.stubs[GOOD].reloads + 1
    assert record.last_reason.startswith(f"lost a backend stub (pid {stubs[0].pid}); reloaded in ")
    assert stubs[0].pid not in record.pids and len(record.pids) == 2
    assert f"partition default: model {GOOD} lost a backend stub (pid {stubs[0].pid}); reloaded in " in log_path.read_text()
    # nothing of the replaced instances keeps running: only the new generation's stubs are left
    assert wait_until(lambda: {s.pid for s in scan_stubs(before.pid)} == set(record.pids), LEFTOVER_GRACE_S + 10), (
        scan_stubs(before.pid), record)
    killed = f"SIGKILLed stub pid {stubs[1].pid}" in log_path.read_text()
    detected_after = log_time(log_path, f"lost a backend stub (pid {stubs[0].pid}); reloading it") - killed_wall
    print(f"\nstub pid {stubs[0].pid} killed: detected (supervisor log) {detected_after:.1f} s later, reload recorded "
          f"{reloaded_after:.1f} s after the kill ({record.last_reason}); every request answered correctly "
          f"{healed_after:.1f} s after the kill ({healed_after - detected_after:.1f} s after detection); "
          f"{sent} requests: {answered} correct, {len(stub_errors)} 'not healthy' errors; the replaced instance's "
          f"stub {stubs[1].pid} {'was SIGKILLed by the supervisor' if killed else 'exited by itself'}")


def test_a_partition_killed_after_a_reload_leaves_no_ipc_memory_behind(supervised):
    """Each backend stub shares a /dev/shm region (1 MiB and up) with its server, which unlinks them
    when it exits cleanly. For a server SIGKILLed or killed as hung the supervisor removes them; it
    knew only the regions mapped when the server became ready, so those of instances a reload created
    later (here: the supervisor's reload of a model whose stub died) stayed at each kill, 2 MiB a time."""
    from contracts.shared_memory import triton_shm_regions
    from serving.runtime.stub_processes import scan_stubs

    layout = RunLayout(supervised["manifest"].parent)

    def partition():
        return read_supervisor_state(layout.supervisor_state).partitions["default"]

    before = partition()
    ready_regions = set(triton_shm_regions(before.pid))
    os.kill(next(s.pid for s in scan_stubs(before.pid) if s.model == GOOD), signal.SIGKILL)

    def reloaded():
        record = partition().stubs[GOOD]
        return record.reloads > before.stubs[GOOD].reloads and record.status == "watching" and len(record.pids) == 2

    assert wait_until(reloaded, 30), partition()
    assert wait_until(lambda: set(triton_shm_regions(before.pid)) - ready_regions, 10), "the reload mapped no new region"
    mapped = triton_shm_regions(before.pid)
    os.kill(before.pid, signal.SIGKILL)
    wait_for_new_pid(supervised["manifest"], before.pid, 60)
    assert wait_until(lambda: partition().state == "ready", 60), partition()
    left = [region for region in mapped if Path(region).exists()]
    assert not left, f"{len(left)} of the killed server's {len(mapped)} IPC regions were left in /dev/shm: {left}"


def test_a_stopped_backend_stub_is_killed_and_its_model_reloaded_without_a_partition_restart(supervised, digits_test_split):
    """SIGSTOP of a stub: its instance failed every request it got ("Stub process ... is not healthy"),
    the supervisor saw a live stub, and SIGCONT later aborted the whole server (Triton 2.51,
    boost::interprocess::lock_exception; a review, 2026-12-06). Now a stub stopped for a scan interval
    is SIGKILLed and its model reloaded, the partition untouched."""
    from model_client.client import TritonModelClient
    from serving.runtime.stub_processes import scan_stubs

    layout = RunLayout(supervised["manifest"].parent)

    def partition():
        return read_supervisor_state(layout.supervisor_state).partitions["default"]

    assert wait_until(lambda: partition().state == "ready" and len(partition().stubs[GOOD].pids) == 2, 60), partition()
    before = partition()
    victim = next(s.pid for s in scan_stubs(before.pid) if s.model == GOOD)
    os.kill(victim, signal.SIGSTOP)
    try:
        assert wait_until(lambda: partition().stubs[GOOD].reloads > before.stubs[GOOD].reloads
                          and partition().stubs[GOOD].status == "watching", 20), partition()
    finally:
        try:
            os.kill(victim, signal.SIGKILL)  # never resumed, whatever happened
        except ProcessLookupError:
            pass
    log_text = layout.supervisor_log.read_text()
    assert f"SIGKILLed stub pid {victim}" in log_text and "stopped for a whole scan interval" in log_text
    images, _ = digits_test_split
    with TritonModelClient(supervised["http"], "http", network_timeout_s=CLIENT_TIMEOUT_S) as client:
        for i in range(8):
            np.testing.assert_allclose(client.infer(GOOD, {"image": images[i:i + 1]})["probabilities"],
                                       expected_probabilities(images[i:i + 1]), rtol=1e-5, atol=1e-6)
    after = partition()
    assert (after.pid, after.restarts) == (before.pid, before.restarts)  # the partition was not restarted


def log_time(log_path: Path, text: str) -> float:
    """time.time() of the first supervisor log line containing `text` (its asctime, local time)."""
    from datetime import datetime

    line = next(line for line in log_path.read_text().splitlines() if text in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
