"""Throwaway probe (kept as run; output in README.txt): the first seconds of a fresh `serving serve` at text
c=1, in 1-second windows: texts/s, calls per session and reason, and after each window the session choice's
medians per size class (serving_session_choice_median_seconds) of instance 0. Usage:
    python early_life_probe.py HTTP_PORT METRICS_PORT WINDOWS"""
import sys
from collections import Counter
sys.path.insert(0, "/work/main/scripts")
from perf_sweep import http_load
import numpy as np
from contracts.onnx_sessions import served_session
from perf_sweep.peers.codec import Api, AnswerCheck, Workload, text_bodies
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep.runner import scrape_metrics
from lone_texts import MODEL, HELDOUT, lone_feeds

port, metrics_port, windows = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
metrics = f"http://127.0.0.1:{metrics_port}/metrics"
texts = HELDOUT[:300]
reference_session = served_session(MODEL, 1)  # answers checked against the served file in-process, as server_probe.py
reference = np.concatenate([reference_session.run(None, f)[0] for f in lone_feeds(reference_session, texts)])
check = AnswerCheck(ModelKind.TEXT, Api.KSERVE_V2, "embedding", reference.shape[1], reference=reference)
workload = Workload("probe", ModelKind.TEXT, f"http://127.0.0.1:{port}/v2/models/text_embedder/infer",
                    text_bodies(texts, Api.KSERVE_V2), check)


def calls(scrape):
    out = Counter()
    for key, value in scrape.items():
        name, labels = key[0], dict(key[1])
        if name == "serving_framework_calls_total" and labels.get("model") == "text_embedder":
            out[f"{labels['session']}:{labels['reason']}"] += value
    return out


def medians(scrape):
    rows = {}
    for key, value in scrape.items():
        name, labels = key[0], dict(key[1])
        if name == "serving_session_choice_median_seconds" and labels.get("model") == "text_embedder" \
                and labels.get("model_instance") == "0":
            rows.setdefault(labels["size_class"], {})[labels["session"]] = round(value * 1e3, 2)
    return rows


before = scrape_metrics(metrics)
for w in range(windows):
    run = http_load.run_level(workload, LoadLevel(LoadMode.CLOSED, 1.0, 0.0, 1.0), 10.0)
    after = scrape_metrics(metrics)
    delta = {k: v - calls(before).get(k, 0) for k, v in calls(after).items() if v - calls(before).get(k, 0)}
    print(f"window {w}: {len(run.records)} texts; calls {dict(sorted(delta.items()))}; medians ms {medians(after)}", flush=True)
    before = after
