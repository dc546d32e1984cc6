"""Run from the repository root against `python -m serving serve`: N fixed-count perf_analyzer runs
(Poisson 40 req/s, priority 1, 10 warm-up + 40 requests, 12 s limit) through perf_sweep.runner.run_level;
prints the runs that were killed or failed. Throwaway probe, kept as run."""
import sys, time
from pathlib import Path
sys.path.insert(0, "scripts")
from perf_sweep.plan import SweepSpec, Measurement, LoadMode, RequestParameter, find_perf_analyzer, perf_analyzer_environment
from perf_sweep.runner import RunFolder, run_level
data = "/tmp/digits.json"  # 64 test-split digit images as perf_analyzer input data (what test_perf_sweep.py writes)
m = Measurement(interval_ms=500, stability_percentage=100, max_trials=3, warmup_requests=10)
binary, env = find_perf_analyzer(), perf_analyzer_environment()
n = int(sys.argv[1])
for i in range(n):
    spec = SweepSpec(name=f"loop{i}", model="digit_classifier", url="127.0.0.1:8001", levels=(40,), mode=LoadMode.REQUEST_RATE,
                     input_data=data, measurement=m, metrics_url="http://127.0.0.1:8002/metrics",
                     request_parameters=(RequestParameter("priority", "1"),))
    t = time.monotonic()
    rec, _ = run_level(spec, 40, RunFolder(Path("/tmp/hang/paloop")), binary, env, request_count=40, timeout=12)
    if "killed" in rec.note or rec.status == "failed":
        print(i, rec.status, rec.note, flush=True)
print("done", n, flush=True)
