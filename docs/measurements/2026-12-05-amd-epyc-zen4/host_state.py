# The host check run before each 10-s server window (kept as run; from the repository root). Prints the
# 2-thread and 1-thread medians of spell_check.py and their ratio.
import sys; sys.path.insert(0, "docs/measurements/2026-12-05-amd-epyc-zen4")
from spell_check import session, feeds_for, median_ms
two, one = session(2), session(1); f = feeds_for(one)
a, b = median_ms(two, f), median_ms(one, f); print(f"host: 2thr {a:.2f} 1thr {b:.2f} x{b/a:.2f}")
