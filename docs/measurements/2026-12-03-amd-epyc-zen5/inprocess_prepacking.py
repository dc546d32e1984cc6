"""Throwaway probe, kept as it was run (output in README.txt): the served text encoder on one thread,
with and without ONNX Runtime's weight prepacking (`session.disable_prepacking`), back to back: the
cost of weights that two processes could share (prepacked weights are private to a session)."""
import json, time, statistics, sys
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
tok = Tokenizer.from_file("/work/main/model_repository/text_tokenizer/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
M = "/work/main/model_repository/text_encoder/1/model.onnx"
def sess(prepack):
    o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not prepack: o.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
ss = {"prepack": sess(True), "no prepack": sess(False)}
names = [i.name for i in ss["prepack"].get_inputs()]
fs = []
for t in texts:
    e = tok.encode(t); ids = np.array([e.ids], np.int64); m = np.array([e.attention_mask], np.int64)
    f = {"input_ids": ids, "attention_mask": m, "token_type_ids": np.zeros_like(ids)}; fs.append({k: f[k] for k in names})
ops = {}
import onnx
for n in onnx.load(M, load_external_data=False).graph.node: ops[n.op_type] = ops.get(n.op_type, 0) + 1
print(sorted(ops.items(), key=lambda x: -x[1])[:12])
for rnd in range(2):
    for k, s in ss.items():
        for f in fs[:30]: s.run(None, f)
        lat = []
        for f in fs:
            a = time.perf_counter(); s.run(None, f); lat.append(time.perf_counter() - a)
        print(f"{k:10s} median {1e3*statistics.median(lat):.2f} ms")
