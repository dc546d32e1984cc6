"""The fresh-batch loop (fresh_batches.py), N passes of 100 batches, pinned by the caller (taskset -c 0):
run with the server idle, beside a c=16 load (server_probe.py ... c=16 25 in the background), and with
the server stopped, within one minute. Usage: python loop_beside.py N"""
import sys, time
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/grouping")
from fresh_batches import session, stream, per_text
s = session("served")
per_text(s, stream(30, 99), 1)
for r in range(int(sys.argv[1])):
    cpu, wall = per_text(s, stream(100, r), 1)
    print(f"{time.strftime('%H:%M:%S')} cpu {cpu:.3f} ms/text wall {wall:.3f}", flush=True)
