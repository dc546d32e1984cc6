"""Two processes, each with a 2-thread session (spinning within a run, stopped at its end, or not spinning),
take turns like Triton's alternating instances: per-call wall times."""
import os, sys, time, json, numpy as np, multiprocessing as mp
sys.path.insert(0, "/work/main/scripts")
ONNX = "/work/main/model_repository/text_embedder/1/model.onnx"
def make(threads, spin):
    import onnxruntime as ort
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin: o.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(ONNX, o, providers=["CPUExecutionProvider"])
def feeds(w):
    return {"input_ids": np.full((1, w), 1000, np.int64), "attention_mask": np.ones((1, w), np.int64)}
def worker(my_turn, other_turn, threads, spin, n, out, gap_s):
    s = make(threads, spin); f = feeds(24)
    for _ in range(5): s.run(None, f)
    ts = []
    for i in range(n):
        my_turn.acquire()
        time.sleep(gap_s)
        a = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - a)
        other_turn.release()
    out.put(ts)
def run(mode, threads, spin, n=300, gap_s=0.001):
    q = mp.Queue()
    if mode == "one":
        a, b = mp.Semaphore(1), None
        # one process: its own turn every time
        a2 = mp.Semaphore(0)
        p = mp.Process(target=worker, args=(a, a, threads, spin, n, q, gap_s)); p.start(); ts = q.get(); p.join()
    else:
        a, b = mp.Semaphore(1), mp.Semaphore(0)
        p1 = mp.Process(target=worker, args=(a, b, threads, spin, n, q, gap_s))
        p2 = mp.Process(target=worker, args=(b, a, threads, spin, n, q, gap_s))
        p1.start(); p2.start(); ts = q.get() + q.get(); p1.join(); p2.join()
    ts = np.array(ts) * 1e3
    print(f"{mode:4s} threads={threads} spin={int(spin)}: median {np.median(ts):.2f} ms p90 {np.percentile(ts,90):.2f} max {ts.max():.2f}", flush=True)
if __name__ == "__main__":
    for rep in range(2):
        for mode in ("one", "two"):
            for threads, spin in ((1, False), (2, False), (2, True)):
                run(mode, threads, spin)
