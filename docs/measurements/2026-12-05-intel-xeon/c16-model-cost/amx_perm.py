import ctypes, os, sys, time, json, random
import numpy as np, onnxruntime as ort
libc = ctypes.CDLL(None, use_errno=True)
def perm():
    mask = ctypes.c_uint64(0)
    r = libc.syscall(158, 0x1022, ctypes.byref(mask))  # ARCH_GET_XCOMP_PERM
    return r, hex(mask.value), bool(mask.value & (1 << 18))
print("before session: ret, mask, XTILEDATA:", perm())
o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
s = ort.InferenceSession("model_repository/text_embedder/1/model.onnx", o, providers=["CPUExecutionProvider"])
ids = np.random.default_rng(0).integers(1000, 20000, size=(4, 24)).astype(np.int64)
f = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
f = {i.name: f[i.name] for i in s.get_inputs()}
s.run(None, f)
print("after a run: ret, mask, XTILEDATA:", perm())
ts = []
for _ in range(200):
    t = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - t)
ts.sort(); print(f"4x24 tokens, 1 thread: median {1e3*ts[100]:.2f} ms ({1e3*ts[100]/4:.2f} ms/text)")
