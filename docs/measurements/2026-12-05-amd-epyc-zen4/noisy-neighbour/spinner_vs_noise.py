"""The quiet partition's P99 isolated vs beside a pure CPU spinner on the noisy core (no Triton there at
all: the hardware's floor) vs beside the test's noise (the noisy partition flooded), in one supervisor
start.  .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/noisy-neighbour/spinner_vs_noise.py ROUNDS
"""
import os, subprocess, sys, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration")]
import numpy as np
import test_partitions as measured
from conftest import SERVING_CONFIG, free_ports
from partition_probe import measure_noisy_neighbour, two_partition_config, probe_latencies_ms, QUIET_MODEL
from contracts.layout import RunLayout
from contracts.serving_spec import load_serving_spec
from serving.runtime.supervisor import start_supervisor, stop_supervisor

run_dir = Path(tempfile.mkdtemp(prefix="spin-"))
config = run_dir / "serving.toml"
config.write_text(two_partition_config(free_ports(7), load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds))
repository = measured.render_test_repository(config, run_dir / "repository")
layout = RunLayout(run_dir)
manifest = start_supervisor(config, repository, layout, timeout_s=120)
quiet, noisy = manifest.partitions["quiet"], manifest.partitions["noisy"]
print("quiet cpus", quiet.cpus, "noisy cpus", noisy.cpus, flush=True)
image = np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32)
os.sched_setaffinity(0, quiet.cpus)
try:
    for round_ in range(int(sys.argv[1])):
        iso, spin = [], []
        probe_latencies_ms(quiet.http, QUIET_MODEL, image, 30)
        for _ in range(30):
            iso += probe_latencies_ms(quiet.http, QUIET_MODEL, image, 200)
            p = subprocess.Popen(["taskset", "-c", ",".join(map(str, noisy.cpus)), sys.executable, "-c", "while True: pass"])
            time.sleep(0.3)
            spin += probe_latencies_ms(quiet.http, QUIET_MODEL, image, 200)
            p.kill(); p.wait()
        print(f"round {round_} spinner: x{np.percentile(spin, 99) / np.percentile(iso, 99):.2f} P99 {np.percentile(iso, 99):.2f} -> {np.percentile(spin, 99):.2f}", flush=True)
        os.sched_setaffinity(0, set(quiet.cpus) | set(noisy.cpus))
        run = measure_noisy_neighbour(quiet, noisy, probe_cpus=quiet.cpus, noise_cpus=noisy.cpus, blocks=30, block=200, warmup=30)
        print(f"round {round_} noise:   {run.summary()}", flush=True)
        os.sched_setaffinity(0, quiet.cpus)
finally:
    stop_supervisor(layout)
