"""In-process time per call of INT8 text encoder graphs (served session options, held-out texts,
interleaved medians of 9 rounds x 40 calls; first graph = 1.000). Usage, after threshold_sweep.py:
    .venv/bin/python docs/measurements/2026-12-05-intel-xeon/outlier-smoothing/speed.py NAME=PATH ..."""
import sys
sys.path.insert(0, "/work/main/docs/measurements/2026-12-05-intel-xeon/skip-layer-norm"); sys.path.insert(0, "/work/main/scripts")
from in_process_ab import feeds, mk, interleaved_medians, HELDOUT
from contracts.onnx_sessions import disabled_fusions

dis = disabled_fusions(["CPUExecutionProvider"])
paths = dict(a.split("=") for a in sys.argv[1:])
texts = HELDOUT[:64]
for threads, spin in [(1, False), (2, True)]:
    sessions = {k: mk(p, threads, spin, dis) for k, p in paths.items()}
    for name, f in [("1 text", feeds(texts[:1])), ("8 texts", feeds(texts[:8])), ("32 texts", feeds(texts[:32]))]:
        t = interleaved_medians(sessions, f, rounds=9)
        base = next(iter(t.values()))
        print(f"threads={threads} {name} {f['input_ids'].shape}: " + ", ".join(f"{k} {v:.3f} ms ({v/base:.3f})" for k, v in t.items()), flush=True)
