"""Throwaway probe, kept as it was run; output in README.txt beside it."""
import sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
import numpy as np
from contracts.onnx_sessions import served_session
M = "/work/main/model_repository/text_embedder/1/model.onnx"
s = served_session(M, 1); names = [i.name for i in s.get_inputs()]
def f_of(n, w):
    ids = np.random.randint(1000, 20000, (n, w)).astype(np.int64); m = np.ones_like(ids)
    f = {names[0]: ids, names[1]: m}
    if len(names) > 2: f[names[2]] = np.zeros_like(ids)
    return f
for w in (24, 48):
    for rnd in range(2):
        out = []
        for n in (1, 2, 4, 8, 16, 32):
            f = f_of(n, w)
            for _ in range(3): s.run(None, f)
            ts = []
            for _ in range(max(6, 60 // n)):
                t0 = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - t0)
            out.append(f"{n}x{w}: {1e3*statistics.median(ts)/n:.3f}")
        print("per row ms:", ", ".join(out), flush=True)
