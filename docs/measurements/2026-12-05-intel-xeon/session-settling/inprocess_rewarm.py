"""Throwaway probe, kept as it was run; output in README.txt beside it. In-process, lone held-out texts
2.5 ms apart: after 40 calls on one session, 12 calls on the other; each of those 12 calls' time by its
position after the switch (median over 12 switches each way). N = 1 thread, W = 2 threads spinning within
a run (unpinned here). How many calls does a session need after a switch before it runs at its warm speed?"""
import sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
from contracts.onnx_sessions import served_session
from lone_texts import MODEL as M, HELDOUT, lone_feeds
N, W = served_session(M, 1), served_session(M, 2, spin_within_run=True)
F = lone_feeds(N, HELDOUT[:400])
k = 0
def call(s):
    global k
    time.sleep(0.0025); f = F[k % len(F)]; k += 1
    t0 = time.perf_counter(); s.run(None, f); return time.perf_counter() - t0
for name, a, b in (("N -> W", N, W), ("W -> N", W, N)):
    by_pos = [[] for _ in range(12)]; steady = []
    for rep in range(12):
        for _ in range(40): steady.append(call(a))
        for i in range(12): by_pos[i].append(call(b))
    print(f"{name}: the first session steady {1e3*statistics.median(steady[20:]):.3f} ms; the other, call 1..12 after the switch: "
          + " ".join(f"{1e3*statistics.median(x):.2f}" for x in by_pos), flush=True)
