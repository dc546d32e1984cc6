"""In-process, one thread calling, 2.5 ms gaps, lone held-out texts: the cost of switching between an
instance's two sessions. Sessions: N = 1 thread, W = 2 threads spinning within a run (as served)."""
import sys, time, statistics, random
sys.path.insert(0, "/work/main/scripts")
from contracts.onnx_sessions import served_session
from lone_texts import MODEL as M, HELDOUT, lone_feeds
N, W = served_session(M, 1), served_session(M, 2, spin_within_run=True)
N2 = served_session(M, 1)
F = lone_feeds(N, HELDOUT[:240])
random.seed(0)
mix = [W if random.random() < 0.3 else N for _ in F]
patterns = {"N only": [N] * len(F), "W only": [W] * len(F), "N/W mixed (30% W, random)": mix,
            "N, N2 alternating": [N, N2] * (len(F) // 2)}
res = {k: [] for k in patterns}; byk = {k: {"N": [], "W": []} for k in patterns}
for rnd in range(5):
    order = list(patterns); random.shuffle(order)
    for k in order:
        lat = []
        for s, f in zip(patterns[k], F):
            time.sleep(0.0025)
            t0 = time.perf_counter(); s.run(None, f); d = time.perf_counter() - t0; lat.append(d)
            byk[k]["W" if s is W else "N"].append(d)
        res[k].append(statistics.mean(lat))
for k, v in res.items():
    print(f"{k}: mean per call {1e3*statistics.median(v):.3f} ms (round means {[round(1e3*x,2) for x in v]}); medians N {1e3*statistics.median(byk[k]['N']) if byk[k]['N'] else float('nan'):.3f} W {1e3*statistics.median(byk[k]['W']) if byk[k]['W'] else float('nan'):.3f}")
