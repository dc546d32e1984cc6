"""The closed-loop text load of cpu_at_load.py and threads_at_load.py: the first 300 held-out
texts, one per request, answers accepted unchecked (the peer suite checks them)."""
import json, sys
sys.path.insert(0, "/work/main/scripts")
from perf_sweep.peers.codec import Workload, kserve_body
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep import http_load


class Accept:
    def __init__(self, n): self.items = n
    def __call__(self, i, p): return None, 1.0


def closed_loop_texts(port, concurrency, window_s, model="text_embedder"):
    """2 s of warm-up, then `window_s` seconds at `concurrency`; texts/s answered in the window."""
    texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
    bodies = tuple(kserve_body("TEXT", "BYTES", [1, 1], [t]) for t in texts)
    workload = Workload("x", ModelKind.TEXT, f"http://127.0.0.1:{port}/v2/models/{model}/infer", bodies, Accept(len(bodies)))
    run = http_load.run_level(workload, LoadLevel(LoadMode.CLOSED, concurrency, 2.0, window_s), 10.0)
    ok = [x for x in run.records if x.sent_s >= run.window_start_s and x.outcome.value == "ok"]
    return len(ok) / window_s
