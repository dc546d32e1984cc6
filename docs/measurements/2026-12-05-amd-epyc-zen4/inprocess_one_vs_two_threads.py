"""The throwaway in-process check of docs/performance.md ("Why the choice still wanders"), kept as run:
60 held-out texts of 16-31 tokens, the served text_embedder file, 1 thread vs 2 spinning-within-run threads.
Run from the repository root: .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/inprocess_one_vs_two_threads.py"""
import json, time, statistics, numpy as np, onnxruntime as ort, sys
sys.path.insert(0, "scripts")
from tokenizers import Tokenizer
tok = Tokenizer.from_file("model_repository/text_embedder/1/tokenizer.json")
texts = [t for t in json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"] if 16 <= len(tok.encode(t).ids) <= 31][:60]
def sess(n):
    o = ort.SessionOptions(); o.intra_op_num_threads = n; o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if n > 1 else "0")
    o.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession("model_repository/text_embedder/1/model.onnx", o, providers=["CPUExecutionProvider"])
S = {1: sess(1), 2: sess(2)}
names = [i.name for i in S[1].get_inputs()]
def feeds(t):
    e = tok.encode(t); ids = np.array([e.ids], dtype=np.int64)
    f = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return {k: f[k] for k in names}
F = [feeds(t) for t in texts]
for rnd in range(3):
    for n in (2, 1):
        s = S[n]; s.run(None, F[0]); ts = []
        for f in F:
            a = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - a)
        print(rnd, n, "threads median %.2f ms" % (1e3 * statistics.median(ts)))
