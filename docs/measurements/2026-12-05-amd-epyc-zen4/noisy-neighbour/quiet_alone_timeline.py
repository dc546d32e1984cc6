"""Sequential probes on `quiet` for 2 s after 3 s idle, PHASES times, `noisy` idle: latency by time since the start (does spanning both cores slow a lone partition?). Usage: .venv/bin/python THIS PHASES"""
import json, os, sys, time, tempfile, statistics
from pathlib import Path
ROOT = Path("/work/main")
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests/integration"), str(ROOT / "scripts")]
import numpy as np
import partition_probe
from conftest import free_ports, SERVING_CONFIG
from test_partitions import render_test_repository
from contracts.layout import RunLayout
from contracts.serving_spec import load_serving_spec
from serving.runtime.supervisor import start_supervisor, stop_supervisor
import tritonclient.http as http

run_dir = Path(tempfile.mkdtemp(prefix="widen-"))
ports = free_ports(7)
config = run_dir / "serving.toml"
config.write_text(partition_probe.two_partition_config(ports, load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds, None))
repository = render_test_repository(config, run_dir / "repository")
layout = RunLayout(run_dir)
manifest = start_supervisor(config, repository, layout, timeout_s=120)
def allowed(pid):
    return sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir(f"/proc/{pid}/task")})
try:
    quiet = manifest.partitions["quiet"]
    os.sched_setaffinity(0, quiet.cpus)
    image = np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32)
    client = http.InferenceServerClient(quiet.http)
    tensor = http.InferInput("image", list(image.shape), "FP32"); tensor.set_data_from_numpy(image)
    for phase in range(int(sys.argv[1])):
        time.sleep(3.0)  # idle: the supervisor narrows quiet back to its home core
        t0 = time.perf_counter(); lat = []
        while time.perf_counter() - t0 < 2.0:
            t = time.perf_counter(); client.infer(partition_probe.QUIET_MODEL, [tensor]); lat.append((t - t0, (time.perf_counter() - t) * 1000))
        for a, b in ((0, 0.1), (0.1, 0.3), (0.3, 0.6), (0.6, 1.0), (1.0, 2.0)):
            xs = [l for s, l in lat if a <= s < b]
            print(f"phase {phase} {a:.1f}-{b:.1f} s: {len(xs)} probes, median {statistics.median(xs):.2f} ms, p99 {np.percentile(xs, 99):.2f}", flush=True)
        print("   quiet server threads' cpus:", allowed(quiet.pid), flush=True)
finally:
    stop_supervisor(layout)
