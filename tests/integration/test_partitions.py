"""Partitions served by real tritonservers under the real supervisor (the code `make serve` runs).

Two partitions on free loopback ports in a temporary run directory, one core each:
`noisy` serves digit_classifier, `quiet` serves digit_classifier_small.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPOSITORY, free_ports

pytestmark = pytest.mark.server

#: A noisy neighbour may raise the quiet partition's P99 by at most this factor (see the test).
NOISY_NEIGHBOUR_P99_FACTOR = 2.0
#: The supervisor must bring a kill -9'd partition back within this many seconds (measured ~3 s:
#: 0.5 s backoff + ~2 s tritonserver start-up + the Python-backend model load).
RESTART_BOUND_S = 30.0
PROBE_REQUESTS = 400
PROBE_BLOCKS = 4
PROBE_WARMUP = 30


def render_test_repository(config, repository):
    """The digit models' ONNX files with configs rendered from the test's serving.toml.

    The test spec keeps the project's batching window but declares no priority levels or queue
    policies: with them, Triton 2.51's dynamic batcher intermittently leaves a request queued for
    its 500 ms idle wait (seen here on 0-3% of sequential requests, with or without partitions),
    which would swamp any P99 and make the neighbour comparison meaningless.
    """
    from serving.model_config import render_onnx_cpu_config, tensor_specs_from_onnx, write_model_config
    from serving.spec import load_serving_spec

    spec = load_serving_spec(config)
    for model in spec.models:
        onnx = REPOSITORY / model.name / "1" / "model.onnx"
        if not onnx.exists():
            pytest.fail(f"{onnx} is missing: run `make build-engines` first.")
        (repository / model.name / "1").mkdir(parents=True)
        shutil.copy2(onnx, repository / model.name / "1" / "model.onnx")  # the backend refuses symlinks
        inputs, outputs = tensor_specs_from_onnx(onnx)
        write_model_config(repository / model.name, render_onnx_cpu_config(model, spec, inputs, outputs))
    return repository


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    from serving.launcher import RunLayout
    from serving.spec import load_serving_spec
    from serving.supervisor import start_supervisor, stop_supervisor

    from conftest import SERVING_CONFIG

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("partition tests need 2 cores (one per partition)")
    run_dir = tmp_path_factory.mktemp("partitions")
    ports = free_ports(6)
    config = run_dir / "serving.toml"
    delay = load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds
    config.write_text(textwrap.dedent(f"""
        [server]
        host = "127.0.0.1"
        http_port = {ports[0]}
        grpc_port = {ports[1]}
        metrics_port = {ports[2]}

        [batching]
        max_queue_delay_microseconds = {delay}

        [partitions.noisy]
        compute_share = 50
        memory_mb = 512
        http_port = {ports[0]}
        grpc_port = {ports[1]}
        metrics_port = {ports[2]}

        [partitions.quiet]
        compute_share = 50
        memory_mb = 512
        http_port = {ports[3]}
        grpc_port = {ports[4]}
        metrics_port = {ports[5]}

        [models.digit_classifier]
        recipe = "digit_cnn"
        partition = "noisy"

        [models.digit_classifier_small]
        recipe = "digit_cnn"
        partition = "quiet"
    """))
    repository = render_test_repository(config, run_dir / "repository")
    layout = RunLayout(run_dir)
    manifest = start_supervisor(config, repository, layout, timeout_s=120)
    loaded = {name: part["models_ready"] for name, part in _state(layout)["partitions"].items()}
    if not all(all(models.values()) for models in loaded.values()):
        stop_supervisor(layout)
        pytest.fail(f"models did not load: {loaded}; see {layout.logs}")
    yield layout, manifest
    stop_supervisor(layout)


def _state(layout):
    return json.loads(layout.supervisor_state.read_text())


def _probe_latencies_ms(url: str, model: str, image: np.ndarray, count: int) -> list[float]:
    import tritonclient.http as http

    client = http.InferenceServerClient(url)
    try:
        tensor = http.InferInput("image", list(image.shape), "FP32")
        tensor.set_data_from_numpy(image)
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            result = client.infer(model, [tensor])
            latencies.append((time.perf_counter() - started) * 1000)
            assert result.as_numpy("probabilities").shape == (1, 10)
        return latencies
    finally:
        client.close()


#: The noisy tenant: 8 threads sending batch-64 requests as fast as the partition answers, pinned
#: to the noisy partition's cores (a tenant whose clients live elsewhere loads only its partition).
#: stdin commands: "run" / "pause" (answers "paused" once nothing is in flight) / "stop" (prints
#: the counts as JSON). Bounded by max_requests and max_seconds whatever happens.
NOISE_SCRIPT = r"""
import json, os, sys, threading, time
import numpy as np
import tritonclient.http as http
cpus, url, model, threads, max_requests, max_seconds = json.loads(sys.argv[1])
os.sched_setaffinity(0, cpus)
counts = {"sent": 0, "ok": 0, "errors": 0}
lock = threading.Lock()
running, stop = threading.Event(), threading.Event()
in_flight = [0]
images = np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32)
def worker():
    client = http.InferenceServerClient(url, network_timeout=30)
    tensor = http.InferInput("image", list(images.shape), "FP32"); tensor.set_data_from_numpy(images)
    while not stop.is_set():
        if not running.wait(0.05):
            continue
        with lock:
            if counts["sent"] >= max_requests: break
            counts["sent"] += 1; in_flight[0] += 1
        try:
            client.infer(model, [tensor]); outcome = "ok"
        except Exception:
            outcome = "errors"
        with lock:
            counts[outcome] += 1; in_flight[0] -= 1
