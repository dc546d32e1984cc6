"""Throwaway in-process probe (kept as run; output in README.txt): on a fresh served session, is the first
call of each input shape slower than later calls of the same shape? Lone held-out texts (each its own
length), 2 passes over 300 texts, 2.5 ms apart, fresh sessions: wide (2 threads, spinning within a run as
served) and narrow (1 thread); with ONNX Runtime's memory patterns on (served) and off."""
import sys, time
import numpy as np
from lone_texts import MODEL, HELDOUT, lone_feeds
sys.path.insert(0, "/work/main/scripts")
from contracts.onnx_sessions import served_session_options, disabled_fusions
import onnxruntime as ort


def session(threads, spin, mem_pattern):
    options = served_session_options(threads, spin)
    options.enable_mem_pattern = mem_pattern
    return ort.InferenceSession(MODEL, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=disabled_fusions())


for mem_pattern in (True, False):
    for name, threads, spin in (("wide", 2, True), ("narrow", 1, False)):
        s = session(threads, spin, mem_pattern)
        feeds = lone_feeds(s, HELDOUT[:300])
        by_shape, order = {}, []
        for f in feeds + feeds:
            shape = next(iter(f.values())).shape
            t = time.perf_counter(); s.run(None, f); took = (time.perf_counter() - t) * 1e3
            by_shape.setdefault(shape, []).append(took)
            order.append(took)
            time.sleep(0.0025)
        # per shape: its first call against the median of its later calls (paired, so lengths do not confound)
        ratios = [times[0] / np.median(times[1:]) for times in by_shape.values() if len(times) >= 3]
        later_first = [times[0] / np.median(times[1:]) for i, times in enumerate(by_shape.values()) if len(times) >= 3 and i >= 10]
        print(f"mem_pattern={mem_pattern} {name}: {len(by_shape)} shapes; first call / its shape's later median: "
              f"median {np.median(ratios):.2f}x, P90 {np.percentile(ratios, 90):.2f}x over {len(ratios)} shapes "
              f"(shapes after the 10th first seen: median {np.median(later_first):.2f}x); calls 1-8 of the session "
              f"{[round(x, 1) for x in order[:8]]} ms; all later calls median {np.median(order[300:]):.2f} ms", flush=True)
