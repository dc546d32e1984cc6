"""Throwaway probe, kept as it was run: N sequential requests on one keep-alive connection to
`serving serve` (port 8000) and the per-request average of each of Triton's stages for MODEL.
Usage: python stage_split.py MODEL N"""
import http.client, json, sys, time
import numpy as np
model, n = sys.argv[1], int(sys.argv[2])
def stats(c):
    c.request("GET", f"/v2/models/{model}/stats"); s = json.loads(c.getresponse().read())["model_stats"][0]["inference_stats"]
    return {k: (v["count"], v["ns"]) for k, v in s.items()}
c = http.client.HTTPConnection("127.0.0.1", 8000)
if model.startswith("digit"):
    body = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.5] * 64}]})
else:
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["A quick brown fox jumps over the lazy dog near the river bank today."]}]})
for _ in range(200):
    c.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"}); c.getresponse().read()
before = stats(c); lat = []
for _ in range(n):
    t = time.perf_counter(); c.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"}); c.getresponse().read(); lat.append(time.perf_counter() - t)
after = stats(c)
print(f"{model}: client p50 {np.median(lat)*1e3:.3f} ms, mean {np.mean(lat)*1e3:.3f} ms")
for k in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
    dc = after[k][0] - before[k][0]; dn = after[k][1] - before[k][1]
    print(f"  {k:15s} {dn/dc/1e3:8.1f} us  (n={dc})")
