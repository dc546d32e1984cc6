"""Wide (2-thread) session at c=1-like gaps: served options (spin within run, stop at its end) vs ORT's default spinning vs none."""
import json, sys, time, statistics
sys.path.insert(0, "scripts")
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
M = "model_repository/text_embedder/1/model.onnx"
tok = Tokenizer.from_file("model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"][:200]
def sess(allow, force_stop):
    o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if allow is not None: o.add_session_config_entry("session.intra_op.allow_spinning", allow)
    if force_stop: o.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
S = {"served (spin within run, stop at end)": sess("1", True), "ORT default (spin on, no stop)": sess(None, False), "no spinning": sess("0", False)}
names = [i.name for i in next(iter(S.values())).get_inputs()]
def feeds(t):
    e = tok.encode(t); ids = np.array([e.ids], dtype=np.int64)
    f = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return {k: f[k] for k in names}
F = [feeds(t) for t in texts]
gap = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0008
for rnd in range(3):
    for label, s in S.items():
        s.run(None, F[0]); lat = []
        for f in F:
            time.sleep(gap); a = time.perf_counter(); s.run(None, f); lat.append(time.perf_counter() - a)
        print(f"round {rnd} gap {gap*1e3:.1f} ms  {label:40s} median {1e3*statistics.median(lat):.3f} ms  mean {1e3*statistics.mean(lat):.3f}", flush=True)
