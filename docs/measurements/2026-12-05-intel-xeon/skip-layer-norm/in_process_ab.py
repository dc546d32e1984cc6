"""Fused vs SkipLayerNormFusion disabled, in-process, served session options, held-out texts.
Usage: python in_process_ab.py MODEL.onnx   (medians of 5 rounds x 40 calls; kept as run)."""
import sys, time, json, numpy as np
sys.path.insert(0, "/work/main/scripts")
import onnxruntime as ort
from tokenizers import Tokenizer
from contracts.onnx_sessions import served_session_options

tok = Tokenizer.from_file("/work/main/model_repository/text_embedder/1/tokenizer.json")
HELDOUT = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"]


def feeds(ts):
    enc = tok.encode_batch(ts); T = max(len(e.ids) for e in enc)
    ids = np.zeros((len(ts), T), np.int64); m = np.zeros_like(ids)
    for i, e in enumerate(enc): ids[i, :len(e.ids)] = e.ids; m[i, :len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": m}


def mk(path, threads, spin, dis):
    return ort.InferenceSession(path, served_session_options(threads, spin), providers=["CPUExecutionProvider"], disabled_optimizers=dis)


if __name__ == "__main__":
    path, texts = sys.argv[1], HELDOUT[:64]
    cases = [("1 text", feeds(texts[:1])), ("8 texts", feeds(texts[:8])), ("32 texts", feeds(texts[:32]))]
    for threads, spin in [(1, False), (2, True)]:
        a, b = mk(path, threads, spin, []), mk(path, threads, spin, ["SkipLayerNormFusion"])
        for name, f in cases:
            oa, ob = a.run(None, f)[0], b.run(None, f)[0]
            ra, rb = [], []
            for rnd in range(5):
                for s, r in ((a, ra), (b, rb)):
                    for _ in range(5): s.run(None, f)
                    ts = []
                    for _ in range(40):
                        t = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - t)
                    r.append(np.median(ts) * 1000)
            print(f"threads={threads} {name} shape={f['input_ids'].shape}: fused {np.median(ra):.3f} ms, unfused {np.median(rb):.3f} ms, ratio {np.median(rb)/np.median(ra):.3f}, max|diff| {np.abs(oa-ob).max():.2e}")
