"""Throwaway probe, kept as it was run: per-thread CPU (utime+stime) of the given pids over a
command (here a sequential c=1 run). Usage: python thread_cpu.py PID,PID,... COMMAND..."""
import os, subprocess, sys, time
pids = [int(p) for p in sys.argv[1].split(",")]
def snap():
    out = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                s = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = s[s.index("(") + 1:s.rindex(")")]; f = s[s.rindex(")") + 2:].split()
            out[(pid, int(tid), name)] = int(f[11]) + int(f[12])
    return out
a = snap(); t = time.time()
subprocess.run(sys.argv[2:], check=True)
b = snap(); el = time.time() - t
tick = os.sysconf("SC_CLK_TCK")
rows = sorted(((b[k] - a.get(k, 0)) / tick, k) for k in b)
print(f"elapsed {el:.1f} s")
for cpu, (pid, tid, name) in rows[::-1][:12]:
    print(f"  {cpu:6.2f} s  {100*cpu/el:5.1f}%  pid {pid} tid {tid} {name}")
