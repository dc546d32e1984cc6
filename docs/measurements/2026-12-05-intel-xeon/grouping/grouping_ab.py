"""How a batch of a few texts is best split into ONNX Runtime calls, in-process on the served
1-thread session (the c=16 executions): random batches of N held-out texts, each run as
(a) the served length buckets (contracts.sequence_buckets.run_in_length_buckets, one call per bucket),
(b) one call padded to the batch's longest, (c) one call per text (no padding).
Interleaved per batch, medians over batches of the per-batch time ratios.
Usage: python grouping_ab.py N BATCHES [THREADS]"""
import sys, time, random
sys.path.insert(0, "/work/main/scripts")
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm")
import numpy as np
from contracts.onnx_sessions import served_session
from contracts.sequence_buckets import run_in_length_buckets, parse_bucket_boundaries
from in_process_ab import HELDOUT, feeds

MODEL = "/work/main/model_repository/text_embedder/1/model.onnx"
BUCKETS = parse_bucket_boundaries("16,24,32,48,64,96,128")


def timed(fn, repeat=5):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return float(np.median(ts))


if __name__ == "__main__":
    n, batches = int(sys.argv[1]), int(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    s = served_session(MODEL, threads)
    run = lambda f: s.run(None, f)
    rng = random.Random(0)
    for _ in range(20): run(feeds(HELDOUT[:n]))
    rows = []
    for b in range(batches):
        texts = rng.sample(HELDOUT, n)
        f = feeds(texts)
        lengths = f["attention_mask"].sum(1)
        singles = [feeds([t]) for t in texts]
        ways = {"buckets": lambda: run_in_length_buckets(run, f, "attention_mask", BUCKETS),
                "longest": lambda: run(f),
                "singles": lambda: [run(x) for x in singles]}
        order = list(ways); rng.shuffle(order)
        t = {k: timed(ways[k]) for k in order}
        calls = len({min(np.searchsorted(BUCKETS, l), len(BUCKETS) - 1) for l in lengths})
        rows.append((t["buckets"], t["longest"], t["singles"], calls, int(lengths.max()), int(lengths.sum())))
    a = np.array(rows)
    print(f"# {n} texts per batch, {batches} batches, {threads} thread(s); ms per batch (medians over batches) and ratios to buckets")
    print(f"buckets {np.median(a[:,0])*1e3:.3f} ms (calls per batch: mean {a[:,3].mean():.2f}), "
          f"longest {np.median(a[:,1])*1e3:.3f} ms (ratio median {np.median(a[:,1]/a[:,0]):.3f}, mean {np.mean(a[:,1]/a[:,0]):.3f}), "
          f"singles {np.median(a[:,2])*1e3:.3f} ms (ratio median {np.median(a[:,2]/a[:,0]):.3f}, mean {np.mean(a[:,2]/a[:,0]):.3f}); "
          f"total ms buckets/longest/singles {a[:,0].sum()*1e3:.1f}/{a[:,1].sum()*1e3:.1f}/{a[:,2].sum()*1e3:.1f}")
    per_batch_best = np.minimum(a[:,0], np.minimum(a[:,1], a[:,2]))
    print(f"best of the three per batch: total {per_batch_best.sum()*1e3:.1f} ms ({per_batch_best.sum()/a[:,0].sum():.3f} of buckets)")
