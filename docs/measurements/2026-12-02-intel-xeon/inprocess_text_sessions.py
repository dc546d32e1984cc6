"""Throwaway probe, kept as it was run; its output is in README.txt beside it."""
import json, sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
from contracts.onnx_sessions import served_session_options
M = "/work/main/model_repository/text_embedder/1/model.onnx"
tok = Tokenizer.from_file("/work/main/model_repository/text_embedder/1/tokenizer.json")
tok.enable_truncation(128)
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:200]
def feeds(sess, t):
    e = tok.encode(t)
    ids = np.array([e.ids], dtype=np.int64); m = np.array([e.attention_mask], dtype=np.int64)
    names = [i.name for i in sess.get_inputs()]
    f = {names[0]: ids, names[1]: m}
    if len(names) > 2: f[names[2]] = np.zeros_like(ids)
    return f
def opts(spin):
    o = served_session_options(2)
    if spin is not None:
        o.add_session_config_entry("session.intra_op.allow_spinning", spin) if False else None
    return o
variants = {}
o = served_session_options(2); variants["served(nospin)"] = ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
o = ort.SessionOptions(); o.intra_op_num_threads = 2; variants["default(spin)"] = ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
o = served_session_options(2); o2 = ort.SessionOptions(); o2.intra_op_num_threads=2; o2.inter_op_num_threads=1; o2.add_session_config_entry("session.intra_op.allow_spinning","1"); o2.add_session_config_entry("session.force_spinning_stop","1"); variants["spin+forcestop"] = ort.InferenceSession(M, o2, providers=["CPUExecutionProvider"])
o3 = ort.SessionOptions(); o3.intra_op_num_threads = 1; variants["1thread"] = ort.InferenceSession(M, o3, providers=["CPUExecutionProvider"])
gap = float(sys.argv[1]) if len(sys.argv) > 1 else 0.001
res = {k: [] for k in variants}
for rnd in range(3):
    for name, s in variants.items():
        for t in texts:
            f = feeds(s, t)
            time.sleep(gap)
            t0 = time.perf_counter(); s.run(None, f); res[name].append(time.perf_counter() - t0)
for k, v in res.items():
    print(f"{k:16s} median {1e3*statistics.median(v):.2f} ms  mean {1e3*statistics.mean(v):.2f}")
