"""Lone-text call time, in-process, 1-thread sessions, 2.5 ms between calls: does spreading calls over
several sessions (each with its own weights) cost, and does disabling prepacking + sharing initializers help?"""
import sys, time, statistics, random
sys.path.insert(0, "/work/main/scripts")
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
from contracts.onnx_sessions import served_session_options, disabled_fusions
from lone_texts import MODEL as M, HELDOUT, lone_feeds
dis = disabled_fusions()
def mk(noprepack=False, shared=None):
    o = served_session_options(1)
    if noprepack: o.add_session_config_entry("session.disable_prepacking", "1")
    if shared:
        for n, v in shared.items(): o.add_initializer(n, v)
    return ort.InferenceSession(M, o, providers=["CPUExecutionProvider"], disabled_optimizers=dis)
model = onnx.load(M)
arrays = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
shared = {n: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a)) for n, a in arrays.items()}
print("initializer MB", sum(a.nbytes for a in arrays.values())/1e6, flush=True)
s = [mk() for _ in range(4)]
npk = [mk(True, shared) for _ in range(2)]
F = lone_feeds(s[0], HELDOUT[:200])
patterns = {"one session": [s[0]], "2 sessions alternating": s[:2], "4 sessions in turn": s,
            "one, no prepack": [npk[0]], "2 no-prepack, shared weights": npk}
res = {k: [] for k in patterns}
for rnd in range(5):
    order = list(patterns); random.shuffle(order)
    for k in order:
        ss = patterns[k]; lat = []
        for i, f in enumerate(F):
            time.sleep(0.0025); x = ss[i % len(ss)]
            t0 = time.perf_counter(); x.run(None, f); lat.append(time.perf_counter() - t0)
        res[k].append(statistics.median(lat))
for k, v in res.items():
    print(f"{k}: median of round medians {1e3*statistics.median(v):.3f} ms  rounds {[round(1e3*x,2) for x in v]}")
