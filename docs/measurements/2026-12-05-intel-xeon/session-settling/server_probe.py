"""Throwaway in-server probe (kept as run; output in README.txt). Usage:
    python server_probe.py HTTP_PORT METRICS_PORT LEVEL WINDOW_S [MODEL]
LEVEL `c=N` (closed loop) or `p=R` (Poisson, R requests/s), with a `serving serve` up: held-out texts at
text_embedder (MODEL `text`, the default) or test-split images at digit_classifier (`digits`, added in
stop 41 with the last column) through the perf suite's load generator, and the level as the server saw
it (perf_sweep.peers.inside_server over two scrapes of its metrics). The line's last column, `outside`,
is Triton's compute_infer per request minus the backend's ONNX Runtime and rest of execute per
execution (exact at one request per execution): the stub's round trip and what `execute` does after
its own timer."""
import sys, time
import numpy as np
sys.path.insert(0, "/work/main/scripts")
from perf_sweep import http_load
from perf_sweep.peers.codec import Api, AnswerCheck, Workload, digit_bodies, text_bodies
from perf_sweep.peers.inside_server import BACKEND_FLUSH_S, inside_server
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep.runner import scrape_metrics
from contracts.onnx_sessions import served_session
from lone_texts import MODEL, HELDOUT, lone_feeds

port, metrics_port, level, window = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
digits = sys.argv[5:6] == ["digits"]
mode = LoadMode.CLOSED if level.startswith("c=") else LoadMode.POISSON
metrics = f"http://127.0.0.1:{metrics_port}/metrics"
if digits:
    served_model, images = "digit_classifier", np.load("/work/main/artifacts/digit_classifier/test_split.npz")["images"]
    digits_session = served_session("/work/main/model_repository/digit_classifier/1/model.onnx", 1)
    expected = tuple(int(i) for i in np.argmax(digits_session.run(None, {"image": images.astype(np.float32)})[0], axis=1))
    check = AnswerCheck(ModelKind.DIGITS, Api.KSERVE_V2, "probabilities", 10, expected_argmax=expected)
    workload = Workload("probe", ModelKind.DIGITS, f"http://127.0.0.1:{port}/v2/models/{served_model}/infer",
                        digit_bodies(images.astype(np.float32)), check)
else:
    served_model, texts = "text_embedder", HELDOUT[:300]
    reference_session = served_session(MODEL, 1)  # every answer is checked against the served file in-process
    reference = np.concatenate([reference_session.run(None, f)[0] for f in lone_feeds(reference_session, texts)])
    check = AnswerCheck(ModelKind.TEXT, Api.KSERVE_V2, "embedding", reference.shape[1], reference=reference)
    workload = Workload("probe", ModelKind.TEXT, f"http://127.0.0.1:{port}/v2/models/{served_model}/infer",
                        text_bodies(texts, Api.KSERVE_V2), check)
before = scrape_metrics(metrics)
run = http_load.run_level(workload, LoadLevel(mode, float(level[2:]), 1.0, window), 10.0)
time.sleep(BACKEND_FLUSH_S)
seen = inside_server(before, scrape_metrics(metrics), served_model)
mine = [r for r in run.records if r.scheduled_s >= run.window_start_s]
lat = sorted(r.latency_ms for r in mine if r.outcome.value == "ok")
print(f"{level}: {len(lat) / window:.1f}/s p50 {lat[len(lat) // 2]:.2f} p99 {lat[int(len(lat) * 0.99)]:.2f} ms "
      f"errors {len(mine) - len(lat)} | ORT ms/exec {seen.framework_ms_per_execution:.3f} "
      f"rest {seen.rest_of_execute_ms_per_execution:.3f} req/exec {seen.requests_per_execution:.2f} "
      f"wide {seen.wide_session_share:.0%} narrow: sibling busy {seen.sibling_busy_share:.0%} "
      f"cores busy {seen.cores_busy_share:.0%} settling {seen.settling_share:.0%} | outside "
      f"{seen.compute_infer_ms_per_request - seen.framework_ms_per_execution - seen.rest_of_execute_ms_per_execution:.3f} ms")
