"""One level's numbers: every request accounted for, percentiles over correct answers, throughput in the window."""
import math
from dataclasses import replace

import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.plan import LoadLevel, LoadMode
from perf_sweep.peers.stats import (
    LevelSummary,
    Outcome,
    RequestRecord,
    accounting_line,
    best_closed_loop_throughput,
    summarize_level,
)

LEVEL = LoadLevel(LoadMode.CLOSED, 2, warmup_s=1.0, window_s=2.0)


def ok(at, latency_s, index=0, score=1.0):
    return RequestRecord(index, at, at, at + latency_s, Outcome.OK, None, score)


def test_warm_up_requests_are_counted_but_not_measured():
    records = [ok(0.1, 0.01), ok(0.5, 0.6)] + [ok(1.0 + 0.1 * i, 0.01) for i in range(10)]
    summary = summarize_level(records, LEVEL, "t", "m", window_start_s=1.0)
    assert (summary.sent, summary.warmup_requests, summary.measured, summary.ok) == (12, 2, 10, 10)
    assert summary.p99_ms == pytest.approx(10.0)  # the 600 ms warm-up request is not in the percentiles


def test_every_measured_request_has_exactly_one_outcome():
    records = [ok(1.0, 0.01), ok(1.1, 0.01),
               RequestRecord(2, 1.2, 1.2, 1.3, Outcome.HTTP_ERROR, "HTTP 503: queue full"),
               RequestRecord(3, 1.3, 1.3, 1.4, Outcome.WRONG_ANSWER, "argmax 1, the in-process reference says 2", 0.0),
               RequestRecord(4, 1.4, 1.4, 6.4, Outcome.TIMEOUT, "no answer within 5 s"),
               RequestRecord(5, 1.5, 1.5, 1.5, Outcome.CONNECTION_ERROR, "ServerDisconnectedError")]
    summary = summarize_level(records, LEVEL, "t", "m", window_start_s=1.0)
    assert summary.outcomes == {"ok": 2, "http_error": 1, "wrong_answer": 1, "timeout": 1, "connection_error": 1}
    assert summary.measured == sum(summary.outcomes.values()) == 6 and summary.errors == 4
    assert summary.first_error == "http_error: HTTP 503: queue full"
    assert summary.min_score == 1.0  # a wrong answer's score is not a correct answer's


def test_throughput_counts_correct_answers_completed_inside_the_window():
    # 1 answer completes in the warm-up, 4 in the window, 1 after it (sent in the window)
    records = [ok(0.5, 0.2), ok(0.9, 0.2), ok(1.5, 0.1), ok(2.0, 0.1), ok(2.5, 0.1), ok(2.95, 0.1)]
    summary = summarize_level(records, LEVEL, "t", "m", window_start_s=1.0)
    assert summary.throughput == pytest.approx(4 / 2.0)
    assert summary.measured == 4  # sent in the window, awaited even if it ended after it


def test_slow_answers_are_counted_as_stalls_and_latency_starts_at_the_arrival():
    records = [RequestRecord(0, 1.0, 1.2, 1.7, Outcome.OK, None, 1.0), ok(1.1, 0.01)]
    summary = summarize_level(records, LoadLevel(LoadMode.POISSON, 10, 1.0, 2.0), "t", "m", window_start_s=1.0)
    assert summary.stalled == 1  # 700 ms from the planned arrival, though only 500 ms after sending
    assert summary.send_lag_p99_ms == pytest.approx(198.0)


def test_a_request_due_after_the_window_is_a_load_generator_bug():
    with pytest.raises(SweepPlanError, match="after the window"):
        summarize_level([ok(3.5, 0.01)], LEVEL, "t", "m", window_start_s=1.0)


def test_a_level_without_correct_answers_has_no_percentiles():
    summary = summarize_level([RequestRecord(0, 1.0, 1.0, 6.0, Outcome.TIMEOUT, "x")], LEVEL, "t", "m", 1.0)
    assert summary.ok == 0 and math.isnan(summary.p99_ms) and summary.throughput == 0


def test_summaries_round_trip_through_results_json_and_print_their_accounting():
    summary = summarize_level([ok(1.0, 0.004), ok(1.5, 0.006)], LEVEL, "minimal_fastapi", "digit_classifier", 1.0, 0.25)
    assert LevelSummary.from_dict({**summary.as_dict(), "extra": 1}) == summary
    line = accounting_line(summary)
    assert "sent 2 = warm-up 0 + measured 2 (ok 2)" in line and "client CPU 25%" in line and "server:" not in line
    older = {k: v for k, v in summary.as_dict().items() if k not in ("server", "host_speedup")}  # earlier runs
    assert LevelSummary.from_dict(older) == summary
    with pytest.raises(TypeError, match="throughput"):  # a field without a default stays required
        LevelSummary.from_dict({k: v for k, v in summary.as_dict().items() if k != "throughput"})
    probed = replace(summary, host_speedup=1.04, host_one_thread_ms=5.2)
    assert LevelSummary.from_dict(probed.as_dict()) == probed
    run_41 = {k: v for k, v in probed.as_dict().items() if k != "host_one_thread_ms"}  # levels.jsonl before the field
    run_41["host_parallelism"] = {"one_thread_ms": 5.2, "all_threads_ms": 5.0, "threads": 2}
    assert LevelSummary.from_dict(run_41) == probed
    assert accounting_line(probed).endswith("client CPU 25% of a core; host x1.04 on every core")


def test_this_projects_progress_line_says_what_its_server_saw():
    summary = summarize_level([ok(1.0, 0.004)], LEVEL, "this_project", "text_embedder", 1.0, 0.25)
    seen = {"requests_per_execution": 1.0, "queue_ms_per_request": 0.05, "framework_ms_per_execution": 2.1,
            "rest_of_execute_ms_per_execution": None}
    line = accounting_line(replace(summary, server=seen))
    assert line.endswith("; server: 1.00 requests per execution, queue 0.05 ms, ONNX Runtime 2.10 + rest of execute "
                         "- ms per execution")
    line = accounting_line(replace(summary, server={**seen, "wide_session_share": 0.931}))
    assert line.endswith("- ms per execution, 93% of calls wide")


def test_the_reference_peak_is_the_best_answered_closed_loop_level():
    a = summarize_level([ok(1.0, 0.1)], LEVEL, "t", "m", 1.0)
    b = summarize_level([ok(1.0, 0.1), ok(1.5, 0.1), ok(2.0, 0.1)], LEVEL, "t", "m", 1.0)
    poisson = summarize_level([ok(1.0 + i * 0.01, 0.1) for i in range(50)], LoadLevel(LoadMode.POISSON, 9, 1, 2), "t", "m", 1.0)
    assert best_closed_loop_throughput([a, b, poisson]) == b.throughput
    assert best_closed_loop_throughput([]) is None
