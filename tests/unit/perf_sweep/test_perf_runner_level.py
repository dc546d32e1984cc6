"""run_level's decisions around perf_analyzer 2.51's own failings: a run that never returns (measured
once more or not) and a fixed count's rate (from the answers, not perf_analyzer's whole seconds).

The decision logic only: stand-in executables play perf_analyzer (one never exits, one writes a
finished run's files), a small Prometheus text endpoint plays Triton's counters, and gdb's stacks
of a real hang are read from a file. (The real perf_analyzer against the real server is
tests/integration/test_perf_sweep.py.)"""
import dataclasses
import json
import pathlib
from http.server import BaseHTTPRequestHandler

import pytest

from conftest import PERF_ANALYZER_STILL_SENDING, PERF_ANALYZER_WARMUP_HANG, serve_loopback_http
from perf_sweep import runner
from perf_sweep.plan import Measurement, SweepSpec
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


def killed_level(tmp_path, perf_analyzer, successes, failures=0, request_count=100):
    """One level against the never-exiting stand-in with Triton's counters at `successes`/`failures`
    (a fixed count of 100 + 10 warm-up, or time windows with `request_count=None`): (record, runs)."""
    server, url = counters_endpoint(successes, failures)
    try:
        record, _ = run_level(sweep(url), 40, RunFolder(tmp_path / "run"), perf_analyzer, {}, request_count=request_count,
                              timeout=0.5, fixed_reason="never stable" if request_count else None)
    finally:
        server.shutdown()
    return record, (tmp_path / "run" / "commands.sh").read_text().count(str(perf_analyzer))


def test_killed_after_the_server_answered_everything_is_measured_once_more(tmp_path, hanging_perf_analyzer):
    record, runs = killed_level(tmp_path, hanging_perf_analyzer, successes=110)
    assert runs == 2  # the first run and exactly one more
    assert record.status == "failed" and "measured again" in record.note and "perf_analyzer killed" in record.note
    # before each kill: Triton's counters and perf_analyzer's stacks (gdb, where installed) beside the output
    evidence = (tmp_path / "run" / "raw" / "s" / "level_40_fixed.hang.txt").read_text()
    assert evidence.startswith("Triton meanwhile: 110 answered, 0 failed, 0 queued")


@pytest.mark.parametrize("successes, failures", [(109, 0), (110, 1)])
def test_killed_with_a_request_unanswered_or_failed_stays_failed_without_a_second_run(
        tmp_path, hanging_perf_analyzer, successes, failures):
    record, runs = killed_level(tmp_path, hanging_perf_analyzer, successes, failures)
    assert runs == 1
    assert record.status == "failed" and "measured again" not in record.note


def test_a_killed_time_window_run_is_measured_once_more_when_triton_holds_nothing(tmp_path, hanging_perf_analyzer):
    record, runs = killed_level(tmp_path, hanging_perf_analyzer, successes=35, request_count=None)
    assert runs == 2
    assert record.status == "failed" and "measured again" in record.note


@pytest.mark.parametrize("stacks, successes, measured_again, verdict", [
    (PERF_ANALYZER_WARMUP_HANG, 7, True, "idle"),  # its workers all waited to be resumed: the rest was never sent
    (PERF_ANALYZER_STILL_SENDING, 7, False, "busy"),
    (PERF_ANALYZER_STILL_SENDING, 110, False, "busy"),  # all answered, yet a worker still waits on something
    ("gdb not installed", 7, False, "unknown"),
])
def test_a_killed_run_is_measured_once_more_only_if_perf_analyzers_stacks_allow_it(
        tmp_path, hanging_perf_analyzer, monkeypatch, stacks, successes, measured_again, verdict):
    monkeypatch.setattr(runner, "thread_stacks", lambda pid: stacks)  # the stand-in has no perf_analyzer threads
    record, runs = killed_level(tmp_path, hanging_perf_analyzer, successes)  # of the 110 it was to send
    assert runs == (2 if measured_again else 1)
    assert record.status == "failed" and ("measured again" in record.note) == measured_again
    assert f"perf_analyzer's load workers: {verdict}" in record.note
    evidence = (tmp_path / "run" / "raw" / "s" / "level_40_fixed.hang.txt").read_text()
    assert f"perf_analyzer's load workers: {verdict}" in evidence.splitlines()[0]


def answering_perf_analyzer(tmp_path, answered_within_s: float, requests: int, reported: float):
    """A stand-in perf_analyzer that writes what 2.51 writes for a finished fixed-count run: the CSV
    row with its own throughput (`reported`) and a profile export whose `requests` answers span
    `answered_within_s` from the first send."""
    export = {"experiments": [{"experiment": {"mode": "request_rate", "value": 40}, "window_boundaries": [0, 4 * 10**9],
                               "requests": [{"timestamp": 10**9 + i, "response_timestamps": [
                                   10**9 + int(answered_within_s * 10**9 * (i + 1) / requests)]} for i in range(requests)]}]}
    (tmp_path / "export.json").write_text(json.dumps(export))
    path = tmp_path / "perf_analyzer"
    path.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do case "$1" in -f) csv="$2"; shift;; --profile-export-file) out="$2"; shift;; esac; shift; done\n'
        f'cp "{tmp_path / "export.json"}" "$out"\n'
        'printf "Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,'
        'Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,'
        f'request/response,response wait\\n40,{reported},13,421,110,33,655,209,2,1285,2425,2498,2829,1446,15,1417\\n" > "$csv"\n'
        f'echo "  Client:\n    Request count: {requests}"\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("batch_size", [1, 4])
