"""The tail-drift probe of ../python-backend-tail-drift/echo_drift.py with the server's settings
from the environment: SETTINGS='{"latency_summary_quantiles": []}' (JSON; keys of
serving.runtime.server.ServerSettings; lists become tuples). Sequential one-image JSON requests over
one http.client connection from CPU 1 for SECONDS (summaries_ab.sequential_requests); the
request-summary quantiles the server published; P50/P99 per 10 s.

    SETTINGS='{"latency_summary_quantiles": []}' .venv/bin/python \
        docs/measurements/2026-12-05-amd-epyc-zen4/latency-summaries-cost/echo_settings_drift.py \
        echo docs/measurements/2026-12-05-amd-epyc-zen4/python-backend-tail-drift/echo_repo 70
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from summaries_ab import published_quantiles, sequential_requests, start_test_server  # noqa: E402

model, repository, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
settings = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
            for k, v in json.loads(os.environ.get("SETTINGS", "{}")).items()}
server = start_test_server(Path(tempfile.mkdtemp()), (model,), repository=repository, **settings)
try:
    rows = sequential_requests(server, model, seconds)
    print(f"quantiles published: {published_quantiles(server) or 'none'}")
finally:
    server.process.stop()
for left in range(0, int(seconds), 10):
    inside = rows[(rows[:, 0] >= left) & (rows[:, 0] < left + 10), 1]
    print(f"{left:3d}-{left + 10}s n {len(inside)} P50 {np.median(inside):.2f} P99 {np.percentile(inside, 99):.2f}", flush=True)
