"""Sweep dataclasses and the perf_analyzer argv they render."""
from pathlib import Path

import pytest

from conftest import PERF_ANALYZER_STILL_SENDING, PERF_ANALYZER_WARMUP_HANG
from perf_sweep.errors import SweepPlanError
from perf_sweep.plan import (
    LoadWorkers,
    LoadMode,
    Measurement,
    RequestParameter,
    SweepSpec,
    concurrency_levels,
    fixed_count_timeout_s,
    fixed_request_count,
    hung_in_perf_analyzer,
    load_workers,
    perf_analyzer_environment,
    render_perf_analyzer_command,
    request_rate_levels,
)
from perf_sweep.plan import level_timeout_s


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_concurrency_sweep_renders_warmup_stability_csv_and_export():
    sweep = SweepSpec(name="m.concurrency", model="m", url="127.0.0.1:9001", levels=(1, 2, 4), input_data="in.json",
                      measurement=Measurement(interval_ms=1500, stability_percentage=15, max_trials=5, warmup_requests=40))
    argv = render_perf_analyzer_command(sweep, 2, Path("o.csv"), Path("o.json"), "/venv/bin/perf_analyzer")
    assert argv[0] == "/venv/bin/perf_analyzer"
    assert flag(argv, "-m") == "m" and flag(argv, "-u") == "127.0.0.1:9001" and flag(argv, "-i") == "grpc"
    assert flag(argv, "--concurrency-range") == "2"
    assert flag(argv, "--warmup-request-count") == "40"
    assert flag(argv, "--measurement-interval") == "1500" and flag(argv, "--stability-percentage") == "15"
    assert flag(argv, "--max-trials") == "5" and flag(argv, "--input-data") == "in.json"
    assert flag(argv, "-f") == "o.csv" and "--verbose-csv" in argv and flag(argv, "--profile-export-file") == "o.json"
    assert "--request-rate-range" not in argv and "--request-count" not in argv


def test_a_concurrency_above_the_warmup_count_warms_up_one_request_per_worker():
    """perf_analyzer 2.51 never leaves a warm-up of fewer requests than its concurrency: the sweep's
    c=32 after a warm-up of 20 (--quick) hung and was reported FAILED (a review, 2026-12-07)."""
    sweep = SweepSpec(name="m.concurrency", model="m", url="u:1", levels=(16, 64),
                      measurement=Measurement(warmup_requests=50))
    assert flag(render_perf_analyzer_command(sweep, 16, Path("o.csv")), "--warmup-request-count") == "50"
    assert flag(render_perf_analyzer_command(sweep, 64, Path("o.csv")), "--warmup-request-count") == "64"
    rates = SweepSpec(name="m.poisson", model="m", url="u:1", levels=(500.0,), mode=LoadMode.REQUEST_RATE,
                      measurement=Measurement(warmup_requests=50))
    assert flag(render_perf_analyzer_command(rates, 500.0, Path("o.csv")), "--warmup-request-count") == "50"


def test_request_rate_sweep_is_poisson_async_with_priority_parameter():
    sweep = SweepSpec(name="m.poisson", model="m", url="u:1", levels=(12.5, 50), mode=LoadMode.REQUEST_RATE,
                      request_parameters=(RequestParameter("priority", "1"),))
    argv = render_perf_analyzer_command(sweep, 12.5, Path("o.csv"), request_count=100)
    assert flag(argv, "--request-rate-range") == "12.5"
    assert flag(argv, "--request-distribution") == "poisson" and "--async" in argv
    assert flag(argv, "--request-parameter") == "priority:1:int"
    assert flag(argv, "--request-count") == "100"
    assert "--concurrency-range" not in argv


def test_sweep_spec_validates_levels_protocol_and_names():
    with pytest.raises(SweepPlanError, match="strictly increasing"):
        SweepSpec(name="s", model="m", url="u", levels=(4, 2))
    with pytest.raises(SweepPlanError, match="whole number"):
        SweepSpec(name="s", model="m", url="u", levels=(1.5,))
    with pytest.raises(SweepPlanError, match="only over gRPC"):
        SweepSpec(name="s", model="m", url="u", levels=(1,), protocol="http",
                  request_parameters=(RequestParameter("priority", "1"),))
    with pytest.raises(SweepPlanError, match="names files"):
        SweepSpec(name="a/b", model="m", url="u", levels=(1,))
    with pytest.raises(ValueError):
        SweepSpec(name="s", model="m", url="u", levels=(1,), mode="bursty")
    sweep = SweepSpec(name="s", model="m", url="u", levels=(1,))
    with pytest.raises(SweepPlanError, match="not one of"):
        render_perf_analyzer_command(sweep, 3, Path("x.csv"))


def test_measurement_needs_three_windows_for_stability():
    with pytest.raises(SweepPlanError, match="max_trials"):
        Measurement(max_trials=2)


