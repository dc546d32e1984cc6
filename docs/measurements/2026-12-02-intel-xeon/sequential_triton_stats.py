"""Sequential c=1 probe: POST one text per request, time it; Triton stats deltas for a model."""
import http.client, json, sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
from perf_sweep.peers.codec import kserve_body
port, kind, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"][:300]
conn = http.client.HTTPConnection("127.0.0.1", port)
def stats():
    conn.request("GET", "/v2/models/text_embedder/stats"); s = json.loads(conn.getresponse().read())
    st = s["model_stats"][0]["inference_stats"]
    return {k: (v["count"], v["ns"]) for k, v in st.items()}
path, bodies = "/v2/models/text_embedder/infer", [kserve_body("TEXT", "BYTES", [1, 1], [t]) for t in texts]
if kind == "triton":
    before = stats()
lat = []
for i in range(n):
    b = bodies[i % len(bodies)]
    t0 = time.perf_counter()
    conn.request("POST", path, body=b, headers={"Content-Type": "application/json"})
    r = conn.getresponse(); r.read()
    lat.append(time.perf_counter() - t0)
    assert r.status == 200, r.status
lat.sort()
print(f"{kind}: n={n} p50 {1e3*lat[n//2]:.2f} ms mean {1e3*statistics.mean(lat):.2f} ms")
if kind == "triton":
    after = stats()
    for k in after:
        c = after[k][0] - before[k][0]
        if c: print(f"  {k}: {(after[k][1]-before[k][1])/c/1e3:.0f} us x {c}")
