"""Closed-loop text load at c=N on PORT; per-process CPU over the window; stub batch metrics."""
import json, os, sys, time, re, urllib.request
sys.path.insert(0, "/work/main/scripts")
from text_load import closed_loop_texts
import threading
port, metrics_port, c, window = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
model = sys.argv[5] if len(sys.argv) > 5 else "text_embedder"
def procs():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
            st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError: continue
        out[int(pid)] = (cmd[:120], int(st[11]) + int(st[12]))
    return out
def metrics():
    txt = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    keep = {}
    for line in txt.splitlines():
        if line.startswith("#") or model not in line: continue
        name, val = line.rsplit(" ", 1)
        keep[name] = float(val)
    return keep
m0 = None; p0 = None; t0 = None
def snap():
    global m0, p0, t0
    time.sleep(2.0)
    m0, p0, t0 = metrics(), procs(), time.time()
th = threading.Thread(target=snap); th.start()
rate = closed_loop_texts(port, c, window, model)
p1, t1, m1 = procs(), time.time(), metrics()
th.join()
print(f"c={c}: {rate:.0f} texts/s")
el = t1 - t0
rows = []
for pid, (cmd, ticks) in p1.items():
    if pid in p0:
        d = (ticks - p0[pid][1]) / 100 / el
        if d > 0.01: rows.append((d, pid, cmd))
for d, pid, cmd in sorted(rows, reverse=True):
    short = re.sub(r"/work/main/", "", cmd)
    print(f"  {d*100:5.1f}%  {pid} {short[:100]}")
for k in sorted(m1):
    dv = m1[k] - m0.get(k, 0)
    if dv and ("sum" in k or "count" in k or "total" in k or "success" in k or "_us" in k):
        print(f"  {k} +{dv:.4g}")
