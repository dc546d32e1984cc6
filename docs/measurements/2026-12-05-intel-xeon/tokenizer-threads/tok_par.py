import json, os, random, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file("model_repository/text_embedder/1/tokenizer.json"); tok.enable_truncation(128)
texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"]
random.seed(0); random.shuffle(texts)
for bs in (2, 4, 8, 16):
    batches = [texts[i:i+bs] for i in range(0, 640, bs)]
    tok.encode_batch(batches[0])
    w, c = time.perf_counter(), time.process_time()
    for b in batches: tok.encode_batch(b)
    w, c = time.perf_counter() - w, time.process_time() - c
    print(f"TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM','(unset)')} batch {bs:2d}: wall {1e6*w/640:.1f} us/text, process CPU {1e6*c/640:.1f} us/text")
