"""Does a stream of ever-new batches cost ONNX Runtime more per text than the same batch repeated?
In-process, the served 1-thread session, batches drawn like c=16's executions (requests per execution
from c16-batches.txt; held-out texts), split into the served length buckets as the backend does.
`fresh`: each batch once; `repeated`: each batch 5 times in a row, the median kept. Thread CPU and
wall per text. Session variants: served options, enable_mem_pattern off, CPU arena off.
Usage: python fresh_batches.py BATCHES ROUNDS"""
import os, sys, time, random
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnxruntime as ort
from contracts.onnx_sessions import served_session_options, disabled_fusions
from contracts.sequence_buckets import run_in_length_buckets
from grouping_ab import BUCKETS, HELDOUT, MODEL, feeds  # the set-up this folder's probes share

SIZES = [(1, 437), (2, 204), (3, 118), (4, 119), (6, 315), (12, 176)]  # c16-batches.txt, bins by their middle


def session(variant):
    o = served_session_options(1, False)
    if variant == "no_mem_pattern":
        o.enable_mem_pattern = False
    if variant == "no_cpu_arena":
        o.enable_cpu_mem_arena = False
    return ort.InferenceSession(MODEL, o, providers=["CPUExecutionProvider"], disabled_optimizers=disabled_fusions())


def stream(n, seed):
    rng = random.Random(seed)
    sizes, weights = zip(*SIZES)
    return [feeds(rng.sample(HELDOUT, rng.choices(sizes, weights)[0])) for _ in range(n)]


def per_text(s, batches, repeat):
    run = lambda f: s.run(None, f)
    cpu = wall = 0.0
    rows = 0
    for f in batches:
        samples = []
        for _ in range(repeat):
            c, w = time.thread_time(), time.perf_counter()
            run_in_length_buckets(run, f, "attention_mask", BUCKETS)
            samples.append((time.thread_time() - c, time.perf_counter() - w))
        c, w = sorted(samples)[len(samples) // 2]
        cpu += c; wall += w; rows += len(f["input_ids"])
    return cpu / rows * 1e3, wall / rows * 1e3


if __name__ == "__main__":
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    variants = ["served", "no_mem_pattern", "no_cpu_arena"]
    sessions = {v: session(v) for v in variants}
    warm = stream(50, 99)
    for v in variants:
        per_text(sessions[v], warm, 1)
    for r in range(rounds):
        batches = stream(n, r)
        for v in variants[r % 3:] + variants[:r % 3]:
            for mode, repeat in (("fresh", 1), ("repeated", 5)):
                cpu, wall = per_text(sessions[v], batches, repeat)
                print(f"round {r} {v:15s} {mode:8s} cpu {cpu:.3f} ms/text  wall {wall:.3f} ms/text", flush=True)
