import os, sys, time, json, subprocess, http.client
import numpy as np
from pathlib import Path
ROOT = Path(__file__).resolve().parents[4]
port = 59877
p = subprocess.Popen(["taskset", "-c", "0", str(ROOT / ".venv/peers/bin/python"), str(ROOT / "scripts/perf_sweep/peers/apps/minimal_server.py"), "--port", str(port), "--threads", "1",
                      "--digits-onnx", str(ROOT / "model_repository/digit_classifier/1/model.onnx"), "--text-onnx", str(ROOT / "model_repository/text_embedder/1/model.onnx"),
                      "--tokenizer", str(ROOT / "model_repository/text_embedder/1/tokenizer.json"), "--max-length", "128"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.sched_setaffinity(0, {1})
for _ in range(100):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port); c.request("GET", "/v2/health/ready"); c.getresponse().read(); break
    except OSError: time.sleep(0.2)
body = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": np.random.default_rng(1).random(64).round(3).tolist()}]})
dur = float(sys.argv[1]); rows = []; t0 = time.perf_counter()
while time.perf_counter() - t0 < dur:
    s = time.perf_counter(); c.request("POST", "/v2/models/digit_classifier/infer", body, {"Content-Type": "application/json"}); c.getresponse().read(); rows.append((s - t0, (time.perf_counter() - s) * 1000))
p.kill()
rows = np.array(rows)
for a in range(0, int(dur), 10):
    m = (rows[:, 0] >= a) & (rows[:, 0] < a + 10)
    print(f"{a:3d}-{a+10}s n {m.sum()} P50 {np.median(rows[m,1]):.2f} P99 {np.percentile(rows[m,1],99):.2f} slow>1.2ms {(rows[m,1]>1.2).sum()}", flush=True)
