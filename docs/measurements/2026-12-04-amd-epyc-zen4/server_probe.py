"""The throwaway in-server probe behind session-choice-ab.txt (kept as it was run).

Usage: python server_probe.py HTTP_PORT METRICS_PORT CONCURRENCY WINDOW_S [paragraphs], with a `serving serve` up:
a closed loop of held-out texts at text_embedder, then Triton's counters and the backend's metrics
differenced around it (throughput, ONNX Runtime and rest-of-execute ms per execution, calls per session).
"""
import json, sys, time, re, urllib.request
sys.path.insert(0, "/work/main/scripts")
from perf_sweep.peers.codec import Workload, kserve_body
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep import http_load
port, mport, conc, window = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
class Accept:
    def __init__(self, n): self.items = n
    def __call__(self, i, p): return None, 1.0
if len(sys.argv) > 5 and sys.argv[5] == "paragraphs":  # added 2026-12-05: the first 600 of `--texts paragraphs`
    from pathlib import Path
    from perf_sweep.peers.references import _texts_of
    texts = _texts_of("paragraphs", Path("/work/main/artifacts"), 0, None, 128)[0][:600]
else:
    texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
tb = tuple(kserve_body("TEXT", "BYTES", [1, 1], [t]) for t in texts)
def scrape():
    out = {}
    for line in urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode().splitlines():
        if 'model="text_embedder"' in line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1); out[k] = float(v)
    return out
a = scrape()
w = Workload("A", ModelKind.TEXT, f"http://127.0.0.1:{port}/v2/models/text_embedder/infer", tb, Accept(len(tb)))
run = http_load.run_level(w, LoadLevel(LoadMode.CLOSED, conc, 1.0, window), 10.0)
b = scrape()
ok = [x for x in run.records if x.sent_s >= run.window_start_s and x.outcome.value == "ok"]
lat = sorted(x.done_s - x.sent_s for x in ok)
print(f"thr {len(ok)/window:.1f}/s p50 {lat[len(lat)//2]*1e3:.2f} ms")
d = {k: b[k] - a.get(k, 0) for k in b}
def g(pat): return sum(v for k, v in d.items() if re.search(pat, k))
ex = g(r"serving_batch_framework_seconds_count")
print("executions", ex, "ORT ms/exec", round(g(r"serving_batch_framework_seconds_sum")/ex*1e3, 3), "rest ms/exec", round(g(r"serving_batch_overhead_seconds_sum")/ex*1e3, 3))
print("calls", {k.split("{")[1]: v for k, v in d.items() if "framework_calls_total" in k and v})
n = g(r"nv_inference_request_success")
print("compute_infer ms/req", round(g(r"nv_inference_compute_infer_duration_us")/n/1e3, 3), "queue", round(g(r"nv_inference_queue_duration_us")/n/1e3, 3), "request ms", round(g(r"nv_inference_request_duration_us")/n/1e3,3))
