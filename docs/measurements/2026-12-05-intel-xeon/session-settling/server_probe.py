"""Throwaway in-server probe (kept as run; output in README.txt). Usage:
    python server_probe.py HTTP_PORT METRICS_PORT LEVEL WINDOW_S
LEVEL `c=N` (closed loop) or `p=R` (Poisson, R requests/s), with a `serving serve` up: held-out texts at
text_embedder through the perf suite's load generator, and the level as the server saw it
(perf_sweep.peers.inside_server over two scrapes of its metrics)."""
import sys, time
import numpy as np
sys.path.insert(0, "/work/main/scripts")
from perf_sweep import http_load
from perf_sweep.peers.codec import Api, AnswerCheck, Workload, text_bodies
from perf_sweep.peers.inside_server import BACKEND_FLUSH_S, inside_server
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep.runner import scrape_metrics
from contracts.onnx_sessions import served_session
from lone_texts import MODEL, HELDOUT, lone_feeds

port, metrics_port, level, window = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
mode = LoadMode.CLOSED if level.startswith("c=") else LoadMode.POISSON
metrics = f"http://127.0.0.1:{metrics_port}/metrics"
texts = HELDOUT[:300]
reference_session = served_session(MODEL, 1)  # every answer is checked against the served file in-process
reference = np.concatenate([reference_session.run(None, f)[0] for f in lone_feeds(reference_session, texts)])
check = AnswerCheck(ModelKind.TEXT, Api.KSERVE_V2, "embedding", reference.shape[1], reference=reference)
workload = Workload("probe", ModelKind.TEXT, f"http://127.0.0.1:{port}/v2/models/text_embedder/infer",
                    text_bodies(texts, Api.KSERVE_V2), check)
before = scrape_metrics(metrics)
run = http_load.run_level(workload, LoadLevel(mode, float(level[2:]), 1.0, window), 10.0)
time.sleep(BACKEND_FLUSH_S)
seen = inside_server(before, scrape_metrics(metrics), "text_embedder")
mine = [r for r in run.records if r.scheduled_s >= run.window_start_s]
lat = sorted(r.latency_ms for r in mine if r.outcome.value == "ok")
print(f"{level}: {len(lat) / window:.1f}/s p50 {lat[len(lat) // 2]:.2f} p99 {lat[int(len(lat) * 0.99)]:.2f} ms "
      f"errors {len(mine) - len(lat)} | ORT ms/exec {seen.framework_ms_per_execution:.3f} "
      f"rest {seen.rest_of_execute_ms_per_execution:.3f} req/exec {seen.requests_per_execution:.2f} "
      f"wide {seen.wide_session_share:.0%} narrow: sibling busy {seen.sibling_busy_share:.0%} "
      f"cores busy {seen.cores_busy_share:.0%} settling {seen.settling_share:.0%}")
