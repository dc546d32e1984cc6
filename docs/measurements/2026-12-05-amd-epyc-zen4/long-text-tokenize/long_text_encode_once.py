"""A 9 MB text through the served tokenizer: its bounded start encoded again after the check that
found it (before) against the check's own encoding handed on (TextFrontEnd.encodings, after).
Same tokens asserted. Run: .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/long-text-tokenize/long_text_encode_once.py"""
import sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "scripts"))
import numpy as np
from serving.backend.text_frontend import TextFrontEnd
fe = TextFrontEnd(str(ROOT / "model_repository/text_embedder/1/tokenizer.json"), 128, 0, ["input_ids", "attention_mask", "token_type_ids"])
words = open(ROOT / "README.md").read().split()
text = " ".join(words * (9_000_000 // len(" ".join(words)) + 1))[:9_000_000]
def old(t):
    start, _ = fe.bounded(t); return fe.tokenizer.encode(start)
def new(t):
    return fe.encodings([t])[0]
assert old(text).ids == new(text).ids
for r in range(3):
    for name, f in (("encode the bounded start again (before)", old), ("reuse the check's encoding (after)", new)):
        t0 = time.perf_counter()
        for _ in range(20): f(text)
        print(f"round {r} {name}: {(time.perf_counter() - t0) / 20 * 1000:.2f} ms per 9 MB text", flush=True)
