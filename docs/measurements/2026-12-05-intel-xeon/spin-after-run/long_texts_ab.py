"""A lone text of 22-128 tokens, in-process, interleaved rounds: the served wide session (2 threads, spinning
within a call, SkipLayerNormFusion left out), ONNX Runtime's defaults at 2 threads (what the minimal server
runs), and the served options with the fusion. Usage: python long_texts_ab.py"""
import sys
sys.path.insert(0, "/work/main/scripts")
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm")
import numpy as np, onnxruntime as ort
from in_process_ab import HELDOUT, interleaved_medians, tok
from contracts.onnx_sessions import served_session
M = "/work/main/model_repository/text_embedder/1/model.onnx"
def feeds_len(n):
    ids = tok.encode(" ".join(HELDOUT[:40])).ids[:n]
    a = np.array([ids], np.int64); return {"input_ids": a, "attention_mask": np.ones_like(a)}
ours = served_session(M, 2, spin_within_run=True)
o = ort.SessionOptions(); o.intra_op_num_threads = 2
default = ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
ours_fused = ort.InferenceSession(M, __import__("contracts.onnx_sessions", fromlist=["x"]).served_session_options(2, True), providers=["CPUExecutionProvider"])
for n in (22, 41, 64, 100, 128):
    f = feeds_len(n)
    t = interleaved_medians({"ours": ours, "peer_default": default, "ours_fused": ours_fused}, f, rounds=5, warm=5, calls=30)
    print(f"{n:4d} tokens: " + ", ".join(f"{k} {v:.3f} ms" for k, v in t.items()), flush=True)
