import os, sys, time, json, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]
import numpy as np
from conftest import start_test_server
import tritonclient.http as http
model = sys.argv[1]; repo = Path(sys.argv[2]); dur = float(sys.argv[3])
server = start_test_server(Path(tempfile.mkdtemp()), (model,), repository=repo)
os.sched_setaffinity(0, {1})
c = http.InferenceServerClient(server.http_url)
t = http.InferInput("image", [1, 1, 8, 8], "FP32"); t.set_data_from_numpy(np.random.default_rng(1).random((1, 1, 8, 8), dtype=np.float32))
import http.client as hcl
host, port = server.http_url.split(":")
hc = hcl.HTTPConnection(host, int(port))
body = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": np.random.default_rng(1).random(64).round(3).tolist()}]})
rows = []; t0 = time.perf_counter()
pause = [float(x) for x in os.environ.get("PAUSE", "").split(",") if x]  # start,length
while time.perf_counter() - t0 < dur:
    now = time.perf_counter() - t0
    if pause and pause[0] <= now < pause[0] + pause[1]:
        time.sleep(0.05); continue
    s = time.perf_counter()
    if os.environ.get("RAW"):
        hc.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"}); r = hc.getresponse(); r.read(); assert r.status == 200
    else:
        c.infer(model, [t])
    rows.append((s - t0, (time.perf_counter() - s) * 1000))
server.process.stop()
rows = np.array(rows)
for a in range(0, int(dur), 10):
    m = (rows[:, 0] >= a) & (rows[:, 0] < a + 10)
    if not m.any(): continue
    print(f"{a:3d}-{a+10}s n {m.sum()} P50 {np.median(rows[m,1]):.2f} P99 {np.percentile(rows[m,1],99):.2f} slow>1.2ms {(rows[m,1]>1.2).sum()}", flush=True)
