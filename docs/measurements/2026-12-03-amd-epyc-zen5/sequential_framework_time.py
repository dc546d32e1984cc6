import sys, re, urllib.request, subprocess
port, mport = sys.argv[1], sys.argv[2]
def fw():
    t = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    g = lambda n: sum(float(m) for m in re.findall(rf'^{n}{{model="text_embedder"[^}}]*}} (\S+)', t, re.M))
    return g("serving_batch_framework_seconds_sum"), g("serving_batch_framework_seconds_count"), g("serving_batch_overhead_seconds_sum")
import time
b = fw()
out = subprocess.run([sys.executable, "/work/main/docs/measurements/2026-12-02-intel-xeon/sequential_triton_stats.py", port, "triton", "600"], capture_output=True, text=True).stdout
time.sleep(2.5)
a = fw()
n = a[1]-b[1]
print(port, out.splitlines()[0], "| framework %.3f ms overhead %.3f ms per batch (n=%d)" % (1e3*(a[0]-b[0])/n, 1e3*(a[2]-b[2])/n, n), "|", " ".join(l.strip() for l in out.splitlines()[1:] if "infer" in l))