def test_level_planners():
    assert concurrency_levels(32) == (1, 2, 4, 8, 16, 32)
    assert concurrency_levels(12) == (1, 2, 4, 8, 12)
    assert request_rate_levels(400.0, (0.25, 0.5, 1.0)) == (100.0, 200.0, 400.0)
    with pytest.raises(SweepPlanError):
        request_rate_levels(0.0)


def test_perf_analyzer_environment_puts_cuda_runtime_libs_first(tmp_path):
    lib = tmp_path / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    env = perf_analyzer_environment([tmp_path], base={"LD_LIBRARY_PATH": "/other"})
    assert env["LD_LIBRARY_PATH"] == f"{lib}:/other"


def test_fixed_count_timeout_scales_with_the_requests_and_their_rate():
    assert fixed_count_timeout_s(100, 10, 40) == 30.0  # 5.5 s of requests: the 30 s floor
    assert fixed_count_timeout_s(20_000, 10, 100) == pytest.approx(2 * 20_010 / 100 + 20)
    assert fixed_count_timeout_s(100, 0, 0) > 3600  # no measured rate: effectively no limit
    with pytest.raises(SweepPlanError, match="request_count = 0"):
        fixed_count_timeout_s(0, 10, 40)


def test_a_killed_run_is_perf_analyzers_own_hang_only_if_the_server_shows_nothing_outstanding():
    # fixed count: every request it sent (100 + 10 warm-up) answered, nothing failed or queued
    assert hung_in_perf_analyzer(answered=110, failed=0, queued=0, expected=110)
    assert not hung_in_perf_analyzer(answered=109, failed=0, queued=0, expected=110)  # one unanswered
    assert not hung_in_perf_analyzer(answered=110, failed=1, queued=0, expected=110)  # one failed
    # time windows: open-ended, so the server must have answered something and hold nothing
    assert hung_in_perf_analyzer(answered=35, failed=0, queued=0, expected=None)
    assert not hung_in_perf_analyzer(answered=35, failed=0, queued=1, expected=None)  # still queued
    assert not hung_in_perf_analyzer(answered=0, failed=0, queued=0, expected=None)  # never reached the server
    # what perf_analyzer's stacks say decides before the counts: idle workers sent nothing more ...
    assert hung_in_perf_analyzer(answered=7, failed=0, queued=0, expected=110, workers=LoadWorkers.IDLE)
    assert hung_in_perf_analyzer(answered=0, failed=0, queued=0, expected=110, workers=LoadWorkers.IDLE)  # none sent
    # ... a worker still at work may wait on a request stuck in the server, whatever Triton counted ...
    assert not hung_in_perf_analyzer(answered=35, failed=0, queued=0, expected=None, workers=LoadWorkers.BUSY)
    assert not hung_in_perf_analyzer(answered=110, failed=0, queued=0, expected=110, workers=LoadWorkers.BUSY)
    # ... and a failure or a queued request keeps the level failed even with idle workers
    assert not hung_in_perf_analyzer(answered=7, failed=1, queued=0, expected=110, workers=LoadWorkers.IDLE)
    assert not hung_in_perf_analyzer(answered=7, failed=0, queued=1, expected=110, workers=LoadWorkers.IDLE)


WARMUP_HANG_STACKS = PERF_ANALYZER_WARMUP_HANG
PAUSED_WAIT = """#3  0x00007fc314ea65d8 in __pthread_cond_wait_common (abstime=0x0, clockid=0, mutex=0x556fd57036b0, cond=0x556fd5703680) at ./nptl/pthread_cond_wait.c:503
#4  ___pthread_cond_wait (cond=0x556fd5703680, mutex=0x556fd57036b0) at ./nptl/pthread_cond_wait.c:618
#5  0x0000556fac96633b in triton::perfanalyzer::RequestRateWorker::HandleExecuteOff() ()"""
WORKER_HEADER = 'Thread 8 (Thread 0x7fc311e17000 (LWP 7560) "perf_analyzer"):'


def worker_thread(number: int, *frames: str) -> str:
    """One more load-worker thread in gdb's form, innermost frame first."""
    lines = [f"#{i}  0x0000556fac96{i:04d} in {frame}() ()" for i, frame in enumerate(
        (*frames, "triton::perfanalyzer::RequestRateWorker::Infer"))]
    return f"\nThread {number} (Thread 0x7fc2 (LWP {7600 + number}) \"perf_analyzer\"):\n" + "\n".join(lines) + "\n"


