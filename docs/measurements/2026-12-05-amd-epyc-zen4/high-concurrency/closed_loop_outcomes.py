import json, sys, collections
sys.path.insert(0, "/work/main/scripts")
from perf_sweep.peers.codec import kserve_body, Workload
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep import http_load
conc = int(sys.argv[1])
class Accept:
    def __init__(self, n): self.items = n
    def __call__(self, i, p): return None, 1.0
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
tb = tuple(kserve_body("TEXT", "BYTES", [1, 1], [t]) for t in texts)
w = Workload("A", ModelKind.TEXT, "http://127.0.0.1:8000/v2/models/text_embedder/infer", tb, Accept(len(tb)))
run = http_load.run_level(w, LoadLevel(LoadMode.CLOSED, conc, 1.0, 10.0), 10.0)
print(conc, collections.Counter(r.outcome.value for r in run.records), "max latency %.2f s" % max(r.done_s - r.sent_s for r in run.records))
firsts = [r for r in run.records if r.outcome.value != "ok"][:1]
print(firsts)
