"""Parsing perf_analyzer's CSV/stdout/profile export and Triton's Prometheus metrics."""
import math

import pytest

from perf_sweep.errors import SweepRunError
from perf_sweep.results import (
    fixed_count_throughput,
    latencies_from_profile_export,
    parse_perf_csv,
    parse_perf_stdout,
    parse_prometheus_text,
    record_from_outputs,
    server_metrics_delta,
)

# Written by perf_analyzer 2.51 (-f ... --verbose-csv) against a real tritonserver here.
CONCURRENCY_CSV = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait
4,213.457,11,1873,13763,95,1318,1644,4,13968,19458,22379,31801,18713,15,18647
"""
RATE_CSV = """Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait
100,96.3463,16,541,7876,67,739,462,3,11543,12162,12403,15318,9707,19,9652
"""
RATE_STDOUT = """Request Rate: 100 inference requests per seconds
  Client:
    Request count: 694
    Avg send request rate: 96.62 infer/sec
    [WARNING] Perf Analyzer was not able to keep up with the desired request rate. 3.46% of the requests were delayed.
"""
FAILED_STDOUT = """Request concurrency: 16
Failed to maintain requested inference load. Worker thread(s) failed to generate concurrent requests.
Thread [1] had error: [request id: <id_unknown>] Exceeds maximum queue size
Thread [2] had error: [request id: <id_unknown>] Exceeds maximum queue size
"""
METRICS_BEFORE = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="digits",version="1"} 100
nv_inference_request_success{model="other",version="1"} 7
nv_inference_request_failure{model="digits",reason="REJECTED",version="1"} 0
nv_inference_count{model="digits",version="1"} 100
nv_inference_exec_count{model="digits",version="1"} 50
nv_inference_queue_duration_us{model="digits",version="1"} 1000
nv_inference_compute_infer_duration_us{model="digits",version="1"} 500
nv_cpu_utilization 0.1
"""
METRICS_AFTER = METRICS_BEFORE.replace("} 100\n", "} 500\n").replace("} 50\n", "} 100\n").replace(
    "} 1000\n", "} 401000\n").replace("} 500\nnv_cpu", "} 200500\nnv_cpu").replace(
    'REJECTED",version="1"} 0', 'REJECTED",version="1"} 4').replace("nv_cpu_utilization 0.1", "nv_cpu_utilization 0.93")


def test_parse_concurrency_csv_converts_microseconds_to_ms():
    (row,) = parse_perf_csv(CONCURRENCY_CSV)
    assert row.load == 4 and row.throughput == pytest.approx(213.457)
    assert row.p99_ms == pytest.approx(31.801) and row.server_queue_ms == pytest.approx(13.763)
    assert row.server_compute_ms == pytest.approx((95 + 1318 + 1644) / 1000)


def test_parse_request_rate_csv_and_stdout():
    (row,) = parse_perf_csv(RATE_CSV)
    assert row.load == 100 and row.p50_ms == pytest.approx(11.543)
    facts = parse_perf_stdout(RATE_STDOUT)
    assert facts.request_count == 694 and facts.send_rate == pytest.approx(96.62)
    assert facts.delayed_fraction == pytest.approx(0.0346) and facts.errors == ()


def test_parse_csv_names_missing_columns():
    with pytest.raises(SweepRunError, match="missing"):
        parse_perf_csv("Concurrency,Inferences/Second\n1,2\n")


def test_failed_run_becomes_failed_record_with_error_count():
    record = record_from_outputs(sweep="s", model="m", variant="v", mode="concurrency", load=16, batch_size=1,
                                 command=["perf_analyzer", "-m", "m"], csv_text=None, stdout=FAILED_STDOUT, server=None)
    assert record.status == "failed" and record.errors == 2
    assert "Exceeds maximum queue size" in record.note


