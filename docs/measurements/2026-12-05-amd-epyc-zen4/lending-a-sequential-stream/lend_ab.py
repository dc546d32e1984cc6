"""Quiet partition alone (noisy idle), sequential one-image probes for 20 s from a fresh supervisor:
elastic CPU sets (lends the idle core) vs static cpu_sets, alternating starts."""
import os, sys, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration")]
import numpy as np
import test_partitions as measured
from conftest import SERVING_CONFIG, free_ports
from partition_probe import two_partition_config, QUIET_MODEL
from contracts.layout import RunLayout
from contracts.serving_spec import load_serving_spec
from contracts.supervisor_state import read_supervisor_state
from serving.runtime.supervisor import start_supervisor, stop_supervisor
import tritonclient.http as http

def one(placement):
    run_dir = Path(tempfile.mkdtemp(prefix="lend-"))
    config = run_dir / "serving.toml"
    config.write_text(two_partition_config(free_ports(7), load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds, placement))
    repository = measured.render_test_repository(config, run_dir / "repository")
    layout = RunLayout(run_dir)
    manifest = start_supervisor(config, repository, layout, timeout_s=120)
    quiet = manifest.partitions["quiet"]
    try:
        os.sched_setaffinity(0, quiet.cpus)
        c = http.InferenceServerClient(quiet.http)
        t = http.InferInput("image", [1, 1, 8, 8], "FP32"); t.set_data_from_numpy(np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32))
        for _ in range(200): c.infer(QUIET_MODEL, [t])
        from partition_probe import cpu_seconds as group_cpu
        c0, w0 = group_cpu(quiet.pid), time.perf_counter()
        lat = []; end = time.perf_counter() + 20
        while time.perf_counter() < end:
            s = time.perf_counter(); c.infer(QUIET_MODEL, [t]); lat.append((time.perf_counter() - s) * 1000)
        cpus = read_supervisor_state(layout.supervisor_state).partitions["quiet"].cpus_now
        cpus = f"{cpus}; quiet server group {(group_cpu(quiet['pid']) - c0) / (time.perf_counter() - w0):.2f} cores"
        return f"{placement:9s} n {len(lat)} P50 {np.median(lat):.3f} P99 {np.percentile(lat, 99):.2f} quiet cpus at the end {cpus}"
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        stop_supervisor(layout)

for r in range(int(sys.argv[1])):
    for placement in ("elastic", "cpu_sets"):
        print(f"round {r} " + one(placement), flush=True)
