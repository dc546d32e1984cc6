"""perf_analyzer 2.51's warm-up deadlock, reproduced, and the sweep runner's handling of it.

The integration test's Poisson level (tests/integration/test_perf_sweep.py: digit classifier, 40 req/s,
priority 1, 10 warm-up requests) never stabilises in its short windows, so it always falls back to
a fixed count of 100 requests. This runs that fixed-count level N times against a real tritonserver:
- `bare`: perf_analyzer itself, killed after 20 s; on a hang, Triton's counts and gdb's stacks of
  perf_analyzer go to hang<i>.txt here (run 49's stacks are tests/unit/perf_sweep/perf_analyzer_warmup_hang.gdb.txt);
- `runner`: `perf_sweep.runner.run_level` (20 s limit), printing the note of any level whose
  run was killed (measured again or not).
Usage (repo root): .venv/bin/python docs/measurements/2026-12-05-intel-xeon/perf-analyzer-2.51/hang_loop.py bare|runner N
"""
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

import numpy as np  # noqa: E402
from conftest import ARTIFACTS, start_test_server  # noqa: E402
from perf_sweep import inputs as gen  # noqa: E402
from perf_sweep.plan import (LoadMode, Measurement, RequestParameter, SweepSpec,  # noqa: E402
                             find_perf_analyzer, perf_analyzer_environment, render_perf_analyzer_command)
from perf_sweep.results import metric_sum, server_metrics_delta  # noqa: E402
from perf_sweep.runner import RunFolder, run_level, scrape_metrics, thread_stacks  # noqa: E402

COUNT, LIMIT_S = 100, 20
#: tests/integration/test_perf_sweep.py's QUICK
TEST_MEASUREMENT = Measurement(interval_ms=500, stability_percentage=100, max_trials=3, warmup_requests=10)


def bare(sweep, binary, env, work, i):
    argv = render_perf_analyzer_command(sweep, 40, work / f"l{i}.csv", None, binary, COUNT)
    before = scrape_metrics(sweep.metrics_url)
    proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=LIMIT_S)
        last = out.strip().splitlines()[-1][:150] if out.strip() else ""
        return f"rc {proc.returncode} {time.monotonic() - started:.1f}s {last}", False
    except subprocess.TimeoutExpired:
        now = scrape_metrics(sweep.metrics_url)
        delta = server_metrics_delta(before, now, sweep.model)
        stacks = thread_stacks(proc.pid)
        proc.kill()
        out, _ = proc.communicate()
        pending = metric_sum(now, "nv_inference_pending_request_count", model=sweep.model)
        (HERE / f"hang{i}.txt").write_text(f"answered {delta.requests_succeeded} failed {delta.requests_failed} "
                                           f"pending {pending}\n{out}\n{stacks}")
        return f"HANG answered {delta.requests_succeeded}", True


def runner(sweep, binary, env, work, i):
    record, _ = run_level(sweep, 40, RunFolder(work / f"run{i}"), binary, env, request_count=COUNT,
                          timeout=LIMIT_S, fixed_reason="the test's fallback")
    killed = "perf_analyzer killed" in record.note or "measured again" in record.note
    return f"{record.status} {record.throughput:.1f} infer/s, {record.requests} requests" + (
        f" | {record.note}" if killed else ""), killed


def served_digits(work: Path, measurement: Measurement = TEST_MEASUREMENT):
    """A real tritonserver serving the digit classifier, the test's input file and the test's Poisson sweep."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = start_test_server(work / "triton", ("digit_classifier",))
    with np.load(ARTIFACTS / "digit_classifier" / "test_split.npz") as data:
        images = data["images"]
    input_file = gen.write_input_data(work / "digits.json",
                                      gen.image_input_data(gen.sample_digit_images(images, 64, seed=0), "image"))
    sweep = SweepSpec(name="poisson", levels=(40,), mode=LoadMode.REQUEST_RATE,
                      request_parameters=(RequestParameter("priority", "1"),), model="digit_classifier",
                      url=server.grpc_url, input_data=str(input_file), metrics_url=server.metrics_url,
                      measurement=measurement)
    return server, sweep


def main(mode: str, runs: int) -> None:
    work = Path(f"/tmp/perf-analyzer-hang-{mode}")
    server, sweep = served_digits(work)
    binary, env = find_perf_analyzer(), perf_analyzer_environment()
    once = {"bare": bare, "runner": runner}[mode]
    hung = 0
    try:
        for i in range(runs):
            line, killed = once(sweep, binary, env, work, i)
            hung += killed
            print(f"run {i}: {line}", flush=True)
    finally:
        server.process.stop()
    print(f"{mode}: {hung} of {runs} runs hung")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
