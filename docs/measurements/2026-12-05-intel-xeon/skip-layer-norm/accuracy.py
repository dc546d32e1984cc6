import sys, json, numpy as np
sys.path.insert(0, "/work/main/scripts")
import onnxruntime as ort
from tokenizers import Tokenizer
from contracts.onnx_sessions import served_session_options
tok = Tokenizer.from_file("/work/main/model_repository/text_embedder/1/tokenizer.json")
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:256]
def feeds(ts):
    enc = tok.encode_batch(ts); T = max(len(e.ids) for e in enc)
    ids = np.zeros((len(ts), T), np.int64); m = np.zeros_like(ids)
    for i, e in enumerate(enc): ids[i, :len(e.ids)] = e.ids; m[i, :len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": m}
mk = lambda p, dis: ort.InferenceSession(p, served_session_options(1), providers=["CPUExecutionProvider"], disabled_optimizers=dis)
q, qu, ref = mk("/work/main/model_repository/text_embedder/1/model.onnx", []), mk("/work/main/model_repository/text_embedder/1/model.onnx", ["SkipLayerNormFusion"]), mk("/work/main/artifacts/text_encoder/fp32.onnx", [])
cs = lambda a, b: (a*b).sum(1)/np.linalg.norm(a,axis=1)/np.linalg.norm(b,axis=1)
A, B, R = [], [], []
for i in range(0, 256, 16):
    f = feeds(texts[i:i+16]); A.append(q.run(None, f)[0]); B.append(qu.run(None, f)[0]); R.append(ref.run(None, f)[0])
A, B, R = map(np.concatenate, (A, B, R))
print("fused vs unfused: min cos", cs(A,B).min(), "rows differing >1e-4:", int((np.abs(A-B).max(1) > 1e-4).sum()), "of", len(A))
print("vs fp32: fused mean cos", cs(A,R).mean(), "min", cs(A,R).min(), "| unfused mean", cs(B,R).mean(), "min", cs(B,R).min())