def test_prometheus_text_and_server_metrics_delta():
    samples = parse_prometheus_text(METRICS_AFTER)
    assert samples[("nv_inference_request_success", (("model", "digits"), ("version", "1")))] == 500
    delta = server_metrics_delta(parse_prometheus_text(METRICS_BEFORE), samples, "digits", host_cpu_busy=0.71)
    assert delta.requests_succeeded == 400 and delta.requests_failed == 4
    assert delta.avg_batch_size == pytest.approx(400 / 50)
    assert delta.queue_ms_per_request == pytest.approx(400000 / 400 / 1000)
    # the host's busy share over the level (/proc/stat), not Triton's gauge (0.93 here) read after it
    assert delta.cpu_utilization == pytest.approx(0.71)
    assert math.isnan(server_metrics_delta(parse_prometheus_text(METRICS_BEFORE), samples, "digits").cpu_utilization)
    assert delta.error_rate == pytest.approx(4 / 404)
    assert delta.failures_by_reason == {"REJECTED": 4}


def test_a_fixed_count_runs_throughput_is_its_answers_over_first_send_to_last_answer():
    second = 1_000_000_000
    # perf_analyzer's export of 4 requests, 3 answered, between 0.5 s and 1.5 s; its window ended at 2 s
    export = {"experiments": [{"window_boundaries": [0, 2 * second], "requests": [
        {"timestamp": second // 2, "response_timestamps": [second // 2 + 1_000_000]},
        {"timestamp": second, "response_timestamps": []},  # failed: not an answer
        {"timestamp": second, "response_timestamps": [second + 1, second + 2_000_000]},  # the last response counts
        {"timestamp": 2 * second // 3, "response_timestamps": [3 * second // 2]},
    ]}]}
    assert fixed_count_throughput(export) == pytest.approx(3 / 1.0)
    assert fixed_count_throughput(export, batch_size=8) == pytest.approx(24 / 1.0)  # items, not requests
    assert fixed_count_throughput({"experiments": [{"requests": [{"timestamp": 5, "response_timestamps": []}]}]}) is None
    assert fixed_count_throughput({}) is None


def test_latencies_from_profile_export_use_the_last_three_windows_and_skip_failures():
    export = {"experiments": [{
        "window_boundaries": [0, 10, 20, 30, 40],
        "requests": [
            {"timestamp": 5, "response_timestamps": [2_000_005]},  # first window: a trial, left out
            {"timestamp": 12, "response_timestamps": [3_000_012]},
            {"timestamp": 25, "response_timestamps": []},  # no response: failed
            {"timestamp": 35, "response_timestamps": [1_000_035, 4_000_035]},
        ]}]}
    assert latencies_from_profile_export(export) == [3.0, 4.0]
    assert math.isnan(record_from_outputs(
        sweep="s", model="m", variant="v", mode="c", load=1, batch_size=1, command=[], csv_text=None,
        stdout="", server=None).p99_ms)


def test_perf_analyzers_error_lines_and_late_sends_reach_the_level_note():
    """perf_analyzer's `Thread [i] had error` lines (one per load thread, not a count) and "7.75% of
    the requests were delayed" reached no report (a review, 2026-12-07)."""
    from perf_sweep.results import failed_requests_from_profile_export
    from perf_sweep.runner import perf_analyzer_notes

    export = {"experiments": [{"window_boundaries": [0, 10, 20, 30, 40], "requests": [
        {"timestamp": 5, "response_timestamps": []},          # an earlier trial window: not measured
        {"timestamp": 12, "response_timestamps": [15]},
        {"timestamp": 25, "response_timestamps": []},         # measured, unanswered
        {"timestamp": 35, "response_timestamps": [39]}]}]}
    assert failed_requests_from_profile_export(export) == 1
    stdout = ("Thread [0] had error: [request id: 13413] Exceeds maximum queue size\n"
              "Thread [3] had error: [request id: 844424930145381] Exceeds maximum queue size\n"
              "  Avg send request rate: 3400.00 infer/sec\n[WARNING] 7.75% of the requests were delayed.\n")
    threads, delayed = perf_analyzer_notes(stdout, 0)
    assert "2 load thread(s) reported an error (Exceeds maximum queue size): at least that many requests failed" in threads
    assert "7.8% of the requests were sent late" in delayed
    assert "1 measured request(s) unanswered in the export" in perf_analyzer_notes(stdout, 1)[0]
    assert perf_analyzer_notes("  Avg send request rate: 10.00 infer/sec\n", 0) == []
