"""Throwaway analysis (kept as run; output in README.txt) of early-life-trace.txt: every framework call of
text_embedder's first instance in a fresh `serving serve`, traced by a throwaway line in
SessionChoice.record (not committed; `explore_calls` set to 10**9 so the sessions alternate in 16-call
stints for the whole run), with early_life_probe.py driving c=1 for 30 s.
Columns: unix time, elements fed, session (0 wide, 1 narrow), ms, alone, calls in a row on the session.
Prints each call's time over its size class's warm median (calls 5+ of a stint, after the first 10 s), per
stint, for the first 25 stints; then per time span the median of that ratio for each session."""
import os
import numpy as np
rows = [line.split() for line in open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "early-life-trace.txt"))]
t = np.array([float(r[0]) for r in rows]); t -= t[0]
size = np.array([int(r[1]) for r in rows]); ses = np.array([int(r[2]) for r in rows])
ms = np.array([float(r[3]) for r in rows]); alone = np.array([int(r[4]) for r in rows]); inrow = np.array([int(r[5]) for r in rows])
cls = np.floor(np.log2(np.maximum(size, 1))).astype(int)
ref = {c: np.median(ms[(cls == c) & (inrow > 4) & (t > 10)]) for c in set(cls)}
norm = np.array([m / ref[c] for m, c in zip(ms, cls)])
start, stints = 0, 0
for i in range(1, len(rows) + 1):
    if i == len(rows) or ses[i] != ses[start]:
        if stints < 25:
            print(f"t {t[start]:6.2f} s {'wide  ' if ses[start] == 0 else 'narrow'} {i - start:3d} calls: "
                  + " ".join(f"{x:.2f}" for x in norm[start:i][:16]))
        start, stints = i, stints + 1
warm = (inrow > 4) & (alone == 1)
for a, b in zip([4, 6, 8, 10, 15, 20, 25], [6, 8, 10, 15, 20, 25, 32]):
    sel = warm & (t >= a) & (t < b)
    w, n = norm[sel & (ses == 0)], norm[sel & (ses == 1)]
    print(f"{a:>3}-{b:<3} s: wide {np.median(w):.2f} ({len(w)} calls), narrow {np.median(n):.2f} ({len(n)}), wide/narrow {np.median(w) / np.median(n):.2f}")
