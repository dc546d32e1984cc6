"""Throwaway probe, kept as it was run; its output is in README.txt beside it."""
import json, sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
from contracts.onnx_sessions import served_session
M = "/work/main/model_repository/text_embedder/1/model.onnx"
tok = Tokenizer.from_file("/work/main/model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
a, b = served_session(M, 1), served_session(M, 1)
names = [i.name for i in a.get_inputs()]
def feeds(t):
    e = tok.encode(t); ids = np.array([e.ids], dtype=np.int64); m = np.array([e.attention_mask], dtype=np.int64)
    f = {names[0]: ids, names[1]: m}
    if len(names) > 2: f[names[2]] = np.zeros_like(ids)
    return f
for label, gap, sessions in (("one session, 2.5 ms gaps", 0.0025, [a]), ("two sessions alternating, 2.5 ms gaps", 0.0025, [a, b]), ("one session, 5 ms gaps", 0.005, [a]), ("one session, 10 ms gaps", 0.010, [a])):
    lat = []
    for i, t in enumerate(texts * 2):
        f = feeds(t); time.sleep(gap); s = sessions[i % len(sessions)]
        t0 = time.perf_counter(); s.run(None, f); lat.append(time.perf_counter() - t0)
    print(f"{label}: median {1e3*statistics.median(lat):.2f} ms")
