"""Per-probe timeline of the noisy-neighbour measurement: when are the slow probes? Usage (repository root): .venv/bin/python THIS RUNS BLOCKS BLOCK; writes /tmp/m/tail/run*.json (kind, start, ms per probe)."""
import json, os, sys, time, tempfile
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

stamps = []  # (kind, t_start, latency_ms)
KIND = ["?"]
orig = partition_probe.probe_latencies_ms
def probe(url, model, image, count):
    import tritonclient.http as http
    client = http.InferenceServerClient(url)
    tensor = http.InferInput("image", list(image.shape), "FP32"); tensor.set_data_from_numpy(image)
    out = []
    for _ in range(count):
        t = time.perf_counter(); client.infer(model, [tensor]); l = (time.perf_counter() - t) * 1000
        out.append(l); stamps.append((KIND[0], t, l))
    client.close(); return out
partition_probe.probe_latencies_ms = probe
# label blocks: measure_noisy_neighbour alternates isolated, loaded per block; count calls
calls = [0]
def labelled(url, model, image, count):
    i = calls[0]; calls[0] += 1
    KIND[0] = "warmup" if i == 0 else ("isolated" if i % 2 == 1 else "loaded")
    return probe(url, model, image, count)
partition_probe.probe_latencies_ms = labelled

run_dir = Path(tempfile.mkdtemp(prefix="tail-"))
ports = free_ports(7)
config = run_dir / "serving.toml"
delay = load_serving_spec(SERVING_CONFIG).batching.max_queue_delay_microseconds
config.write_text(partition_probe.two_partition_config(ports, delay, None))
repository = render_test_repository(config, run_dir / "repository")
layout = RunLayout(run_dir)
manifest = start_supervisor(config, repository, layout, timeout_s=120)
try:
    quiet, noisy = manifest.partitions["quiet"], manifest.partitions["noisy"]
    for run in range(int(sys.argv[1])):
        stamps.clear(); calls[0] = 0
        r = partition_probe.measure_noisy_neighbour(quiet, noisy, probe_cpus=quiet.cpus, noise_cpus=noisy.cpus, blocks=int(sys.argv[2]), block=int(sys.argv[3]), warmup=30)
        ratio = np.percentile(r.loaded_ms, 99) / np.percentile(r.isolated_ms, 99)
        print(f"run {run}: P99 isolated {np.percentile(r.isolated_ms, 99):.2f} loaded {np.percentile(r.loaded_ms, 99):.2f} x{ratio:.2f}", flush=True)
        json.dump(stamps, open(f"/tmp/m/tail/run{sys.argv[2]}x{sys.argv[3]}-{run}.json", "w"))
finally:
    stop_supervisor(layout)
