"""A lone text: `encode` vs `encode_batch([text])` with the pool off, 600 held-out texts, 3 rounds.
Run: TOKENIZERS_PARALLELISM=false .venv/bin/python docs/measurements/2026-12-05-intel-xeon/tokenizer-threads/encode_one.py"""
import json, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file("model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"][:600]
for r in range(3):
    t = time.perf_counter()
    for x in texts: tok.encode(x)
    a = time.perf_counter() - t
    t = time.perf_counter()
    for x in texts: tok.encode_batch([x])
    b = time.perf_counter() - t
    print(f"encode {1e6*a/600:.1f} us, encode_batch([t]) {1e6*b/600:.1f} us")
