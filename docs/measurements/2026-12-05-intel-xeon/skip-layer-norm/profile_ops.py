import sys, json, time, collections, numpy as np
sys.path.insert(0, "/work/main/scripts")
import onnxruntime as ort
from contracts.onnx_sessions import served_session_options
path, B, T, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
o = served_session_options(threads)
o.enable_profiling = True
o.profile_file_prefix = "/tmp/profile_ops"
dis = sys.argv[5].split(",") if len(sys.argv) > 5 else []
s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"], disabled_optimizers=dis)
rng = np.random.default_rng(0)
feeds = {"input_ids": rng.integers(1000, 20000, (B, T)).astype(np.int64), "attention_mask": np.ones((B, T), np.int64)}
for _ in range(50): s.run(None, feeds)
t = time.perf_counter()
for _ in range(200): s.run(None, feeds)
print("ms/call", (time.perf_counter() - t) / 200 * 1000)
f = s.end_profiling()
ev = json.load(open(f))
by = collections.Counter(); n = collections.Counter()
for e in ev:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        by[e["args"]["op_name"]] += e["dur"]; n[e["args"]["op_name"]] += 1
tot = sum(by.values())
for k, v in by.most_common(15): print(f"{k:28s} {v/tot*100:5.1f}%  {v/250/1000:.3f} ms/call")