workers = [threading.Thread(target=worker) for _ in range(threads)]
for w in workers: w.start()
timer = threading.Timer(max_seconds, stop.set); timer.daemon = True; timer.start()
for line in sys.stdin:
    command = line.strip()
    if command == "run":
        running.set(); time.sleep(0.3); print("running", flush=True)
    elif command == "pause":
        running.clear()
        while in_flight[0] and not stop.is_set(): time.sleep(0.01)
        print("paused", flush=True)
    elif command == "stop":
        break
stop.set()
for w in workers: w.join()
print(json.dumps(counts), flush=True)
"""


def test_noisy_neighbour_leaves_the_other_partitions_p99_within_factor(partitions):
    """Saturating `noisy` must leave `quiet`'s P99 within NOISY_NEIGHBOUR_P99_FACTOR x its isolated P99.

    Why 2x is achievable on 2 cores: each partition's server (and its backend stub, which inherits
    the CPU set) is pinned to its own core and runs ONNX Runtime with one thread, so the noisy
    partition cannot take CPU time from the quiet one; what remains shared is the last-level cache,
    memory bandwidth and the kernel (loopback networking, scheduler), which cost tens of percent, not
    multiples. Seen here, on a machine other jobs kept at load 5-9: x0.7-1.4 pinned; the same
    measurement with the pinning removed gave x1.1-6.3, above 2x in 4 runs of 8
    (tests/integration/partition_isolation_contrast.py).
    The probe (sequential one-image requests) runs on the quiet core in both phases; the noise runs
    on the noisy core. Isolated and loaded blocks alternate in this one test, so drift in the
    machine's other load hits both alike.
    """
    layout, manifest = partitions
    quiet, noisy = manifest["partitions"]["quiet"], manifest["partitions"]["noisy"]
    assert set(quiet["cpus"]).isdisjoint(noisy["cpus"])
    image = np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32)
    isolated, loaded, noisy_cpu, noise_cpu, loaded_wall = [], [], 0.0, 0.0, 0.0
    args = json.dumps([noisy["cpus"], noisy["http"], "digit_classifier", 8, 50_000, 60])
    noise = subprocess.Popen([sys.executable, "-c", NOISE_SCRIPT, args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)

    def command(word: str, answer: str | None) -> None:
        noise.stdin.write(word + "\n")
        noise.stdin.flush()
        if answer:
            assert noise.stdout.readline().strip() == answer, f"noise generator did not answer {answer!r}"

    block = PROBE_REQUESTS // PROBE_BLOCKS
    original_affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, quiet["cpus"])
    try:
        _probe_latencies_ms(quiet["http"], "digit_classifier_small", image, PROBE_WARMUP)
        for _ in range(PROBE_BLOCKS):
            isolated += _probe_latencies_ms(quiet["http"], "digit_classifier_small", image, block)
            command("run", "running")
            cpu_before, noise_before, wall_before = _cpu_seconds(noisy["pid"]), _cpu_seconds(noise.pid, group=False), time.perf_counter()
            loaded += _probe_latencies_ms(quiet["http"], "digit_classifier_small", image, block)
            noisy_cpu += _cpu_seconds(noisy["pid"]) - cpu_before
            noise_cpu += _cpu_seconds(noise.pid, group=False) - noise_before
            loaded_wall += time.perf_counter() - wall_before
            command("pause", "paused")
        command("stop", None)
        out, _ = noise.communicate(timeout=90)
    finally:
        os.sched_setaffinity(0, original_affinity)
        if noise.poll() is None:
            noise.kill()
            noise.wait()
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["sent"] == counts["ok"] + counts["errors"], counts  # every noise request accounted for
    assert counts["ok"] > 0 and counts["errors"] == 0, counts
    assert len(isolated) == len(loaded) == PROBE_REQUESTS  # every probe request answered (infer raises otherwise)
    # The noisy partition was kept saturated: 8 requests in flight at all times (so its queue never
    # ran dry) and its server worked hard. How busy its core was is reported, not asserted: other
    # processes on a shared machine may take part of it.
    busy = (noisy_cpu + noise_cpu) / loaded_wall
    assert counts["ok"] >= 50 and noisy_cpu >= 0.25 * loaded_wall, f"noise {counts}, server {noisy_cpu / loaded_wall:.0%} of a core"
    p99_isolated, p99_loaded = np.percentile(isolated, 99), np.percentile(loaded, 99)
    ratio = p99_loaded / p99_isolated
    print(f"\nquiet P99 isolated {p99_isolated:.2f} ms, with noisy neighbour {p99_loaded:.2f} ms (x{ratio:.2f}); "
          f"P50 {np.median(isolated):.2f} -> {np.median(loaded):.2f} ms; noise {counts['ok']} batch-64 requests, "
          f"noisy core busy {busy:.0%} (server {noisy_cpu / loaded_wall:.0%})")
    assert ratio <= NOISY_NEIGHBOUR_P99_FACTOR, f"quiet P99 {p99_isolated:.2f} -> {p99_loaded:.2f} ms (x{ratio:.2f})"


def _cpu_seconds(pid: int, group: bool = True) -> float:
    """User+system CPU seconds of process `pid`, or of every live process in the group it leads
    (a server and its Python-backend stubs), from /proc/<pid>/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in (os.listdir("/proc") if group else [str(pid)]):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if not group or int(fields[2]) == pid:  # field 5 (pgrp) after the command name
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def test_kill_9_partition_is_restarted_and_clients_recover(partitions):
    """kill -9 the quiet partition's server: the supervisor restarts it within RESTART_BOUND_S, the
    manifest names the new pid, and a client that keeps calling (model_client's ResilientClient:
    endpoints from the manifest, bounded retries with backoff) gets every answer."""
    from model_client.errors import ClientError
    from model_client.policies import RetryPolicy
    from model_client.resilient import ResilientClient
    from serving.supervisor import triton_shm_regions

    layout, manifest = partitions
    old_pid = _state(layout)["partitions"]["quiet"]["pid"]
    old_regions = triton_shm_regions(old_pid)
    restarts_before = _state(layout)["partitions"]["quiet"]["restarts"]
    image = np.random.default_rng(2).random((1, 1, 8, 8), dtype=np.float32)
    outcomes = {"requests": 0, "answered": 0, "gave_up": 0, "server_calls": 0, "retried_requests": 0}
    stop = threading.Event()
    retry = RetryPolicy(max_attempts=60, base_delay_s=0.05, max_delay_s=0.5, deadline_s=RESTART_BOUND_S + 10)

    def client_loop(max_requests: int = 400):
        with ResilientClient("http", manifest=layout.manifest, retry=retry, network_timeout_s=5) as client:
            for _ in range(max_requests):
                if stop.is_set():
                    break
                outcomes["requests"] += 1
                try:
                    outcome = client.infer("digit_classifier_small", {"image": image})
                except ClientError:
                    outcomes["gave_up"] += 1
                    continue
                assert outcome.outputs["probabilities"].shape == (1, 10)
                outcomes["answered"] += 1
                outcomes["server_calls"] += outcome.calls
                outcomes["retried_requests"] += outcome.calls > 1
                time.sleep(0.02)

    worker = threading.Thread(target=client_loop)
    worker.start()
    try:
        time.sleep(0.5)
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        restored = None
        while time.monotonic() - killed_at < RESTART_BOUND_S:
            part = _state(layout)["partitions"]["quiet"]
            if part["state"] == "ready" and part["pid"] != old_pid:
                restored = time.monotonic() - killed_at
                break
            time.sleep(0.1)
        answered_at_restore = outcomes["answered"]
        time.sleep(1.0)  # the client keeps going on the restarted server
    finally:
        stop.set()
        worker.join(timeout=RESTART_BOUND_S + 20)
    assert restored is not None, f"quiet was not restarted within {RESTART_BOUND_S} s:\n{layout.supervisor_log.read_text()[-2000:]}"
    state = _state(layout)["partitions"]["quiet"]
    assert state["restarts"] == restarts_before + 1 and "SIGKILL" in (state["last_exit"] or "")
    assert json.loads(layout.manifest.read_text())["partitions"]["quiet"]["pid"] == state["pid"] != old_pid
    assert _state(layout)["partitions"]["noisy"]["state"] == "ready"  # the other partition was untouched
    assert old_regions and not any(Path(r).exists() for r in old_regions)  # the killed server's IPC memory was freed
    # Every request is accounted for: answered (maybe after retries) or given up on; none gave up.
    assert not worker.is_alive()
    assert outcomes["requests"] == outcomes["answered"] + outcomes["gave_up"], outcomes
    assert outcomes["gave_up"] == 0 and outcomes["retried_requests"] >= 1, outcomes
    assert outcomes["answered"] > answered_at_restore, "no request was answered after the restart"
    print(f"\nquiet restarted {restored:.2f} s after kill -9; client: {outcomes}")


@pytest.mark.gpu
def test_mps_control_daemon_starts_and_stops_under_the_run_dir(tmp_path):
    """The GPU branch of the launcher, for real: only where an NVIDIA GPU and MPS exist."""
    from serving.launcher import RunLayout, start_mps_daemon, stop_mps_daemon
    from serving.partition_plan import detect_nvidia_gpu

    gpu = detect_nvidia_gpu()
    if not gpu.present or shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip(f"needs an NVIDIA GPU with CUDA MPS ({gpu.detail})")
    layout = RunLayout(tmp_path)
    start_mps_daemon(layout)
    try:
        assert (layout.mps_pipe / "control").exists()
    finally:
        assert stop_mps_daemon(layout)
