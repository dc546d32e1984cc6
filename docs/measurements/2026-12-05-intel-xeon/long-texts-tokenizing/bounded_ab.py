"""A long text's tokens for the 128 the model reads: the text front-end before 59b610b (a start cut at
a space only) against now (a start cut anywhere when its kept tokens are whole words), on the served
tokenizer. Per text: seconds to the tokens (median of 3), peak RSS growth, and whether the tokens equal
a full tokenization's. Run from the repository root: .venv/bin/python <this file> (one process per
variant, so the peaks do not mix)."""
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
TOKENIZER = ROOT / "model_repository" / "text_embedder" / "1" / "tokenizer.json"
TEXTS = {
    "CJK, 1M characters": "中文字符" * 250_000,
    "'a,' x 500k (1M characters)": "a," * 500_000,
    "Japanese sentences, 1M characters": "日本語のテキストです。" * 90_910,
    "English words, 1M characters": "The quick brown fox jumps over the lazy dog. " * 22_223,
}


def measure(variant: str) -> dict:
    if variant == "before":
        source = subprocess.run(["git", "show", "59b610b~1:scripts/serving/backend/text_frontend.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
        path = Path("/tmp/text_frontend_before.py")
        path.write_text(source)
        sys.path.insert(0, "/tmp")
        sys.path.insert(1, str(ROOT / "scripts"))
        from text_frontend_before import TextFrontEnd
    else:
        sys.path.insert(0, str(ROOT / "scripts"))
        from serving.backend.text_frontend import TextFrontEnd
    frontend = TextFrontEnd(str(TOKENIZER), 128, 0, ["input_ids", "attention_mask"])
    results = {}
    for name, text in TEXTS.items():
        before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        for _ in range(3):
            started = time.perf_counter()
            ids = frontend.encodings([text])[0].ids
            times.append(time.perf_counter() - started)
        results[name] = {"s": round(statistics.median(times), 4),
                         "peak_rss_growth_mb": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb) / 1024, 1),
                         "same_tokens_as_full": ids == frontend.tokenizer.encode(text).ids}
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(measure(sys.argv[1])))
    else:
        for variant in ("before", "now"):
            out = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True, check=True).stdout
            for name, row in json.loads(out.splitlines()[-1]).items():
                print(f"{variant:6s} {name:36s} {row['s']:8.4f} s  peak RSS +{row['peak_rss_growth_mb']:7.1f} MB  "
                      f"same tokens as a full tokenization: {row['same_tokens_as_full']}")
