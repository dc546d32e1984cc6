"""The noisy-neighbour measurement, shared by test_partitions.py (the test) and
partition_isolation_contrast.py (the same measurement pinned vs unpinned).

Two partitions, `noisy` (digit_classifier) and `quiet` (digit_classifier_small). The probe sends
sequential one-image requests to `quiet`; a separate noise process keeps `noisy` saturated.
Isolated and loaded blocks alternate, so drift in the machine's other load hits both alike.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

import numpy as np

from contracts.manifest import PartitionEntry

#: The quiet partition's model, probed; and the noisy partition's model, flooded.
QUIET_MODEL, NOISY_MODEL = "digit_classifier_small", "digit_classifier"
#: Noise: threads (requests in flight), and its bounds whatever happens.
NOISE_THREADS, NOISE_MAX_REQUESTS, NOISE_MAX_SECONDS = 8, 50_000, 120


def two_partition_config(ports: Sequence[int], max_queue_delay_us: int, placement: str | None = None) -> str:
    """serving.toml text: `noisy` and `quiet`, half the cores each, on the six given ports
    (noisy's also serve as the [server] defaults), plus the supervisor's metrics port (a 7th)."""
    http, grpc, metrics, supervisor = ports[:3] + ports[6:7]
    partitions = "".join(textwrap.dedent(f"""
        [partitions.{name}]
        compute_share = 50
        memory_mb = 512
        http_port = {ports[offset]}
        grpc_port = {ports[offset + 1]}
        metrics_port = {ports[offset + 2]}
    """) for name, offset in (("noisy", 0), ("quiet", 3)))
    return textwrap.dedent(f"""
        [server]
        host = "127.0.0.1"
        http_port = {http}
        grpc_port = {grpc}
        metrics_port = {metrics}
        supervisor_metrics_port = {supervisor}
        {"cond_wait_cap_us = " + os.environ["TEST_COND_WAIT_CAP_US"] if os.environ.get("TEST_COND_WAIT_CAP_US") else ""}

        {f'[placement]{chr(10)}        cpu = "{placement}"' if placement else ""}

        [batching]
        max_queue_delay_microseconds = {max_queue_delay_us}

        [models.{NOISY_MODEL}]
        recipe = "digit_cnn"
        partition = "noisy"

        [models.{QUIET_MODEL}]
        recipe = "digit_cnn"
        partition = "quiet"
    """) + partitions


def probe_latencies_ms(url: str, model: str, image: np.ndarray, count: int) -> list[float]:
    """`count` sequential requests; the latency of each, in ms (raises if any is not answered)."""
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
print("ready", flush=True)
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


def group_stat_fields(pgid: int) -> dict[int, list[str]]:
    """pid -> /proc/<pid>/stat fields after the command name (state first), for every live process
    in process group `pgid` (a server and the Python-backend stubs it forked)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:  # field 5 (pgrp) of stat
                found[int(entry)] = fields
    return found


def cpu_seconds(pid: int, group: bool = True) -> float:
    """User+system CPU seconds of process `pid`, or of every live process in the group it leads."""
    if group:
        members = group_stat_fields(pid).values()
    else:
        try:
            members = [open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()]
        except OSError:
            members = []
    return sum(int(fields[11]) + int(fields[12]) for fields in members) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class NeighbourMeasurement:
    """The quiet partition's latencies without and with the noise, and what the noise did."""

    isolated_ms: tuple[float, ...]
    loaded_ms: tuple[float, ...]
    #: The noise process's requests: sent == ok + errors when it stopped cleanly.
    noise_counts: Mapping[str, int]
    #: CPU seconds of the noisy partition's server group and of the noise process, and the wall
    #: seconds of the loaded blocks they were measured over.
    noisy_server_cpu_s: float
    noise_cpu_s: float
    loaded_wall_s: float

    def summary(self) -> str:
        p_iso, p_load = np.percentile(self.isolated_ms, 99), np.percentile(self.loaded_ms, 99)
        return (f"quiet P99 isolated {p_iso:.2f} ms loaded {p_load:.2f} ms ratio x{p_load / p_iso:.2f}; "
                f"P50 {np.median(self.isolated_ms):.2f} -> {np.median(self.loaded_ms):.2f} ms")


def measure_noisy_neighbour(quiet: PartitionEntry, noisy: PartitionEntry, probe_cpus: Collection[int], noise_cpus: Collection[int],
                            blocks: int, block: int, warmup: int, noise_timeout_s: float = 90) -> NeighbourMeasurement:
    """Probe `quiet` (a manifest partition entry: http, pid) `warmup` times, then `blocks` times
    `block` requests isolated and `block` loaded, while the noise floods `noisy` from `noise_cpus`.
    The probe runs on `probe_cpus` (this process's affinity is restored afterwards); the noise
    process is stopped and its counts read, or killed if anything failed."""
    image = np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32)
    isolated, loaded, noisy_cpu, noise_cpu, loaded_wall = [], [], 0.0, 0.0, 0.0
    args = json.dumps([sorted(noise_cpus), noisy.http, NOISY_MODEL, NOISE_THREADS, NOISE_MAX_REQUESTS,
                       NOISE_MAX_SECONDS])
    noise = subprocess.Popen([sys.executable, "-c", NOISE_SCRIPT, args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)

    def command(word: str, answer: str | None) -> None:
        noise.stdin.write(word + "\n")
        noise.stdin.flush()
        if answer:
            assert noise.stdout.readline().strip() == answer, f"noise generator did not answer {answer!r}"

    original_affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, probe_cpus)
    try:
        # Its interpreter start-up (numpy, tritonclient: ~0.5 s of CPU) runs before it pins itself,
        # on any core, the quiet one included: probing only after its "ready" keeps that out of the
        # blocks (seen before the wait: a first block's probes at 1.5-5.4 ms instead of 0.5).
        assert noise.stdout.readline().strip() == "ready", "noise generator did not start"
        probe_latencies_ms(quiet.http, QUIET_MODEL, image, warmup)
        for _ in range(blocks):
            isolated += probe_latencies_ms(quiet.http, QUIET_MODEL, image, block)
            command("run", "running")
            cpu_before, noise_before, wall_before = cpu_seconds(noisy.pid), cpu_seconds(noise.pid, group=False), time.perf_counter()
            loaded += probe_latencies_ms(quiet.http, QUIET_MODEL, image, block)
            noisy_cpu += cpu_seconds(noisy.pid) - cpu_before
            noise_cpu += cpu_seconds(noise.pid, group=False) - noise_before
            loaded_wall += time.perf_counter() - wall_before
            command("pause", "paused")
        command("stop", None)
        out, _ = noise.communicate(timeout=noise_timeout_s)
    finally:
        os.sched_setaffinity(0, original_affinity)
        if noise.poll() is None:
            noise.kill()
            noise.wait()
    return NeighbourMeasurement(tuple(isolated), tuple(loaded), json.loads(out.strip().splitlines()[-1]),
                                noisy_cpu, noise_cpu, loaded_wall)
