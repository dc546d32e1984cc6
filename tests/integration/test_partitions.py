"""Partitions served by real tritonservers under the real supervisor (the code `make serve` runs).

Two partitions on free loopback ports in a temporary run directory, one core each:
`noisy` serves digit_classifier, `quiet` serves digit_classifier_small.
"""
from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Mapping

import numpy as np
import pytest

from conftest import REPOSITORY, free_ports, poll_until
from contracts.manifest import read_manifest
from contracts.supervisor_state import PartitionStatus, read_supervisor_state
from partition_probe import QUIET_MODEL, measure_noisy_neighbour, two_partition_config

# Latency ratios and timing bounds: must not run beside another test process (`make test` runs one).
pytestmark = [pytest.mark.server, pytest.mark.alone]

#: A noisy neighbour may raise the quiet partition's P99 by at most this factor: issue 10's target.
#: Measured on 30 alternating blocks of 200 probes a side. A P99 of 1,200 ~0.5 ms probes (6 blocks,
#: as before) rests on its 12 slowest and swung x0.67-1.47 between back-to-back measurements of one
#: server; of 6,000, x0.96-1.38 in 33 of 34 measurements here (one x1.63, measured again x1.07),
#: and a pure CPU spinner on the other core (no Triton at all: the hardware's share) costs
#: x1.19-1.37 by itself (docs/partitions.md, "Isolation, measured"). Without isolation (CPU shares)
#: it is x4.8.
NOISY_NEIGHBOUR_P99_FACTOR = 1.5
#: Measurements at most: one above the factor is taken again (a noisy-machine moment hits one
#: 17-second measurement, a lost isolation every one). Each is printed.
NOISY_NEIGHBOUR_ATTEMPTS = 3
#: The supervisor must bring a kill -9'd partition back within this many seconds (measured ~3 s:
#: 0.5 s backoff + ~2 s tritonserver start-up + the Python-backend model load).
RESTART_BOUND_S = 30.0
PROBE_REQUESTS = 6000
PROBE_BLOCKS = 30
PROBE_WARMUP = 30


def render_test_repository(config, repository):
    """The digit models' ONNX files with configs rendered from the test's serving.toml.

    The test spec keeps the project's batching window but declares no priority levels or queue
    policies: with them, Triton 2.51's dynamic batcher intermittently leaves a request queued for
    its 500 ms idle wait (seen here on 0-3% of sequential requests, with or without partitions),
    which would swamp any P99 and make the neighbour comparison meaningless.
    """
    from contracts.model_config import render_onnx_cpu_config, tensor_specs_from_onnx, write_model_config
    from contracts.serving_spec import load_serving_spec

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
    from contracts.layout import RunLayout
    from contracts.serving_spec import load_serving_spec
    from serving.runtime.supervisor import start_supervisor, stop_supervisor

    from conftest import SERVING_CONFIG

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("partition tests need 2 cores (one per partition)")
    run_dir = tmp_path_factory.mktemp("partitions")
    ports = free_ports(7)
    config = run_dir / "serving.toml"
    delay = load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds
    config.write_text(two_partition_config(ports, delay, os.environ.get("TEST_PARTITION_PLACEMENT")))
    repository = render_test_repository(config, run_dir / "repository")
    layout = RunLayout(run_dir)
    manifest = start_supervisor(config, repository, layout, timeout_s=120)
    loaded = {name: part.models_ready for name, part in _partitions(layout).items()}
    if not all(all(models.values()) for models in loaded.values()):
        stop_supervisor(layout)
        pytest.fail(f"models did not load: {loaded}; see {layout.logs}")
    yield layout, manifest
    stop_supervisor(layout)


def _partitions(layout) -> Mapping[str, PartitionStatus]:
    """Each partition as run/supervisor.json records it (through its one typed reader)."""
    return read_supervisor_state(layout.supervisor_state).partitions


