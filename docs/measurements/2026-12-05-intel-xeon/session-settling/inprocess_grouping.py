"""Per-batch encoder time, in-process, 1-thread session: fixed buckets (served) vs one call padded to
the longest vs groups chosen by a cost model. Random batches of held-out texts, interleaved."""
import json, sys, time, statistics, random
sys.path.insert(0, "/work/main/scripts")
import numpy as np
from tokenizers import Tokenizer
from contracts.onnx_sessions import served_session
from contracts.sequence_buckets import assign_buckets
M = "/work/main/model_repository/text_embedder/1/model.onnx"
tok = Tokenizer.from_file("/work/main/model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"]
enc = [tok.encode(t) for t in texts]
s = served_session(M, 1)
names = [i.name for i in s.get_inputs()]
B = (16, 24, 32, 48, 64, 96, 128)
def run_group(rows):
    L = max(len(enc[r].ids) for r in rows)
    ids = np.zeros((len(rows), L), np.int64); m = np.zeros((len(rows), L), np.int64)
    for k, r in enumerate(rows):
        n = len(enc[r].ids); ids[k, :n] = enc[r].ids; m[k, :n] = 1
    f = {names[0]: ids, names[1]: m}
    if len(names) > 2: f[names[2]] = np.zeros_like(ids)
    s.run(None, f)
def fixed(rows):
    lens = [len(enc[r].ids) for r in rows]
    return [[rows[i] for i in g] for g in assign_buckets(lens, B)]
def longest(rows): return [list(rows)]
# calibrate cost model: t = a + b*rows*width
def t_of(rows_n, width, reps=30):
    ids = np.full((rows_n, width), 1000, np.int64); m = np.ones_like(ids)
    f = {names[0]: ids, names[1]: m}
    if len(names) > 2: f[names[2]] = np.zeros_like(ids)
    for _ in range(3): s.run(None, f)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
pts = [(n, w, t_of(n, w)) for n, w in [(1, 8), (1, 16), (1, 32), (1, 64), (2, 32), (4, 16), (4, 32), (4, 64), (8, 32)]]
X = np.array([[1, n * w] for n, w, _ in pts], float); y = np.array([t for *_, t in pts])
a, b = np.linalg.lstsq(X, y, rcond=None)[0]
print("points", [(n, w, round(t * 1e3, 3)) for n, w, t in pts]); print(f"fit a={a*1e3:.3f} ms b={b*1e6:.3f} us/token", flush=True)
def dp(rows):
    rows = sorted(rows, key=lambda r: len(enc[r].ids)); L = [len(enc[r].ids) for r in rows]; n = len(rows)
    best = [0.0] + [float("inf")] * n; cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + a + b * (j - i) * L[j - 1]
            if c < best[j]: best[j], cut[j] = c, i
    groups, j = [], n
    while j: groups.append(rows[cut[j]:j]); j = cut[j]
    return groups
random.seed(1)
for size in (2, 4, 8, 16):
    batches = [random.sample(range(len(enc)), size) for _ in range(60)]
    res = {"fixed buckets": [], "pad to longest": [], "cost model": []}; calls = {k: 0 for k in res}
    for rnd in range(3):
        for k, fn in (("fixed buckets", fixed), ("pad to longest", longest), ("cost model", dp)):
            tot = 0.0
            for bt in batches:
                gs = fn(bt); calls[k] += len(gs)
                t0 = time.perf_counter()
                for g in gs: run_group(g)
                tot += time.perf_counter() - t0
            res[k].append(tot / len(batches))
    print(f"batch {size}: " + ", ".join(f"{k} {1e3*statistics.median(v):.3f} ms ({calls[k]/180:.2f} calls)" for k, v in res.items()), flush=True)
