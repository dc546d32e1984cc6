"""Per-text ONNX Runtime time of the served text file on 1-thread sessions, two processes pinned to
CPU 0 and 1 at once (as the server's two instances at c=16), batches of 4 held-out texts in the
served length buckets; variants: tight loop; 1 ms sleep between calls; a third unpinned process
busy ~30% of the time (the client and tritonserver's share at c=16)."""
import json, multiprocessing as mp, os, random, sys, time
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer

from contracts.sequence_buckets import assign_buckets
from contracts.token_padding import pad_rows
MODEL = "model_repository/text_embedder/1/model.onnx"
B = [16, 24, 32, 48, 64, 96, 128]

def calls(enc, names):
    """One feed per served length bucket, each padded to its longest row (the backend's own helpers;
    until the kept outputs were written this was a copy of one_thread_batch_gain.py's loop, same result)."""
    out = []
    for rows in assign_buckets([len(r) for r in enc], B):
        ids = pad_rows([enc[i] for i in rows])
        f = {"input_ids": ids, "attention_mask": pad_rows([[1] * len(enc[i]) for i in rows]), "token_type_ids": np.zeros_like(ids)}
        out.append({k: f[k] for k in names})
    return out

def worker(cpu, gap_s, bs, seconds, q):
    os.sched_setaffinity(0, {cpu})
    o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    s = ort.InferenceSession(MODEL, o, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    tok = Tokenizer.from_file("model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
    texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"]
    random.Random(cpu).shuffle(texts)
    enc = [e.ids for e in tok.encode_batch(texts)]
    batches = [calls(enc[i:i+bs], names) for i in range(0, len(enc) - bs, bs)]
    for f in batches[0]: s.run(None, f)
    n_texts, ort_s, k, cpu_s = 0, 0.0, 0, 0.0
    end = time.time() + seconds
    while time.time() < end:
        cs = batches[k % len(batches)]; k += 1
        t = time.perf_counter(); c = time.thread_time()
        for f in cs: s.run(None, f)
        ort_s += time.perf_counter() - t; cpu_s += time.thread_time() - c
        n_texts += bs
        if gap_s: time.sleep(gap_s)
    q.put((cpu, n_texts, ort_s, cpu_s))

def noise(duty, seconds):
    end = time.time() + seconds
    while time.time() < end:
        t = time.perf_counter()
        while time.perf_counter() - t < duty * 1e-3: pass
        time.sleep((1 - duty) * 1e-3)

def run(label, gap_s=0.0, duty=0.0, bs=4, seconds=6, cpus=(0, 1)):
    q = mp.Queue(); ps = [mp.Process(target=worker, args=(c, gap_s, bs, seconds, q)) for c in cpus]
    nz = [mp.Process(target=noise, args=(duty, seconds + 3))] if duty else []
    for p in nz + ps: p.start()
    res = [q.get() for _ in ps]
    for p in nz + ps: p.join()
    per = [f'{1e3 * o / n:.2f} wall {1e3 * c / n:.2f} cpu' for _, n, o, c in res]
    print(f"{label:40s} batch {bs}: ORT ms/text " + " / ".join(per), flush=True)

if __name__ == "__main__":
    for rnd in range(1):
        run("one process alone (CPU 0)", cpus=(0,))
        run("two side by side, tight")
        run("two side by side, 1 ms sleep between", gap_s=0.001)
        run("two side by side + 30% busy third", duty=0.3)
        run("two side by side + 60% busy third", duty=0.6)
