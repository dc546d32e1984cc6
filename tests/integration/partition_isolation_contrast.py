"""The noisy-neighbour measurement of test_partitions.py, pinned (as launched) vs unpinned.

Not a test (no `test_` prefix): a companion measurement showing what the CPU sets buy. It starts
two partitions under the real supervisor on free ports in a temporary run directory, then for each
round measures the quiet partition's P99 isolated and under a noisy neighbour, first as launched
(each partition pinned to its core), then with every process's affinity widened to all cores.
Appends one line per round to reports/partitions/isolation_contrast.txt.

    .venv/bin/python tests/integration/partition_isolation_contrast.py [rounds]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import test_partitions as measured  # noqa: E402  (the test's probe, noise and repository helpers)
from conftest import PROJECT_ROOT, free_ports  # noqa: E402

REPORT = PROJECT_ROOT / "reports" / "partitions" / "isolation_contrast.txt"


def set_group_affinity(leader: int, cpus) -> None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == leader:
                subprocess.run(["taskset", "-a", "-p", "-c", ",".join(map(str, cpus)), entry], capture_output=True)


def measure(manifest: dict, pinned: bool, blocks: int = 4, block: int = 100) -> str:
    quiet, noisy = manifest["partitions"]["quiet"], manifest["partitions"]["noisy"]
    everything = sorted(os.sched_getaffinity(0))
    for part in (quiet, noisy):
        set_group_affinity(part["pid"], part["cpus"] if pinned else everything)
    image = np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32)
    args = json.dumps([noisy["cpus"] if pinned else everything, noisy["http"], "digit_classifier", 8, 50_000, 60])
    noise = subprocess.Popen([sys.executable, "-c", measured.NOISE_SCRIPT, args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)

    def command(word: str, answer: str | None) -> None:
        noise.stdin.write(word + "\n")
        noise.stdin.flush()
        if answer:
            assert noise.stdout.readline().strip() == answer

    os.sched_setaffinity(0, quiet["cpus"] if pinned else everything)
    isolated, loaded = [], []
    try:
        measured._probe_latencies_ms(quiet["http"], "digit_classifier_small", image, 30)
        for _ in range(blocks):
            isolated += measured._probe_latencies_ms(quiet["http"], "digit_classifier_small", image, block)
            command("run", "running")
            loaded += measured._probe_latencies_ms(quiet["http"], "digit_classifier_small", image, block)
            command("pause", "paused")
        command("stop", None)
        out, _ = noise.communicate(timeout=60)
    finally:
        os.sched_setaffinity(0, everything)
    p_iso, p_load = np.percentile(isolated, 99), np.percentile(loaded, 99)
    return (f"{'pinned  ' if pinned else 'unpinned'}: quiet P99 isolated {p_iso:.2f} ms loaded {p_load:.2f} ms "
            f"ratio x{p_load / p_iso:.2f}; P50 {np.median(isolated):.2f} -> {np.median(loaded):.2f} ms; "
            f"noise {out.strip().splitlines()[-1]}")


def main(rounds: int = 2) -> None:
    from serving.launcher import RunLayout
    from serving.supervisor import start_supervisor, stop_supervisor

    run_dir = Path(tempfile.mkdtemp(prefix="partition-isolation-"))
    ports = free_ports(6)
    config = run_dir / "serving.toml"
    config.write_text(textwrap.dedent(f"""
        [server]
        http_port = {ports[0]}
        grpc_port = {ports[1]}
        metrics_port = {ports[2]}
        [batching]
        max_queue_delay_microseconds = 10000
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
    repository = measured.render_test_repository(config, run_dir / "repository")
    layout = RunLayout(run_dir)
    manifest = start_supervisor(config, repository, layout, timeout_s=120)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    try:
        for _ in range(rounds):
            for pinned in (True, False):
                line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} load {os.getloadavg()[0]:.1f} " + measure(manifest, pinned)
                print(line, flush=True)
                with open(REPORT, "a") as report:
                    report.write(line + "\n")
    finally:
        stop_supervisor(layout)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
