"""Per-thread CPU and run-queue wait over a c=N text window: which threads run, and who waits."""
import os, sys, time, json, threading
sys.path.insert(0, "/work/main/scripts")
from text_load import closed_loop_texts
port, c, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def snap():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try: cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
        except OSError: continue
        if not any(k in cmd for k in ("tritonserver", "python_backend_stub", "threads_at_load")): continue
        tag = "client" if "threads_at_load" in cmd else "tritonserver" if "bin/tritonserver" in cmd else cmd.split("model_repository/")[1].split("/")[0]
        try: tids = os.listdir(f"/proc/{pid}/task")
        except OSError: continue
        for tid in tids:
            try:
                comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                run_ns, wait_ns, slices = map(int, open(f"/proc/{pid}/task/{tid}/schedstat").read().split())
            except OSError: continue
            out[(int(pid), int(tid))] = (tag, comm, run_ns, wait_ns, slices)
    return out
res = {}
def sampler():
    time.sleep(2.0); res["a"] = (snap(), time.time()); time.sleep(window - 0.5); res["b"] = (snap(), time.time())
th = threading.Thread(target=sampler); th.start()
rate = closed_loop_texts(port, c, window)
th.join()
print(f"c={c}: {rate:.0f} texts/s")
(a, ta), (b, tb_) = res["a"], res["b"]; el = tb_ - ta
rows = []
for k, v in b.items():
    if k in a:
        run_ms = (v[2] - a[k][2]) / 1e6 / el  # ms of CPU per s
        wait_ms = (v[3] - a[k][3]) / 1e6 / el
        sl = (v[4] - a[k][4]) / el
        if run_ms > 5 or wait_ms > 5: rows.append((run_ms, wait_ms, sl, k, v[0], v[1]))
for run_ms, wait_ms, sl, k, tag, comm in sorted(rows, reverse=True):
    print(f"  run {run_ms/10:5.1f}%  runq-wait {wait_ms/10:5.1f}%  {sl:7.0f} slices/s  {tag:22s} {comm:16s} {k[1]}")
