# Run from /work/main with .venv/bin/python. Cold = right after an ONNX Runtime call of the served text encoder.
import sys, time, statistics, json, numpy as np
sys.path.insert(0, "scripts")
from serving.backend.text_frontend import TextFrontEnd, decode_texts
from contracts.token_padding import padded_token_tensors
from contracts.onnx_sessions import served_session
d = "model_repository/text_embedder/1/"
w = served_session(d + "model.onnx", 1)
names = [i.name for i in w.get_inputs()]; outn = [o.name for o in w.get_outputs()]
fe = TextFrontEnd(d + "tokenizer.json", 128, 0, names)
corpus = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"][:4]
arrays = [np.array([[t.encode()]], dtype=object) for t in corpus]
feeds = fe.tokenize(arrays[:1]).tensors[0]
def cold(label, f, n=800):
    ts = []
    for _ in range(n):
        w.run(outn, feeds); a = time.perf_counter(); f(); ts.append((time.perf_counter() - a) * 1e6)
    print(f"{label:34s} cold {statistics.median(ts):7.1f} us")
texts = [decode_texts(a)[0] for a in arrays]
encs = fe.encodings(texts)
cold("tokenize 4 requests", lambda: fe.tokenize(arrays))
cold("decode_texts x4", lambda: [decode_texts(a) for a in arrays])
cold("bounded x4", lambda: [fe.bounded(t) for t in texts])
cold("encode_batch 4", lambda: fe.tokenizer.encode_batch(texts))
cold("padded_token_tensors x4", lambda: [padded_token_tensors(encs[i:i+1], 0, names) for i in range(4)])
cold("tokenize 1 request", lambda: fe.tokenize(arrays[:1]))
cold("encode_batch_fast 4", lambda: fe.tokenizer.encode_batch_fast(texts))
cold("encode_batch_fast 1", lambda: fe.tokenizer.encode_batch_fast(texts[:1]))
cold("encode_batch 1", lambda: fe.tokenizer.encode_batch(texts[:1]))
a = fe.tokenizer.encode_batch(texts); b = fe.tokenizer.encode_batch_fast(texts)
print(all(x.ids == y.ids and x.type_ids == y.type_ids and x.attention_mask == y.attention_mask for x, y in zip(a, b)))
corpus = json.load(open("artifacts/text_encoder/text_corpus.json"))
allt = corpus["heldout"] + corpus.get("train", [])
print(len(allt), all(x.ids == y.ids for x, y in zip(fe.tokenizer.encode_batch(allt), fe.tokenizer.encode_batch_fast(allt))))
import time
for f in (fe.tokenizer.encode_batch, fe.tokenizer.encode_batch_fast):
    t=time.perf_counter(); [f([x]) for x in allt[:1000]]; print(f.__name__, (time.perf_counter()-t)/1000*1e6, "us/text warm")
