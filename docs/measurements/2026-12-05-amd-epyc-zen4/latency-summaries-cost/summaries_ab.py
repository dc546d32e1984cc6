"""What Triton's latency summaries cost a served model under sustained load, as an interleaved A/B.

Each run is a fresh tritonserver (the tests' start_test_server: the project's settings) serving
MODEL from model_repository/, then SECONDS of sequential one-image JSON requests over one kept-alive
http.client connection pinned to CPU 1; P50/P99 and requests per 10-s window. The variants differ
only in `--metrics-config` (ServerSettings.latency_summary_quantiles) and alternate run by run, ROUNDS
times, so a slow spell of the shared host lands on all of them.

    .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/latency-summaries-cost/summaries_ab.py \
        digit_classifier 60 3
"""
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]
from conftest import start_test_server  # noqa: E402
import http.client  # noqa: E402

#: (quantile, error) pairs. Triton 2.51's own set (triton core's metric_model_reporter.h: what
#: `summary_latencies=true` alone gives), the served one, and none.
TRITON_DEFAULT = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
VARIANTS = {
    "summaries, Triton's own quantiles": {"latency_summary_quantiles": TRITON_DEFAULT},
    "summaries, served quantiles": {"latency_summary_quantiles": ((0.5, 0.05), (0.9, 0.01), (0.95, 0.005), (0.99, 0.001))},
    "no summaries (counters only)": {"latency_summary_quantiles": ()},
}


def sequential_requests(server, model: str, seconds: float) -> np.ndarray:
    """(seconds since start, latency ms) of one-image JSON requests sent one after another for
    `seconds` over one kept-alive connection, from CPU 1 (the caller's affinity is restored)."""
    os.sched_setaffinity(0, {1})
    try:
        host, port = server.http_url.split(":")
        connection = http.client.HTTPConnection(host, int(port))
        body = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32",
                                       "data": np.random.default_rng(1).random(64).round(3).tolist()}]})
        rows, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            sent = time.perf_counter()
            connection.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200, response.status
            rows.append((sent - start, (time.perf_counter() - sent) * 1000))
        return np.array(rows)
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count())))


def published_quantiles(server) -> list[str]:
    metrics = urllib.request.urlopen(server.metrics_url).read().decode()
    return sorted({line.split('quantile="')[1].split('"')[0] for line in metrics.splitlines()
                   if line.startswith("nv_inference_request_summary_us{") and 'quantile="' in line})


def one_run(model: str, seconds: float, settings: dict) -> np.ndarray:
    server = start_test_server(Path(tempfile.mkdtemp()), (model,), **settings)
    try:
        rows = sequential_requests(server, model, seconds)
        print(f"   quantiles published: {published_quantiles(server) or 'none'}", flush=True)
        return rows
    finally:
        server.process.stop()


def main() -> None:
    model, seconds, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    print(f"model {model}, {seconds:.0f} s per run, {rounds} rounds; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    summary: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    for round_index in range(rounds):
        for name, settings in VARIANTS.items():
            rows = one_run(model, seconds, settings)
            windows = []
            for left in range(0, int(seconds), 10):
                inside = rows[(rows[:, 0] >= left) & (rows[:, 0] < left + 10), 1]
                windows.append(f"{np.percentile(inside, 99):.2f}")
            late = rows[rows[:, 0] >= seconds / 2, 1]
            late_rate = len(late) / (seconds / 2)
            summary[name].append((np.median(late), np.percentile(late, 99), late_rate))
            print(f"round {round_index} {name:32s} P99 per 10 s: {' '.join(windows)} ms; second half: "
                  f"P50 {np.median(late):.2f} P99 {np.percentile(late, 99):.2f} ms, {late_rate:,.0f} req/s", flush=True)
    print("second half of each run (after the summaries' 60-s window has filled half way), over the rounds:")
    for name, values in summary.items():
        p50s, p99s, rates = zip(*values)
        print(f"  {name:32s} P50 {min(p50s):.2f}-{max(p50s):.2f} ms  P99 {min(p99s):.2f}-{max(p99s):.2f} ms  "
              f"{min(rates):,.0f}-{max(rates):,.0f} req/s")


if __name__ == "__main__":
    main()
