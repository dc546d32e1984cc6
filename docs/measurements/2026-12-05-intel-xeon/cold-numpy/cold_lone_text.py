# Run from /work/main with .venv/bin/python. Cold = right after an ONNX Runtime call of the served text encoder.
import sys, time, statistics, numpy as np
sys.path.insert(0, "scripts")
from serving.backend.text_frontend import TextFrontEnd, decode_texts
from serving.backend.batch_execution import BatchLayout, execute_batch, concat_padded
from contracts.sequence_buckets import parse_bucket_boundaries, real_lengths, assign_buckets, run_in_length_buckets
from contracts.token_padding import padded_token_tensors
from contracts.onnx_sessions import served_session
d = "model_repository/text_embedder/1/"
w = served_session(d + "model.onnx", 2)
names = [i.name for i in w.get_inputs()]; outn = [o.name for o in w.get_outputs()]
fe = TextFrontEnd(d + "tokenizer.json", 128, 0, names)
layout = BatchLayout(tuple(names), 0, parse_bucket_boundaries("16,24,32,48,64,96,128"), "attention_mask")
text = np.array([[b"The quick brown fox jumps over the lazy dog near the river bank today."]], dtype=object)
tok = fe.tokenize([text]).tensors
feeds = tok[0]
def cold(label, f, n=1500):
    ts = []
    for _ in range(n):
        w.run(outn, feeds); a = time.perf_counter(); f(); ts.append((time.perf_counter() - a) * 1e6)
    warm = []
    for _ in range(n):
        a = time.perf_counter(); f(); warm.append((time.perf_counter() - a) * 1e6)
    print(f"{label:28s} cold {statistics.median(ts):7.1f} us   warm {statistics.median(warm):7.1f} us")
enc = fe.encodings(["The quick brown fox jumps over the lazy dog near the river bank today."])
cold("nothing", lambda: None)
cold("decode_texts", lambda: decode_texts(text))
cold("encode_batch", lambda: fe.tokenizer.encode_batch(["The quick brown fox jumps over the lazy dog near the river bank today."]))
cold("encode", lambda: fe.tokenizer.encode("The quick brown fox jumps over the lazy dog near the river bank today."))
cold("padded_token_tensors", lambda: padded_token_tensors(enc, 0, names))
cold("tokenize", lambda: fe.tokenize([text]))
cold("real_lengths", lambda: real_lengths(feeds["attention_mask"]))
cold("assign_buckets", lambda: assign_buckets([18], layout.buckets))
cold("concat_padded x3", lambda: {n: concat_padded([feeds[n]]) for n in names})
fake = lambda f: [np.zeros((1, 384), np.float32)]
cold("run_in_length_buckets fake", lambda: run_in_length_buckets(fake, feeds, "attention_mask", layout.buckets))
cold("execute_batch fake", lambda: execute_batch(fake, layout, tok))
