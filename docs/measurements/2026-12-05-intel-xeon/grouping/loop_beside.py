"""The fresh-batch loop (fresh_batches.py), N passes of 100 batches (plus 30 untimed), pinned by the caller
(taskset -c 0), then the process's Rss and AnonHugePages.
loop-beside-c16.txt: run with the server idle, beside a c=16 load (server_probe.py ... c=16 25 in the
background), and with the server stopped, within one minute: `python loop_beside.py 3` / `4`.
The huge-pages probe (README "thp"): `GLIBC_TUNABLES=glibc.malloc.hugetlb=1 taskset -c 0 python loop_beside.py 3`
and without the variable (it first ran as thp_probe.py, passes of 120 batches, merged into this script).
Usage: python loop_beside.py N"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh_batches import session, stream, per_text
s = session("served")
per_text(s, stream(30, 99), 1)
for r in range(int(sys.argv[1])):
    cpu, wall = per_text(s, stream(100, r), 1)
    print(f"{time.strftime('%H:%M:%S')} cpu {cpu:.3f} ms/text wall {wall:.3f}", flush=True)
print([l.strip() for l in open("/proc/self/smaps_rollup") if l.startswith(("Rss", "AnonHuge"))])
