"""How perf_analyzer 2.51 rates a fixed-count run (`--request-count`): its figure against the
answers' own timestamps in its profile export (perf_sweep.results.fixed_count_throughput).

Against a real tritonserver serving the digit classifier (hang_loop.served_digits): Poisson at 40
req/s with 100 and 200 requests, concurrency 4 with 300. Usage (repo root):
    .venv/bin/python docs/measurements/2026-12-05-intel-xeon/perf-analyzer-2.51/fixed_count_window.py
"""
import dataclasses
import json
import subprocess
from pathlib import Path

from hang_loop import served_digits
from perf_sweep.plan import LoadMode, find_perf_analyzer, perf_analyzer_environment, render_perf_analyzer_command
from perf_sweep.results import fixed_count_throughput, parse_perf_csv

work = Path("/tmp/perf-analyzer-fixed-count")
server, poisson = served_digits(work)
binary, env = find_perf_analyzer(), perf_analyzer_environment()
closed = dataclasses.replace(poisson, name="closed", mode=LoadMode.CONCURRENCY, levels=(4,), request_parameters=())
try:
    for sweep, count in ((poisson, 100), (poisson, 200), (closed, 300)):
        level = sweep.levels[0]
        csv, export_path = work / f"{sweep.name}_{count}.csv", work / f"{sweep.name}_{count}.json"
        argv = render_perf_analyzer_command(sweep, level, csv, export_path, binary, count)
        subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=120, check=True)
        export = json.loads(export_path.read_text())
        experiment = export["experiments"][0]
        sends = [r["timestamp"] for r in experiment["requests"]]
        answers = [r["response_timestamps"][-1] for r in experiment["requests"] if r["response_timestamps"]]
        window = experiment["window_boundaries"]
        print(f"{sweep.mode.value} {level:g}, {count} requests: perf_analyzer {parse_perf_csv(csv.read_text())[-1].throughput:.1f} "
              f"infer/s over its window of {(window[-1] - window[0]) / 1e9:.3f} s; {len(answers)} answered within "
              f"{(max(answers) - min(sends)) / 1e9:.3f} s of the first send: {fixed_count_throughput(export):.1f} infer/s",
              flush=True)
finally:
    server.process.stop()
