# Run from /work/main with .venv/bin/python. Cold = right after an ONNX Runtime call of the served text encoder.
import sys, time, statistics, json, numpy as np
sys.path.insert(0, "scripts")
from serving.backend.text_frontend import TextFrontEnd
from serving.backend.batch_execution import BatchLayout, execute_batch, concat_padded
from contracts.sequence_buckets import parse_bucket_boundaries, real_lengths, assign_buckets, run_in_length_buckets
from contracts.onnx_sessions import served_session
d = "model_repository/text_embedder/1/"
w = served_session(d + "model.onnx", 1)
names = [i.name for i in w.get_inputs()]; outn = [o.name for o in w.get_outputs()]
fe = TextFrontEnd(d + "tokenizer.json", 128, 0, names)
layout = BatchLayout(tuple(names), 0, parse_bucket_boundaries("16,24,32,48,64,96,128"), "attention_mask")
corpus = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"]
arrays = [np.array([[t.encode()]], dtype=object) for t in corpus[:4]]
tok = fe.tokenize(arrays, one_width=True).tensors
print([t["input_ids"].shape for t in tok])
feeds1 = fe.tokenize(arrays[:1]).tensors[0]
def cold(label, f, n=800):
    ts = []
    for _ in range(n):
        w.run(outn, feeds1); a = time.perf_counter(); f(); ts.append((time.perf_counter() - a) * 1e6)
    print(f"{label:34s} cold {statistics.median(ts):7.1f} us")
calls = []
fake = lambda f: (calls.append(1), [np.zeros((next(iter(f.values())).shape[0], 384), np.float32)])[1]
batch = {n: concat_padded([t[n] for t in tok]) for n in names}
lengths = real_lengths(batch["attention_mask"])
print("lengths", lengths, "groups", assign_buckets(lengths, layout.buckets))
cold("execute_batch 4", lambda: execute_batch(fake, layout, tok))
cold("concat x3", lambda: {n: concat_padded([t[n] for t in tok]) for n in names})
cold("real_lengths", lambda: real_lengths(batch["attention_mask"]))
cold("assign_buckets", lambda: assign_buckets(lengths, layout.buckets))
cold("run_in_length_buckets", lambda: run_in_length_buckets(fake, batch, "attention_mask", layout.buckets))
from bisect import bisect_left
from contracts.sequence_buckets import check_bucket_boundaries
def assign_py(lengths, boundaries):
    edges = check_bucket_boundaries(boundaries)
    last = len(edges) - 1
    groups = {}
    for row, length in enumerate(lengths.tolist() if isinstance(lengths, np.ndarray) else lengths):
        groups.setdefault(min(bisect_left(edges, length), last), []).append(row)
    return [np.array(groups[b]) for b in sorted(groups)]
def real_py(mask):
    out = []
    for row in mask.tolist():
        n = len(row)
        while n and not row[n - 1]:
            n -= 1
        out.append(n or 1)
    return np.array(out, dtype=np.int64)
print(assign_py(lengths, layout.buckets), real_py(batch["attention_mask"]))
cold("assign_py", lambda: assign_py(lengths, layout.buckets))
cold("check_bucket_boundaries", lambda: check_bucket_boundaries(layout.buckets))
cold("real_py", lambda: real_py(batch["attention_mask"]))
big = np.ones((16, 60), np.int64); big[::2, 30:] = 0
cold("real_lengths 16x60", lambda: real_lengths(big))
cold("real_py 16x60", lambda: real_py(big))
