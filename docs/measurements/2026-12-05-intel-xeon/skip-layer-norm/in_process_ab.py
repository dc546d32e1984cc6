"""Fused vs SkipLayerNormFusion disabled, in-process, served session options, held-out texts.
Usage: python in_process_ab.py MODEL.onnx   (medians of 5 rounds x 40 calls). `interleaved_medians` is
also the timing loop of gelu_ab.py and ../attention-mha/ab.py."""
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


def interleaved_medians(sessions, f, rounds=5, warm=5, calls=40):
    """{name: median ms}: per round, each session in turn runs `warm` untimed then `calls` timed
    calls; a session's figure is the median over rounds of its per-round medians."""
    per_round = {k: [] for k in sessions}
    for _ in range(rounds):
        for k, s in sessions.items():
            for _ in range(warm): s.run(None, f)
            ts = []
            for _ in range(calls):
                t = time.perf_counter(); s.run(None, f); ts.append(time.perf_counter() - t)
            per_round[k].append(np.median(ts) * 1000)
    return {k: float(np.median(v)) for k, v in per_round.items()}


if __name__ == "__main__":
    path, texts = sys.argv[1], HELDOUT[:64]
    cases = [("1 text", feeds(texts[:1])), ("8 texts", feeds(texts[:8])), ("32 texts", feeds(texts[:32]))]
    for threads, spin in [(1, False), (2, True)]:
        a, b = mk(path, threads, spin, []), mk(path, threads, spin, ["SkipLayerNormFusion"])
        for name, f in cases:
            oa, ob = a.run(None, f)[0], b.run(None, f)[0]
            t = interleaved_medians({"fused": a, "unfused": b}, f)
            print(f"threads={threads} {name} shape={f['input_ids'].shape}: fused {t['fused']:.3f} ms, unfused {t['unfused']:.3f} ms, ratio {t['unfused']/t['fused']:.3f}, max|diff| {np.abs(oa-ob).max():.2e}")
