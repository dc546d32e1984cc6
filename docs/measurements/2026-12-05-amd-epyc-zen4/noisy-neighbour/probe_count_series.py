"""Does a larger probe sample steady the noisy-neighbour P99 ratio? One supervisor start (as
tests/integration/test_partitions.py starts it: elastic CPU sets, serving.toml's batching delay),
then alternating measurements with the test's old sample (6 blocks of 200 probes a side) and a
larger one (30 blocks of 200), printing each ratio.

    .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/noisy-neighbour/probe_count_series.py ROUNDS
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration")]

import numpy as np  # noqa: E402

import test_partitions as measured  # noqa: E402
from conftest import SERVING_CONFIG, free_ports  # noqa: E402
from partition_probe import measure_noisy_neighbour, two_partition_config  # noqa: E402

SAMPLES = ((6, 200), (30, 200))


def main(rounds: int) -> None:
    from contracts.layout import RunLayout
    from contracts.serving_spec import load_serving_spec
    from serving.runtime.supervisor import start_supervisor, stop_supervisor

    run_dir = Path(tempfile.mkdtemp(prefix="probe-count-"))
    config = run_dir / "serving.toml"
    delay = load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds
    config.write_text(two_partition_config(free_ports(7), delay))
    repository = measured.render_test_repository(config, run_dir / "repository")
    layout = RunLayout(run_dir)
    manifest = start_supervisor(config, repository, layout, timeout_s=120)
    quiet, noisy = manifest.partitions["quiet"], manifest.partitions["noisy"]
    try:
        for round_ in range(rounds):
            for blocks, block in SAMPLES:
                started = time.perf_counter()
                run = measure_noisy_neighbour(quiet, noisy, probe_cpus=quiet.cpus, noise_cpus=noisy.cpus,
                                              blocks=blocks, block=block, warmup=measured.PROBE_WARMUP)
                ratio = np.percentile(run.loaded_ms, 99) / np.percentile(run.isolated_ms, 99)
                print(f"round {round_} {blocks}x{block}: x{ratio:.2f}  {run.summary()}  "
                      f"({time.perf_counter() - started:.1f} s, load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        stop_supervisor(layout)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
