"""Throwaway probe, kept as it was run (output in README.txt): a lone text and sorted batches of 16
on the INT8-mixed and FP32 encoder files, 1 thread (not spinning) and 2 threads (spinning), in a
tight loop in one process (no server). Run from the repository root."""
import json, time, sys, statistics
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
tok = Tokenizer.from_file("model_repository/text_tokenizer/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
def feeds(batch):
    enc = [tok.encode(t) for t in batch]; L = max(len(e.ids) for e in enc)
    ids = np.zeros((len(batch), L), np.int64); m = np.zeros_like(ids)
    for i, e in enumerate(enc): ids[i, :len(e.ids)] = e.ids; m[i, :len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": m, "token_type_ids": np.zeros_like(ids)}
def sess(path, threads, spin):
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    names = {i.name for i in s.get_inputs()}; return s, names
for path in ("artifacts/text_encoder/int8_mixed.onnx", "artifacts/text_encoder/fp32.onnx"):
    for threads, spin in ((1, False), (2, True)):
        s, names = sess(path, threads, spin)
        singles = [{k: v for k, v in feeds([t]).items() if k in names} for t in texts]
        for f in singles[:50]: s.run(None, f)
        t0 = time.perf_counter(); lat = []
        for f in singles:
            a = time.perf_counter(); s.run(None, f); lat.append(time.perf_counter() - a)
        # batches of 16 sorted by length (bucket-like)
        order = sorted(texts, key=len); bs = [{k: v for k, v in feeds(order[i:i+16]).items() if k in names} for i in range(0, 288, 16)]
        t1 = time.perf_counter()
        for f in bs: s.run(None, f)
        el = time.perf_counter() - t1
        print(f"{path.split('/')[-1]:16s} threads {threads} spin {spin}: single median {1e3*statistics.median(lat):.2f} ms; sorted batches of 16: {288/el:.0f} texts/s")