def test_noisy_neighbour_leaves_the_other_partitions_p99_within_factor(partitions):
    """Saturating `noisy` must leave `quiet`'s P99 within NOISY_NEIGHBOUR_P99_FACTOR x its isolated P99.

    With elastic CPU sets (the default placement) each partition owns one core; while both are
    busy each is pinned to its own (an idle one lends its core to the busy one: the next test). So
    the noisy partition's 8 batch-64 clients cannot take CPU time from the quiet one; what remains
    shared is the last-level cache, memory bandwidth and the kernel. With CPU shares instead
    (`cpu = "shares"`, both partitions on both cores at equal weight) the same measurement gave
    x4.8 here: every hop of a quiet request waits for the scheduler to preempt a busy neighbour
    thread (docs/partitions.md). The probe (sequential one-image requests) and the noise run on
    their partitions' home cores; isolated and loaded blocks alternate in this one test, so drift in
    the machine's other load hits both alike. A probe takes ~0.5 ms, so the shared last-level cache
    and the kernel move its P99 by x1.2-1.4 here over 6,000 probes a side: a bare CPU spinner on
    the other core, no Triton there at all, costs x1.19-1.37 by itself.
    """
    layout, manifest = partitions
    quiet, noisy = manifest.partitions["quiet"], manifest.partitions["noisy"]
    if manifest.mechanism in ("cpu_sets", "elastic_cpu_sets"):  # home cores (elastic: lent while idle)
        assert set(quiet.cpus).isdisjoint(noisy.cpus)
    else:
        assert manifest.mechanism == "cpu_shares" and list(quiet.cpus) == list(noisy.cpus) == sorted(os.sched_getaffinity(0))
    def measure():
        return measure_noisy_neighbour(quiet, noisy, probe_cpus=quiet.cpus, noise_cpus=noisy.cpus, blocks=PROBE_BLOCKS,
                                       block=PROBE_REQUESTS // PROBE_BLOCKS, warmup=PROBE_WARMUP)

    def p99_ratio(r):
        return np.percentile(r.loaded_ms, 99) / np.percentile(r.isolated_ms, 99)

    run = measure()
    for attempt in range(1, NOISY_NEIGHBOUR_ATTEMPTS):
        if p99_ratio(run) <= NOISY_NEIGHBOUR_P99_FACTOR:
            break
        print(f"\nmeasurement {attempt} x{p99_ratio(run):.2f} above x{NOISY_NEIGHBOUR_P99_FACTOR}: measured again")
        run = measure()
    isolated, loaded, counts = run.isolated_ms, run.loaded_ms, run.noise_counts
    noisy_cpu, noise_cpu, loaded_wall = run.noisy_server_cpu_s, run.noise_cpu_s, run.loaded_wall_s
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


def test_an_idle_partition_lends_its_core_to_the_busy_one_and_takes_it_back(partitions):
    """Elastic CPU sets: load on `quiet` alone moves its server and stubs onto both cores within a
    supervisor tick or two; a couple of seconds after the load stops they are back on their own."""
    import threading

    layout, manifest = partitions
    if manifest.mechanism != "elastic_cpu_sets":
        pytest.skip(f"placement is {manifest.mechanism}, not elastic CPU sets")
    quiet, noisy = manifest.partitions["quiet"], manifest.partitions["noisy"]
    everything = sorted(set(quiet.cpus) | set(noisy.cpus))
    stop = threading.Event()

    def load():
        import numpy as np
        import tritonclient.http as http

        with http.InferenceServerClient(quiet.http) as client:
            tensor = http.InferInput("image", [32, 1, 8, 8], "FP32")
            tensor.set_data_from_numpy(np.zeros((32, 1, 8, 8), np.float32))
            while not stop.is_set():
                client.infer(QUIET_MODEL, [tensor])

    worker = threading.Thread(target=load)
    worker.start()
    try:
        lent = poll_until(lambda: _partitions(layout), lambda p: list(p["quiet"].cpus_now) == everything, 10)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert list(lent["quiet"].cpus_now) == everything and list(lent["noisy"].cpus_now) == list(noisy.cpus), lent
    assert sorted(os.sched_getaffinity(quiet.pid)) == everything
    back = poll_until(lambda: _partitions(layout), lambda p: list(p["quiet"].cpus_now) == list(quiet.cpus), 10)
    assert list(back["quiet"].cpus_now) == list(quiet.cpus), back
    assert sorted(os.sched_getaffinity(quiet.pid)) == list(quiet.cpus)


def test_kill_9_partition_is_restarted_and_clients_recover(partitions):
    """kill -9 the quiet partition's server: the supervisor restarts it within RESTART_BOUND_S, the
    manifest names the new pid, and a client that keeps calling (model_client's ResilientClient:
    endpoints from the manifest, bounded retries with backoff) gets every answer."""
    from model_client.errors import ClientError
    from model_client.policies import RetryPolicy
    from model_client.resilient import ResilientClient
    from contracts.shared_memory import triton_shm_regions

    layout, manifest = partitions
    old_pid = _partitions(layout)["quiet"].pid
    old_regions = triton_shm_regions(old_pid)
    restarts_before = _partitions(layout)["quiet"].restarts
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
            part = _partitions(layout)["quiet"]
            if part.state == "ready" and part.pid != old_pid:
                restored = time.monotonic() - killed_at
                break
            time.sleep(0.1)
        answered_at_restore = outcomes["answered"]
        time.sleep(1.0)  # the client keeps going on the restarted server
    finally:
        stop.set()
        worker.join(timeout=RESTART_BOUND_S + 20)
    assert restored is not None, f"quiet was not restarted within {RESTART_BOUND_S} s:\n{layout.supervisor_log.read_text()[-2000:]}"
    state = _partitions(layout)["quiet"]
    assert state.restarts == restarts_before + 1 and "SIGKILL" in (state.last_exit or "")
    assert read_manifest(layout.manifest).partitions["quiet"].pid == state.pid != old_pid
    assert _partitions(layout)["noisy"].state == "ready"  # the other partition was untouched
    assert old_regions and not any(Path(r).exists() for r in old_regions)  # the killed server's IPC memory was freed
    # Every request is accounted for: answered (maybe after retries) or given up on; none gave up.
    assert not worker.is_alive()
    assert outcomes["requests"] == outcomes["answered"] + outcomes["gave_up"], outcomes
    assert outcomes["gave_up"] == 0 and outcomes["retried_requests"] >= 1, outcomes
    assert outcomes["answered"] > answered_at_restore, "no request was answered after the restart"
    print(f"\nquiet restarted {restored:.2f} s after kill -9; client: {outcomes}")


def test_sigstopped_partition_is_declared_hung_killed_and_restarted(partitions):
    """SIGSTOP the quiet partition's server: it stays alive but answers nothing. The supervisor's
    /v2/health/live probes go unanswered 3 times, it SIGKILLs the stopped server's process group
    (server and backend stubs) and restarts it through the usual backoff; a client is answered by
    the new server. Detection may not come sooner than 3 unanswered probes (6 s) nor much later than
    the policy's worst case (8 s)."""
    from model_client.client import TritonModelClient
    from partition_probe import group_stat_fields
    from contracts.processes import pid_alive
    from contracts.shared_memory import triton_shm_regions
    from serving.runtime.supervisor import RestartPolicy

    layout, _ = partitions
    policy = RestartPolicy()  # what `serving supervise` runs with
    least = (policy.liveness_failures - 1) * policy.liveness_interval_s + policy.liveness_timeout_s
    before = _partitions(layout)
    old_pid, noisy_pid = before["quiet"].pid, before["noisy"].pid
    group = group_stat_fields(old_pid)
    old_regions = triton_shm_regions(old_pid)
    assert len(group) >= 2, f"expected the server and its backend stub in group {old_pid}: {group}"
    detected = restored = None
    stopped_at = time.monotonic()
    os.kill(old_pid, signal.SIGSTOP)
    try:
        while time.monotonic() - stopped_at < policy.hang_detection_s + RESTART_BOUND_S:
            part = _partitions(layout)["quiet"]
            if detected is None and part.state != "ready":
                detected = time.monotonic() - stopped_at
            if part.state == "ready" and part.pid != old_pid:
                restored = time.monotonic() - stopped_at
                break
            time.sleep(0.05)
    finally:  # whatever happened, leave nothing of the old server stopped or running
        try:
            if b"tritonserver" in Path(f"/proc/{old_pid}/cmdline").read_bytes():
                os.killpg(old_pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass  # already gone: the supervisor killed and reaped it
    log_text = layout.supervisor_log.read_text()
    assert restored is not None, f"quiet was not restarted after SIGSTOP:\n{log_text[-2000:]}"
    state = _partitions(layout)
    reason = (f"hung: /v2/health/live unanswered {policy.liveness_failures} times in a row "
              f"({policy.liveness_timeout_s:g} s timeout each; last: timed out after {policy.liveness_timeout_s:g} s)")
    assert state["quiet"].last_exit == reason
    assert f"partition quiet (pid {old_pid}) {reason}; restart" in log_text
    assert state["quiet"].restarts == before["quiet"].restarts + 1
    assert (state["noisy"].state, state["noisy"].pid) == ("ready", noisy_pid)  # the other partition untouched
    assert read_manifest(layout.manifest).partitions["quiet"].pid == state["quiet"].pid
    # the old group is gone: nothing stopped or running (a reparented stub may linger as a zombie)
    left = {pid: fields[0] for pid, fields in group_stat_fields(old_pid).items() if fields[0] != "Z"}
    assert not left and not pid_alive(old_pid), f"left of process group {old_pid}: {left}"
    assert old_regions and not any(Path(r).exists() for r in old_regions)
    image = np.random.default_rng(3).random((1, 1, 8, 8), dtype=np.float32)
    with TritonModelClient(read_manifest(layout.manifest).model("digit_classifier_small").http, "http",
                           network_timeout_s=10) as client:
        probabilities = client.infer("digit_classifier_small", {"image": image})["probabilities"]
    assert probabilities.shape == (1, 10) and abs(float(probabilities.sum()) - 1.0) < 1e-4
    print(f"\nSIGSTOP of quiet (pid {old_pid}, group of {len(group)}): declared hung after {detected:.2f} s "
          f"(policy: {least:g}..{policy.hang_detection_s:g} s), ready again as pid {state['quiet'].pid} "
          f"{restored:.2f} s after the SIGSTOP ({restored - detected:.2f} s from detection to ready)")
    assert least - 0.3 <= detected <= policy.hang_detection_s + 4.0, f"declared hung after {detected:.2f} s"


def test_the_partitions_of_a_killed_supervisor_are_stopped_with_their_shared_memory(partitions):
    """Last of the module's partition tests (it ends their supervisor). A supervisor killed with SIGKILL
    leaves its partition servers running; the next `serve` or `stop` stops them, but left their backend
    IPC regions (1 MiB and more each) and activity files in /dev/shm (a review, 2026-12-07)."""
    from contracts.shared_memory import SHARED_MEMORY_DIR, triton_shm_regions
    from serving.runtime.supervisor import stop_supervisor

    import http.client

    layout, manifest = partitions
    state = read_supervisor_state(layout.supervisor_state)
    servers = {name: part.pid for name, part in state.partitions.items()}
    regions = {pid: triton_shm_regions(pid) for pid in servers.values()}
    assert all(regions.values()), regions  # each server maps its stubs' regions
    # an idle keep-alive client on one: Triton's stop then waits out its exit timeout (10 s) and does not
    # exit cleanly (it removes its own regions only then), as the review's orphans did; the other stops cleanly
    clients = []
    for name in list(servers)[:1]:
        host, port = manifest.partitions[name].http.split(":")
        clients.append(http.client.HTTPConnection(host, int(port), timeout=30))
        clients[-1].request("GET", "/v2/health/live")
        clients[-1].getresponse().read()
    os.kill(state.supervisor_pid, signal.SIGKILL)
    assert poll_until(lambda: not Path(f"/proc/{state.supervisor_pid}").exists() or
                      Path(f"/proc/{state.supervisor_pid}/stat").read_text().split(") ")[-1].startswith("Z"),
                      lambda gone: gone, 10)
    try:
        done = stop_supervisor(layout)
    finally:
        for client in clients:
            client.close()
    assert [f"stopped partition {name} (pid {pid}) left behind" for name, pid in servers.items()] == \
        [line for line in done if line.startswith("stopped partition")], done
    left = [r for rs in regions.values() for r in rs if Path(r).exists()]
    left += [str(p) for pid in servers.values() for p in SHARED_MEMORY_DIR.glob(f"serving-*-{pid}-activity")]
    assert left == [], left


@pytest.mark.gpu
def test_mps_control_daemon_starts_and_stops_under_the_run_dir(tmp_path):
    """The GPU branch of the launcher, for real: only where an NVIDIA GPU and MPS exist."""
    from serving.runtime.launcher import RunLayout, start_mps_daemon, stop_mps_daemon
    from contracts.partition_plan import detect_nvidia_gpu

    gpu = detect_nvidia_gpu()
    if not gpu.present or shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip(f"needs an NVIDIA GPU with CUDA MPS ({gpu.detail})")
    layout = RunLayout(tmp_path)
    start_mps_daemon(layout)
    try:
        assert (layout.mps_pipe / "control").exists()
    finally:
        assert stop_mps_daemon(layout)
