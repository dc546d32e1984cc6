"""Usage: GLIBC_TUNABLES=glibc.malloc.hugetlb=1 taskset -c 0 python thp_probe.py, and without the variable:
CPU per text of fresh c=16-like batches (fresh_batches.py) and the process's AnonHugePages."""
import sys, time
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/grouping")
from fresh_batches import session, stream, per_text
s = session("served")
per_text(s, stream(30, 99), 1)
for r in range(3):
    cpu, wall = per_text(s, stream(120, r), 1)
    print(f"cpu {cpu:.3f} ms/text wall {wall:.3f}", flush=True)
print([l.strip() for l in open("/proc/self/smaps_rollup") if l.startswith(("Rss", "AnonHuge"))])