def test_load_workers_are_idle_only_when_every_worker_waits_to_be_resumed_with_nothing_in_flight():
    assert PAUSED_WAIT in WARMUP_HANG_STACKS and WORKER_HEADER in WARMUP_HANG_STACKS
    assert load_workers(WARMUP_HANG_STACKS) is LoadWorkers.IDLE
    # a second worker, idle too (all three hangs of the measurement had one; a run may have more)
    idle_too = worker_thread(13, "__pthread_cond_wait_common", "___pthread_cond_wait",
                             "triton::perfanalyzer::RequestRateWorker::HandleExecuteOff")
    assert load_workers(WARMUP_HANG_STACKS + idle_too) is LoadWorkers.IDLE
    # gdb's header with several inferiors: Thread 1.8
    assert load_workers(WARMUP_HANG_STACKS.replace("\nThread ", "\nThread 1.")) is LoadWorkers.IDLE
    # the same worker still waiting out its own requests (a sleep loop, inlined or not): one may be stuck in Triton
    waiting_out = WARMUP_HANG_STACKS.replace(PAUSED_WAIT, (
        "#3  0x00007fc314eecb23 in __GI___clock_nanosleep (clock_id=0, flags=0, req=0x7fc311e16d60) at nanosleep.c:25\n"
        "#4  0x0000556fac942a10 in triton::perfanalyzer::LoadWorker::WaitForOngoingRequests() ()\n"
        "#5  0x0000556fac96633b in triton::perfanalyzer::RequestRateWorker::HandleExecuteOff() ()"))
    assert load_workers(waiting_out) is LoadWorkers.BUSY
    assert load_workers(waiting_out.replace(
        "triton::perfanalyzer::LoadWorker::WaitForOngoingRequests() ()", "std::this_thread::sleep_for() ()")) is LoadWorkers.BUSY
    # a worker waiting for a free context (its requests are all in flight)
    assert load_workers(PERF_ANALYZER_STILL_SENDING) is LoadWorkers.BUSY
    # one worker idle and one still sending: busy
    sending = worker_thread(13, "__GI___clock_nanosleep", "triton::perfanalyzer::RequestRateWorker::SleepIfNecessary")
    assert load_workers(WARMUP_HANG_STACKS + sending) is LoadWorkers.BUSY
    # what it cannot read gives no verdict, and never raises
    assert load_workers("gdb not installed") is LoadWorkers.UNKNOWN
    assert load_workers("ptrace: Operation not permitted.") is LoadWorkers.UNKNOWN
    assert load_workers(WARMUP_HANG_STACKS.replace("\nThread ", "\nLWP ")) is LoadWorkers.UNKNOWN  # no header known
    main_thread = WARMUP_HANG_STACKS[WARMUP_HANG_STACKS.index("\nThread 1 ("):]
    assert load_workers(WARMUP_HANG_STACKS.replace(main_thread, "\n")) is LoadWorkers.UNKNOWN  # no main thread
    assert load_workers("Thread 2 (LWP 1):\n  from triton::perfanalyzer::RequestRateWorker::Infer() ()\n#0 foo ()\n"
                        "Thread 1 (LWP 2):\n#0 triton::perfanalyzer::LoadManager::WaitForWarmupAndCleanup() ()\n"
                        ) is LoadWorkers.UNKNOWN  # a worker frame not on a frame line
    assert load_workers("Thread 2 (LWP 1):\n#0 ?? ()\n#1 triton::perfanalyzer::RequestRateWorker::Infer() ()\n"
                        "Thread 1 (LWP 2):\n#0 triton::perfanalyzer::LoadManager::WaitForWarmupAndCleanup() ()\n"
                        ) is LoadWorkers.BUSY  # no perf_analyzer frame before the loop: not known idle


def test_a_fixed_count_is_three_windows_at_the_rate_within_100_and_20000():
    assert fixed_request_count(40, 500) == 100  # 60 requests: the floor
    assert fixed_request_count(1_000, 1_500) == 4_500
    assert fixed_request_count(10_000, 1_500) == 20_000  # the cap


def test_a_levels_limit_follows_its_fixed_count_at_a_rate_and_its_windows_otherwise():
    m = Measurement(interval_ms=1500, stability_percentage=15, max_trials=5, warmup_requests=40)
    windows = (5 + 2) * 1.5 * 2 + 30
    assert level_timeout_s(m, LoadMode.CONCURRENCY, 8) == windows
    assert level_timeout_s(m, LoadMode.REQUEST_RATE, 40) == windows
    # an A/B run's fixed count at 20 req/s: 2 x 4,040 requests / 20 + 20 s, far past the windows' limit
    assert level_timeout_s(m, LoadMode.REQUEST_RATE, 20, request_count=4_000) == pytest.approx(2 * 4_040 / 20 + 20)
    assert level_timeout_s(m, LoadMode.REQUEST_RATE, 400, request_count=100) == 30.0  # the floor
    # a fixed count at a concurrency has no rate: the windows' limit (its callers pass their own)
    assert level_timeout_s(m, LoadMode.CONCURRENCY, 8, request_count=4_000) == windows


def test_perf_analyzer_runs_by_hand_through_the_analyzer_subcommand():
    """The wheel's perf_analyzer links libcudart.so.12, which is not on the loader's path: run bare,
    it does not start; `python -m perf_sweep analyzer -- ...` gives it the path."""
    import subprocess
    import sys

    from perf_sweep.plan import find_perf_analyzer

    try:
        find_perf_analyzer()
    except Exception as exc:  # not installed here: nothing to run
        pytest.skip(str(exc))
    done = subprocess.run([sys.executable, "-m", "perf_sweep", "analyzer", "--", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "Perf Analyzer Version 2.51.0" in done.stdout + done.stderr, done.stderr[-500:]
