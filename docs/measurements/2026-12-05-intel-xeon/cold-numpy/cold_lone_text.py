"""Each step of a lone text's path through the backend, cold and warm (cold_setup.py)."""
import numpy as np
from cold_setup import LONE_TEXT, Served

from contracts.sequence_buckets import assign_buckets, real_lengths, run_in_length_buckets
from contracts.token_padding import padded_token_tensors
from serving.backend.batch_execution import concat_padded, execute_batch
from serving.backend.text_frontend import decode_texts

served = Served(threads=2)
fe, layout, names = served.frontend, served.layout, served.names
tok = fe.tokenize([LONE_TEXT]).tensors
feeds = tok[0]
text = decode_texts(LONE_TEXT)[0]
enc = fe.encodings([text])
fake = lambda f: [np.zeros((next(iter(f.values())).shape[0], 384), np.float32)]  # noqa: E731 (no model)
for label, step in [
    ("nothing", lambda: None),
    ("decode_texts", lambda: decode_texts(LONE_TEXT)),
    ("encode_batch", lambda: fe.tokenizer.encode_batch([text])),
    ("encode", lambda: fe.tokenizer.encode(text)),
    ("padded_token_tensors", lambda: padded_token_tensors(enc, 0, names)),
    ("tokenize", lambda: fe.tokenize([LONE_TEXT])),
    ("real_lengths", lambda: real_lengths(feeds["attention_mask"])),
    ("assign_buckets", lambda: assign_buckets([18], layout.buckets)),
    ("concat_padded x3", lambda: {n: concat_padded([feeds[n]]) for n in names}),
    ("run_in_length_buckets fake", lambda: run_in_length_buckets(fake, feeds, "attention_mask", layout.buckets)),
    ("execute_batch fake", lambda: execute_batch(fake, layout, tok)),
]:
    served.cold(label, step, feeds, calls=1500, warm=True)
