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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import test_partitions as measured  # noqa: E402  (the test's repository and probe settings)
from conftest import PROJECT_ROOT, free_ports  # noqa: E402
from partition_probe import group_stat_fields, measure_noisy_neighbour, two_partition_config  # noqa: E402

REPORT = PROJECT_ROOT / "reports" / "partitions" / "isolation_contrast.txt"
#: Unlike the test, a fixed 10 ms batching window (the project's default), whatever serving.toml says.
MAX_QUEUE_DELAY_US = 10_000


def set_group_affinity(leader: int, cpus) -> None:
    for pid in group_stat_fields(leader):
        subprocess.run(["taskset", "-a", "-p", "-c", ",".join(map(str, cpus)), str(pid)], capture_output=True)


def measure(manifest, pinned: bool) -> str:
    """The test's measurement, with the partitions (and the probe and noise) pinned as launched or
    spread over every core."""
    quiet, noisy = manifest.partitions["quiet"], manifest.partitions["noisy"]
    everything = sorted(os.sched_getaffinity(0))
    for part in (quiet, noisy):
        set_group_affinity(part.pid, part.cpus if pinned else everything)
    run = measure_noisy_neighbour(quiet, noisy, probe_cpus=quiet.cpus if pinned else everything,
                                  noise_cpus=noisy.cpus if pinned else everything, blocks=measured.PROBE_BLOCKS,
                                  block=measured.PROBE_REQUESTS // measured.PROBE_BLOCKS, warmup=measured.PROBE_WARMUP)
    return f"{'pinned  ' if pinned else 'unpinned'}: {run.summary()}; noise {json.dumps(dict(run.noise_counts))}"


def main(rounds: int = 2) -> None:
    from contracts.layout import RunLayout
    from serving.runtime.supervisor import start_supervisor, stop_supervisor

    run_dir = Path(tempfile.mkdtemp(prefix="partition-isolation-"))
    config = run_dir / "serving.toml"
    config.write_text(two_partition_config(free_ports(7), MAX_QUEUE_DELAY_US))
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
