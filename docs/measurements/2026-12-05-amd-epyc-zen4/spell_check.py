"""In one go: does a 2-thread ONNX Runtime session beat a 1-thread one right now, and do both vCPUs
compute at full speed side by side? No server; run from the repository root with nothing else running:
    .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/spell_check.py [ROUNDS] [PAUSE_S]

The served text_embedder file, one 96-token input. Per round: the median of 25 runs on a 2-thread
(spinning) and a 1-thread session, then runs/s over 4 s of one 1-thread process alone and of two
1-thread processes pinned to CPU 0 and CPU 1 at the same time.
"""
import multiprocessing as mp
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

MODEL = "model_repository/text_embedder/1/model.onnx"


def session(threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if threads > 1 else "0")
    return ort.InferenceSession(MODEL, options, providers=["CPUExecutionProvider"])


def feeds_for(s: ort.InferenceSession) -> dict:
    ids = np.random.default_rng(0).integers(1000, 20000, size=(1, 96)).astype(np.int64)
    every = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return {i.name: every[i.name] for i in s.get_inputs()}


def median_ms(s: ort.InferenceSession, feeds: dict) -> float:
    s.run(None, feeds)
    times = []
    for _ in range(25):
        start = time.perf_counter()
        s.run(None, feeds)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def runs_per_s(cpu: int, start: float, out) -> None:
    os.sched_setaffinity(0, {cpu})
    s = session(1)
    feeds = feeds_for(s)
    s.run(None, feeds)
    while time.time() < start:
        time.sleep(0.001)
    n, end = 0, start + 4.0
    while time.time() < end:
        s.run(None, feeds)
        n += 1
    out.put((cpu, n / 4.0))


def side_by_side(cpus: tuple[int, ...]) -> list[float]:
    out = mp.Queue()
    start = time.time() + 2.0
    procs = [mp.Process(target=runs_per_s, args=(cpu, start, out)) for cpu in cpus]
    for p in procs:
        p.start()
    results = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    return [results[cpu] for cpu in cpus]


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    two, one = session(2), session(1)
    feeds = feeds_for(one)
    for _ in range(rounds):
        t2, t1 = median_ms(two, feeds), median_ms(one, feeds)
        (alone,) = side_by_side((0,))
        pair = side_by_side((0, 1))
        print(f"{time.strftime('%H:%M:%S')} session: 2 threads {t2:5.2f} ms, 1 thread {t1:5.2f} ms, x{t1 / t2:.2f} | "
              f"processes: alone {alone:5.1f} runs/s, side by side {pair[0]:5.1f} + {pair[1]:5.1f} = "
              f"x{sum(pair) / alone:.2f}", flush=True)
        time.sleep(pause)
