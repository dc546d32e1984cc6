"""Does sharing a core with a cache-hungry process raise ONNX Runtime's CPU per text? A 1-thread loop of
ever-new c=16-like batches pinned to core 0 (fresh_batches.stream), alone and beside a second process on
core 0 that, in 0.5-ms bursts at a 30% duty cycle, either spins on a few variables (`spin`) or walks a
buffer of BYTES (`walk`: streams it through the caches, the way another process's work evicts ours).
Thread CPU per text and involuntary context switches of the loop's thread.
Usage: python polluter.py BATCHES"""
import os, sys, time, multiprocessing as mp
sys.path.insert(0, os.path.dirname(__file__))
import numpy as np


def polluter(kind, size, stop):
    os.sched_setaffinity(0, {0})
    buf = np.ones(size // 8)
    while not stop.is_set():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0005:
            if kind == "walk":
                buf += 1.0
        time.sleep(0.0005 * 7 / 3)


def invol():
    with open("/proc/thread-self/status") as f:
        return int([l for l in f if l.startswith("nonvoluntary")][0].split()[1])


if __name__ == "__main__":
    from fresh_batches import session, stream, per_text
    n = int(sys.argv[1])
    os.sched_setaffinity(0, {0})
    s = session("served")
    per_text(s, stream(30, 99), 1)
    for kind, size in [("alone", 0), ("spin", 0), ("walk", 4 << 20), ("walk", 32 << 20), ("alone", 0)]:
        stop = mp.Event()
        p = None if kind == "alone" else mp.Process(target=polluter, args=(kind, size, stop))
        if p: p.start(); time.sleep(0.3)
        before = invol()
        cpu, wall = per_text(s, stream(n, 7), 1)
        print(f"{kind:5s} {size >> 20:3d} MiB: cpu {cpu:.3f} ms/text, wall {wall:.3f} ms/text, "
              f"{invol() - before} involuntary switches", flush=True)
        stop.set()
        if p: p.join()
