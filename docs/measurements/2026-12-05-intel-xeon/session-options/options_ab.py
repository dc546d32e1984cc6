"""Session-level ONNX Runtime options against the served ones (contracts.onnx_sessions), in-process,
held-out texts: a lone text on the wide session (2 threads, spinning within a call, as the pinned
wide session) and 4 texts on the 1-thread session (the c=16 executions). Each variant differs from
the served options in one setting; the timing loop is skip-layer-norm/in_process_ab.py's
(interleaved rounds). Only session options matter for the peer comparison: a graph change reaches
the peers too, who load the same ONNX file.
Usage: python options_ab.py MODEL.onnx [ROUNDS]"""
import sys
sys.path.insert(0, "/work/main/scripts")
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm")
import numpy as np
import onnxruntime as ort
from contracts.onnx_sessions import served_session_options, disabled_fusions
from in_process_ab import HELDOUT, feeds, interleaved_medians


def entry(key, value):
    return lambda o: o.add_session_config_entry(key, value)


def attr(name, value):
    return lambda o: setattr(o, name, value)


VARIANTS = {
    "served": (None, []),
    "denormal_as_zero": (entry("session.set_denormal_as_zero", "1"), []),
    "no_mem_pattern": (attr("enable_mem_pattern", False), []),
    "no_cpu_arena": (attr("enable_cpu_mem_arena", False), []),
    "level_extended": (attr("graph_optimization_level", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED), []),
    "dynamic_block_base_4": (entry("session.dynamic_block_base", "4"), []),
    "no_MatMulIntegerToFloatFusion": (None, ["MatMulIntegerToFloatFusion"]),
    "no_BiasGeluFusion": (None, ["BiasGeluFusion"]),
    "no_MatMulScaleFusion": (None, ["MatMulScaleFusion"]),
    "no_QDQSelectorActionTransformer": (None, ["QDQSelectorActionTransformer"]),
    "no_ConstantSharing": (None, ["ConstantSharing"]),
    "no_LayerNormFusion": (None, ["LayerNormFusion"]),
}


def session(path, threads, spin, variant):
    change, extra = VARIANTS[variant]
    options = served_session_options(threads, spin)
    if change:
        change(options)
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=disabled_fusions() + extra)


if __name__ == "__main__":
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    for label, threads, spin, f in [("lone text, 2 threads", 2, True, feeds(HELDOUT[:1])),
                                    ("4 texts, 1 thread", 1, False, feeds(HELDOUT[1:5]))]:
        sessions = {v: session(path, threads, spin, v) for v in VARIANTS}
        ref = sessions["served"].run(None, f)[0]
        diffs = {v: float(np.abs(s.run(None, f)[0] - ref).max()) for v, s in sessions.items()}
        t = interleaved_medians(sessions, f, rounds=rounds, warm=5, calls=40)
        print(f"# {label}, shape {f['input_ids'].shape}; median ms of {rounds} interleaved rounds x 40 calls")
        for v in VARIANTS:
            print(f"{v:34s} {t[v]:7.3f} ms  {t[v] / t['served']:.3f}x  max|diff| {diffs[v]:.1e}")
        sys.stdout.flush()