def test_a_fixed_count_level_is_rated_from_its_answers_not_perf_analyzers_whole_seconds(tmp_path, batch_size):
    perf_analyzer = answering_perf_analyzer(tmp_path, answered_within_s=2.5, requests=100, reported=25.0)
    level = dataclasses.replace(sweep(None), batch_size=batch_size)
    record, latencies = run_level(level, 40, RunFolder(tmp_path / "run"), perf_analyzer, {},
                                  request_count=100, fixed_reason="never stable")
    assert record.status == "unstable" and len(latencies) == 100
    assert record.throughput == pytest.approx(40.0 * batch_size)  # 100 answers in 2.5 s
    assert "perf_analyzer's own 25.0 infer/s" in record.note
    # a time-window level keeps perf_analyzer's own figure
    record, _ = run_level(level, 40, RunFolder(tmp_path / "windows"), perf_analyzer, {})
    assert record.status == "ok" and record.throughput == 25.0 and "export's answers" not in record.note


@pytest.mark.parametrize("failing_scrape", [1, 2])  # before the run, after it
def test_a_metrics_scrape_that_fails_costs_the_level_its_server_figures_not_the_whole_run(
        tmp_path, monkeypatch, failing_scrape):
    """A timed-out or refused scrape (a busy server, one the supervisor just restarted) raised out of
    run_level, out of `perf_sweep run`, and no results.json or report was written for any sweep."""
    from perf_sweep.errors import SweepRunError

    calls = []

    def scrape(url, timeout=5.0):
        calls.append(url)
        if len(calls) == failing_scrape:
            raise SweepRunError(f"could not scrape Triton metrics at {url}: timed out")
        return {("nv_inference_request_success", (("model", "m"),)): float(len(calls))}

    monkeypatch.setattr(runner, "scrape_metrics", scrape)
    perf_analyzer = answering_perf_analyzer(tmp_path, answered_within_s=2.5, requests=100, reported=25.0)
    record, latencies = run_level(sweep("http://127.0.0.1:1/metrics"), 40, RunFolder(tmp_path / "run"), perf_analyzer, {})
    assert record.status == "ok" and record.throughput == 25.0 and len(latencies) == 100
    assert not record.server and "could not scrape Triton metrics" in record.note


def test_a_line_of_commands_sh_measures_again_without_touching_the_runs_files(tmp_path):
    """A line of commands.sh wrote over the run's own CSV and failed on its export ("Path must not
    already exist", as perf_analyzer refuses one that exists; a review, 2026-12-07). Now each line
    writes into a fresh folder: it reruns any number of times and the evidence stays as measured."""
    import subprocess
    import sys

    writer = tmp_path / "fake_perf_analyzer.py"  # writes -f and the export, refusing an export that exists
    writer.write_text("import pathlib, sys\n"
                      "a = sys.argv\n"
                      "csv, export = pathlib.Path(a[a.index('-f') + 1]), pathlib.Path(a[a.index('--profile-export-file') + 1])\n"
                      "sys.exit('Path must not already exist') if export.exists() else None\n"
                      "csv.write_text('rerun'); export.write_text('rerun')\n")
    folder = RunFolder(tmp_path / "run")
    csv, export = folder.root / "level 1.csv", folder.root / "level 1.json"
    csv.write_text("measured"), export.write_text("measured")
    folder.log_command([sys.executable, str(writer), "-f", str(csv), "--profile-export-file", str(export)],
                       {"LD_LIBRARY_PATH": "/opt/x"}, "m.concurrency level 1")
    line = folder.commands.read_text().splitlines()[-1]
    outputs = []
    for _ in range(2):
        run = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, run.stderr
        out = pathlib.Path(run.stdout.strip().removeprefix("output in "))
        assert (out / "level 1.csv").read_text() == (out / "level 1.json").read_text() == "rerun"
        outputs.append(out)
    assert outputs[0] != outputs[1] and csv.read_text() == export.read_text() == "measured"


def test_a_fixed_count_after_an_unstable_level_is_sized_for_the_concurrency_it_runs_at():
    """Sized by the last rate alone, c=16 after an unstable c=1 (321/s) sent 963 requests: 0.49 s at
    the 1,960/s it served, under one window (a review, 2026-12-07)."""
    from perf_sweep.plan import LoadMode, fixed_request_count
    from perf_sweep.results import PerfRecord
    from perf_sweep.runner import fixed_count_sizing_rate

    c1 = PerfRecord(sweep="s", model="m", variant="v", mode="concurrency", load=1, batch_size=1, command="",
                    status="unstable", throughput=321.0)
    assert fixed_count_sizing_rate(LoadMode.CONCURRENCY, 16, c1) == 16 * 321.0
    count = fixed_request_count(fixed_count_sizing_rate(LoadMode.CONCURRENCY, 16, c1), 1000)
    assert count / 1960 >= 3 * 1.0  # three 1-s windows at the rate c=16 served
    assert fixed_count_sizing_rate(LoadMode.REQUEST_RATE, 500.0, c1) == 500.0
