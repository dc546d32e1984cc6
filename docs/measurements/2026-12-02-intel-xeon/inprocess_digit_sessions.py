"""Throwaway probe, kept as it was run; its output is in README.txt beside it."""
import sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
import numpy as np, onnxruntime as ort
from contracts.onnx_sessions import served_session_options
M = "/work/main/model_repository/digit_classifier/1/model.onnx"
def mk(kind):
    o = ort.SessionOptions(); o.inter_op_num_threads = 1; o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.intra_op_num_threads = 1 if kind == "narrow" else 2
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if kind == "spin" else "0")
    if kind == "spin": o.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
S = {k: mk(k) for k in ("wide", "spin", "narrow")}
x = np.random.default_rng(0).random((1, 1, 8, 8)).astype(np.float32)
gap = float(sys.argv[1])
res = {k: [] for k in S}
for r in range(5):
    for k, s in S.items():
        for _ in range(300):
            time.sleep(gap); t0 = time.perf_counter(); s.run(None, {"image": x}); res[k].append(time.perf_counter() - t0)
for k, v in res.items(): print(f"digits {k:7s} gap {gap*1e3:.0f} ms: median {1e6*statistics.median(v):.0f} us mean {1e6*statistics.mean(v):.0f} us")
