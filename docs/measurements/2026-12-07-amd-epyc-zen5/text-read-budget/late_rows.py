import time, numpy as np
from contracts.layout import MODEL_REPOSITORY
from serving.backend.text_frontend import TextFrontEnd
f = TextFrontEnd(str(MODEL_REPOSITORY / "text_embedder" / "1" / "tokenizer.json"), max_length=128, pad_id=0, output_names=["input_ids"])
late = (" " * 16_385 + "中" * (262_144 - 16_385)).encode()
for name, row in (("late CJK", late), ("hangul", ("한" * 262_144).encode()), ("x-word", ("x" * 262_144).encode()), ("spaces+word", (" " * 262_000 + "hello").encode())):
    rows = np.array([[row]] * 32, dtype=object)
    t = time.perf_counter(); r = f.tokenize([rows]); el = time.perf_counter() - t
    print(f"32 rows {name}: {el:.2f} s; {(r.problems[0] or 'answered')[:60]}")
