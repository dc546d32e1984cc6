"""Per-text cost of the served text file vs batch size, 1-thread and 2-thread sessions, held-out texts, length-bucketed like the server."""
import json, time, sys, numpy as np, onnxruntime as ort, random
sys.path.insert(0, "scripts")
from tokenizers import Tokenizer
tok = Tokenizer.from_file("model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"]
random.seed(0); random.shuffle(texts)
B = [16, 24, 32, 48, 64, 96, 128]
def sess(n):
    o = ort.SessionOptions(); o.intra_op_num_threads = n; o.inter_op_num_threads = 1
    return ort.InferenceSession("model_repository/text_embedder/1/model.onnx", o, providers=["CPUExecutionProvider"])
S = {n: sess(n) for n in (1, 2)}
names = [i.name for i in S[1].get_inputs()]
enc = [tok.encode(t).ids for t in texts]
def calls(batch):
    by = {}
    for ids in batch:
        b = next(x for x in B if x >= len(ids)); by.setdefault(b, []).append(ids)
    out = []
    for rows in by.values():
        L = max(len(r) for r in rows); ids = np.zeros((len(rows), L), np.int64); m = np.zeros_like(ids)
        for i, r in enumerate(rows): ids[i, :len(r)] = r; m[i, :len(r)] = 1
        f = {"input_ids": ids, "attention_mask": m, "token_type_ids": np.zeros_like(ids)}
        out.append({k: f[k] for k in names})
    return out
for rnd in range(2):
    for n in (1, 2):
        for bs in (1, 2, 4, 8, 16, 32):
            batches = [calls(enc[i:i+bs]) for i in range(0, 320, bs)]
            S[n].run(None, batches[0][0])
            t = time.perf_counter()
            for cs in batches:
                for f in cs: S[n].run(None, f)
            dt = time.perf_counter() - t
            print(f"round {rnd} threads {n} batch {bs:2d}: {320/dt:6.1f} texts/s, {dt/320*1e3:.2f} ms/text", flush=True)
