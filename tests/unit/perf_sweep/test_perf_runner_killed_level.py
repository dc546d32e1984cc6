"""run_level's handling of a fixed-count perf_analyzer run that never returns.

The decision logic only: a stand-in executable that never exits plays the hung perf_analyzer,
and a small Prometheus text endpoint plays Triton's counters. (The real perf_analyzer against the
real server is tests/integration/test_perf_sweep.py.)"""
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import serve_loopback_http
from perf_sweep.plan import Measurement, SweepSpec
from perf_sweep import runner
from perf_sweep.runner import RunFolder, run_level


def counters_endpoint(successes: int, failures: int = 0):
    """An endpoint whose success/failure counters read 0 at the first scrape (before the run) and
    the given totals at every later one (while the run hangs, after it)."""
    scrapes = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            later = scrapes[0] > 0
            scrapes[0] += 1
            body = (f'nv_inference_request_success{{model="m",version="1"}} {successes * later}\n'
                    f'nv_inference_request_failure{{model="m",reason="OTHER",version="1"}} {failures * later}\n'
                    f'nv_inference_pending_request_count{{model="m",version="1"}} 0\n')
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = serve_loopback_http(Handler)
    return server, f"http://127.0.0.1:{server.server_port}/metrics"


@pytest.fixture
def hanging_perf_analyzer(tmp_path):
    path = tmp_path / "perf_analyzer"
    path.write_text("#!/bin/sh\nexec sleep 60\n")
    path.chmod(0o755)
    return path


def sweep(metrics_url):
    return SweepSpec(name="s", model="m", url="127.0.0.1:1", levels=(40,), mode="request_rate",
                     measurement=Measurement(warmup_requests=10), metrics_url=metrics_url)


def test_killed_after_the_server_answered_everything_is_measured_once_more(tmp_path, hanging_perf_analyzer):
    server, url = counters_endpoint(successes=110)
    try:
        record, _ = run_level(sweep(url), 40, RunFolder(tmp_path / "run"), hanging_perf_analyzer, {},
                              request_count=100, timeout=0.5, fixed_reason="never stable")
    finally:
        server.shutdown()
    commands = (tmp_path / "run" / "commands.sh").read_text()
    assert commands.count(str(hanging_perf_analyzer)) == 2  # the first run and exactly one more
    assert record.status == "failed" and "measured again" in record.note and "perf_analyzer killed" in record.note
    # before each kill: Triton's counters and perf_analyzer's stacks (gdb, where installed) beside the output
    evidence = (tmp_path / "run" / "raw" / "s" / "level_40_fixed.hang.txt").read_text()
    assert evidence.startswith("Triton meanwhile: 110 answered, 0 failed, 0 queued")


@pytest.mark.parametrize("successes, failures", [(109, 0), (110, 1)])
def test_killed_with_a_request_unanswered_or_failed_stays_failed_without_a_second_run(
        tmp_path, hanging_perf_analyzer, successes, failures):
    server, url = counters_endpoint(successes, failures)
    try:
        record, _ = run_level(sweep(url), 40, RunFolder(tmp_path / "run"), hanging_perf_analyzer, {},
                              request_count=100, timeout=0.5, fixed_reason="never stable")
    finally:
        server.shutdown()
    assert (tmp_path / "run" / "commands.sh").read_text().count(str(hanging_perf_analyzer)) == 1
    assert record.status == "failed" and "measured again" not in record.note


def test_a_killed_time_window_run_is_measured_once_more_when_triton_holds_nothing(tmp_path, hanging_perf_analyzer):
    server, url = counters_endpoint(successes=35)
    try:
        record, _ = run_level(sweep(url), 40, RunFolder(tmp_path / "run"), hanging_perf_analyzer, {}, timeout=0.5)
    finally:
        server.shutdown()
    assert (tmp_path / "run" / "commands.sh").read_text().count(str(hanging_perf_analyzer)) == 2
    assert record.status == "failed" and "measured again" in record.note


WARMUP_HANG_STACKS = (Path(__file__).parent / "perf_analyzer_warmup_hang.gdb.txt").read_text()


@pytest.mark.parametrize("stacks, measured_again", [
    (WARMUP_HANG_STACKS, True),  # its workers all paused with nothing in flight: the rest was never sent
    (WARMUP_HANG_STACKS.replace("RequestRateWorker::HandleExecuteOff", "RequestRateWorker::SleepIfNecessary"), False),
    ("gdb not installed", False),
])
def test_killed_in_its_warm_up_is_measured_once_more_only_if_its_stacks_show_nothing_in_flight(
        tmp_path, hanging_perf_analyzer, monkeypatch, stacks, measured_again):
    monkeypatch.setattr(runner, "thread_stacks", lambda pid: stacks)  # the stand-in has no perf_analyzer threads
    server, url = counters_endpoint(successes=7)  # 7 of the 110 (100 + 10 warm-up) it was to send
    try:
        record, _ = run_level(sweep(url), 40, RunFolder(tmp_path / "run"), hanging_perf_analyzer, {},
                              request_count=100, timeout=0.5, fixed_reason="never stable")
    finally:
        server.shutdown()
    runs = (tmp_path / "run" / "commands.sh").read_text().count(str(hanging_perf_analyzer))
    assert runs == (2 if measured_again else 1)
    assert record.status == "failed" and ("measured again" in record.note) == measured_again
    assert ("nothing in flight" in record.note) == measured_again
