"""Fused vs unfused vs the FP32 graph over 256 held-out texts in batches of 16, 1 thread (kept as run)."""
import numpy as np
from in_process_ab import HELDOUT, feeds, mk

M = "/work/main/model_repository/text_embedder/1/model.onnx"
q, qu, ref = mk(M, 1, False, []), mk(M, 1, False, ["SkipLayerNormFusion"]), mk("/work/main/artifacts/text_encoder/fp32.onnx", 1, False, [])
cs = lambda a, b: (a*b).sum(1)/np.linalg.norm(a,axis=1)/np.linalg.norm(b,axis=1)
A, B, R = [], [], []
for i in range(0, 256, 16):
    f = feeds(HELDOUT[i:i+16]); A.append(q.run(None, f)[0]); B.append(qu.run(None, f)[0]); R.append(ref.run(None, f)[0])
A, B, R = map(np.concatenate, (A, B, R))
print("fused vs unfused: min cos", cs(A,B).min(), "rows differing >1e-4:", int((np.abs(A-B).max(1) > 1e-4).sum()), "of", len(A))
print("vs fp32: fused mean cos", cs(A,R).mean(), "min", cs(A,R).min(), "| unfused mean", cs(B,R).mean(), "min", cs(B,R).min())
