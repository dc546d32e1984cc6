"""Throwaway probe, kept as it was run: a spinning 2-thread session (within a run) on two cores vs one (taskset -c 0)."""
import json, sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
M = "/work/main/model_repository/text_embedder/1/model.onnx"
tok = Tokenizer.from_file("/work/main/model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:200]
o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.inter_op_num_threads = 1
o.add_session_config_entry("session.intra_op.allow_spinning", "1"); o.add_session_config_entry("session.force_spinning_stop", "1")
s = ort.InferenceSession(M, o, providers=["CPUExecutionProvider"])
names = [i.name for i in s.get_inputs()]
def feed(t):
    e = tok.encode(t); ids = np.array([e.ids], dtype=np.int64); m = np.array([e.attention_mask], dtype=np.int64)
    f = {names[0]: ids, names[1]: m}
    if len(names) > 2: f[names[2]] = np.zeros_like(ids)
    return f
fs = [feed(t) for t in texts]
lat = []
for i in range(400):
    t0 = time.perf_counter(); s.run(None, fs[i % 200]); lat.append(time.perf_counter() - t0); time.sleep(0.001)
lat.sort(); print(sys.argv[1], "median %.2f ms p90 %.2f max %.2f" % (1e3*lat[200], 1e3*lat[360], 1e3*lat[-1]))
