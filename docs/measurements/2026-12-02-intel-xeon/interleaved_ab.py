"""The throwaway interleaved A/B harness behind interleaved-ab.txt (kept as it was run).

Usage: python interleaved_ab.py PORT_A PORT_B CONCURRENCIES ROUNDS WINDOW_S [MODELS], with two `serving serve`
instances up (--run-dir apart); answers are accepted unchecked (the peer suite checks them).
Digit bodies are random 8x8 images: the speed, not the answers, is compared.
"""
import json, sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
import numpy as np
from perf_sweep.peers.codec import Workload, kserve_body, digit_bodies
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep import http_load
class Accept:
    def __init__(self, n): self.items = n
    def __call__(self, i, p): return None, 1.0
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
tb = tuple(kserve_body("TEXT", "BYTES", [1, 1], [t]) for t in texts)
rng = np.random.default_rng(0); db = digit_bodies(rng.random((200, 1, 8, 8)).astype(np.float32) * 16)
ports = {"A": int(sys.argv[1]), "B": int(sys.argv[2])}
levels = [(m, c) for m in (sys.argv[6].split(",") if len(sys.argv) > 6 else ("text", "digits")) for c in map(int, sys.argv[3].split(","))]
rounds, window = int(sys.argv[4]), float(sys.argv[5])
res = {}
for m, c in levels:
    for r in range(rounds):
        order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
        for v in order:
            path = "text_embedder" if m == "text" else "digit_classifier"
            bodies = tb if m == "text" else db
            w = Workload(v, ModelKind.TEXT if m == "text" else ModelKind.DIGITS, f"http://127.0.0.1:{ports[v]}/v2/models/{path}/infer", bodies, Accept(len(bodies)))
            run = http_load.run_level(w, LoadLevel(LoadMode.CLOSED, c, 1.0, window), 10.0)
            ok = [x for x in run.records if x.sent_s >= run.window_start_s and x.outcome.value == "ok"]
            bad = [x for x in run.records if x.outcome.value != "ok"]
            lat = sorted(x.done_s - x.sent_s for x in ok)
            res.setdefault((m, c, v), []).append((len(ok) / window, lat[len(lat)//2] * 1e3, len(bad)))
    for v in "AB":
        xs = res[(m, c, v)]
        print(f"{m} c={c} {v}: thr {[round(x[0]) for x in xs]} median {statistics.median(x[0] for x in xs):.0f}; p50 ms median {statistics.median(x[1] for x in xs):.2f}; errors {sum(x[2] for x in xs)}", flush=True)
