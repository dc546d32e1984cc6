"""c=1 text probe: keep-alive HTTP loop at the served text_embedder; every 5 s print throughput,
per-reason call deltas and the session-choice medians per instance."""
import http.client, json, re, sys, time, urllib.request
port, mport, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"]
bodies = [json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [t]}]}).encode() for t in texts]
def scrape():
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    calls = {}
    med = {}
    for line in text.splitlines():
        if line.startswith("serving_framework_calls_total") and 'model="text_embedder"' in line:
            s = re.search(r'session="(\w+)"', line).group(1); r = re.search(r'reason="(\w+)"', line).group(1)
            calls[(s, r)] = float(line.rsplit(" ", 1)[1])
        if line.startswith("serving_session_choice_median_seconds") and 'text_embedder' in line:
            i = re.search(r'model_instance="([^"]+)"', line).group(1); s = re.search(r'session="(\w+)"', line).group(1)
            c = re.search(r'size_class="([^"]+)"', line).group(1)
            med[(i[-3:], c, s)] = float(line.rsplit(" ", 1)[1]) * 1000
    return calls, med
conn = http.client.HTTPConnection("127.0.0.1", port)
k = 0
t_end = time.monotonic() + seconds
prev, _ = scrape()
while time.monotonic() < t_end:
    t0 = time.monotonic(); n = 0
    while time.monotonic() - t0 < 5:
        conn.request("POST", "/v2/models/text_embedder/infer", bodies[k % len(bodies)], {"Content-Type": "application/json"})
        r = conn.getresponse(); r.read(); assert r.status == 200
        k += 1; n += 1
    calls, med = scrape()
    d = {f"{s}/{r}": int(calls[(s, r)] - prev.get((s, r), 0)) for (s, r) in calls if calls[(s, r)] - prev.get((s, r), 0)}
    prev = calls
    print(f"{time.strftime('%H:%M:%S')} {n/5:.0f}/s {d}")
    print("   ", {f"{i} {c} {s}": round(v, 2) for (i, c, s), v in sorted(med.items())})
