"""Tokenizing four held-out texts, cold; encode_batch against encode_batch_fast (cold_setup.py)."""
import time

from cold_setup import Served, as_requests, heldout_texts

from contracts.token_padding import padded_token_tensors
from serving.backend.text_frontend import decode_texts

served = Served(threads=1)
fe, names = served.frontend, served.names
arrays = as_requests(heldout_texts(4))
feeds = fe.tokenize(arrays[:1]).tensors[0]
texts = [decode_texts(a)[0] for a in arrays]
encs = fe.encodings(texts)
for label, step in [
    ("tokenize 4 requests", lambda: fe.tokenize(arrays)),
    ("decode_texts x4", lambda: [decode_texts(a) for a in arrays]),
    ("bounded x4", lambda: [fe.bounded(t) for t in texts]),
    ("encode_batch 4", lambda: fe.tokenizer.encode_batch(texts)),
    ("padded_token_tensors x4", lambda: [padded_token_tensors(encs[i:i + 1], 0, names) for i in range(4)]),
    ("tokenize 1 request", lambda: fe.tokenize(arrays[:1])),
    ("encode_batch_fast 4", lambda: fe.tokenizer.encode_batch_fast(texts)),
    ("encode_batch_fast 1", lambda: fe.tokenizer.encode_batch_fast(texts[:1])),
    ("encode_batch 1", lambda: fe.tokenizer.encode_batch(texts[:1])),
]:
    served.cold(label, step, feeds, calls=800)
same = lambda xs: all(x.ids == y.ids and x.type_ids == y.type_ids and x.attention_mask == y.attention_mask  # noqa: E731
                      for x, y in zip(fe.tokenizer.encode_batch(xs), fe.tokenizer.encode_batch_fast(xs)))
print("the same ids, type ids and masks on the four:", same(texts))
import json  # noqa: E402
corpus = json.load(open("artifacts/text_encoder/text_corpus.json"))
everything = corpus["heldout"] + corpus.get("train", [])
print(f"... on all {len(everything)} corpus texts:", same(everything))
for encode in (fe.tokenizer.encode_batch, fe.tokenizer.encode_batch_fast):
    start = time.perf_counter()
    for text in everything[:1000]:
        encode([text])
    print(encode.__name__, f"{(time.perf_counter() - start) / 1000 * 1e6:.1f} us/text warm")
