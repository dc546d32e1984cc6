"""The in-process limit's pure parts: batch sizes, the timing loop, pinning, headlines."""
import os
from types import SimpleNamespace

import numpy as np
import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.limits import (
    LimitPoint,
    best_point,
    ceiling_of_runs,
    describe_pinning,
    limit_batch_sizes,
    measure_in_process_limit,
    measure_pinned_throughput,
    served_vs_limit_headlines,
    time_batch_calls,
)


def test_limit_batch_sizes_stop_at_what_the_server_can_execute():
    assert limit_batch_sizes(32) == (1, 8, 16, 32)
    assert limit_batch_sizes(64) == (1, 8, 16, 32, 64)
    assert limit_batch_sizes(24) == (1, 8, 16, 24)  # the served maximum itself is always tried
    assert limit_batch_sizes(1) == (1,)
    with pytest.raises(SweepPlanError, match="max_batch_size"):
        limit_batch_sizes(0)
    with pytest.raises(SweepPlanError, match=">= 1"):
        limit_batch_sizes(8, (0, 4))


class FakeClock:
    """Each call to a batch advances time by `cost` seconds; reading the clock costs nothing."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_batch_calls_covers_a_whole_pass_and_counts_items_per_second():
    clock, ran = FakeClock(), []

    def call(i):
        def run():
            ran.append(i)
            clock.now += 0.01
        return run

    calls = [call(i) for i in range(5)]
    point = time_batch_calls(8, calls, seconds=0.0, warmup_calls=2, clock=clock)
    assert ran == [0, 1, 0, 1, 2, 3, 4]  # 2 untimed warm-ups, then exactly one whole pass
    assert point.batch_size == 8 and point.throughput == pytest.approx(8 / 0.01)
    assert point.batch_latency_ms == pytest.approx(10.0)
    ran.clear()
    point = time_batch_calls(4, calls, seconds=0.095, warmup_calls=0, clock=clock)
    assert ran == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]  # keeps cycling until `seconds` have passed
    assert point.throughput == pytest.approx(400.0)
    with pytest.raises(SweepPlanError, match="no batch calls"):
        time_batch_calls(1, [], 1.0)


def test_setup_runs_after_pinning_and_the_cpu_set_is_restored():
    before = os.sched_getaffinity(0)
    target = {min(before)}
    seen = {}

    def setup():
        seen["setup"] = os.sched_getaffinity(0)
        return lambda batch: [lambda: seen.setdefault("during", os.sched_getaffinity(0))]

    points = measure_pinned_throughput(setup, (1, 2), seconds_per_batch=0.0, cpus=tuple(target))
    assert seen == {"setup": target, "during": target}
    assert [p.batch_size for p in points] == [1, 2]
    assert os.sched_getaffinity(0) == before


def test_digit_limit_runs_the_onnx_file_at_each_batch_size(tmp_path):
    from test_perf_campaign import tiny_onnx

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    samples = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32)
    points = measure_in_process_limit(onnx_path, samples, "image", batch_sizes=(1, 8), seconds_per_batch=0.05,
                                      intra_op_threads=1, cpus=(min(os.sched_getaffinity(0)),))
    assert [p.batch_size for p in points] == [1, 8]
    assert all(p.throughput > 0 and p.batch_latency_ms > 0 for p in points)
    assert best_point(points) in points


def test_limit_point_and_best_point_reject_nonsense():
    with pytest.raises(SweepPlanError):
        LimitPoint(0, 1.0, 1.0)
    with pytest.raises(SweepPlanError):
        LimitPoint(1, float("nan"), 1.0)
    with pytest.raises(SweepPlanError, match="no limit points"):
        best_point([])


def test_describe_pinning():
    assert describe_pinning((0,), 1, "main") == "pinned to CPUs [0] with 1 ONNX Runtime thread(s) like partition `main`"
    assert describe_pinning((), 0, "default").startswith("unpinned")


def row(sweep, load, throughput, p99=10.0, status="ok"):
    return SimpleNamespace(sweep=sweep, load=load, throughput=throughput, p99_ms=p99, status=status)


def test_headlines_compare_the_knee_and_the_best_served_throughput_with_the_limit():
    limit = LimitPoint(16, 200.0, 80.0)
    knee = {"knee": None, "peak": {"load": 32, "throughput": 95.0, "p99_ms": 490.0}}
    rows = [row("t.concurrency", 32, 95.0), row("t.poisson", 104.1, 101.0, 900.0), row("t.concurrency", 64, 999.0, status="failed"),
            row("t.poisson", 200, float("nan"))]
    knee_line, best_line = served_vs_limit_headlines("text_embedder", knee, rows, limit, "texts/s", "tokenize + encoder")
    assert knee_line == ("text_embedder: served throughput at the peak (knee not reached): 95 texts/s = 47.5% of the "
                         "in-process limit 200 texts/s (batch 16; tokenize + encoder) [target >= 85%].")
    assert best_line.startswith("text_embedder: best throughput served anywhere in this run: 101 texts/s (t.poisson at 104.1")
    assert best_line.endswith("= 50.5% of the in-process limit.")
    reached = {"knee": {"load": 8, "throughput": 170.0, "p99_ms": 40.0}, "peak": {"throughput": 180.0}}
    assert "at the knee: 170 items/s = 85.0%" in served_vs_limit_headlines("m", reached, [], limit)[0]
    assert served_vs_limit_headlines("m", None, [], limit) == []  # nothing served: no claim


def test_ceiling_of_runs_keeps_the_faster_measurement_per_batch_size():
    before = [LimitPoint(1, 90.0, 11.1), LimitPoint(8, 110.0, 72.7)]
    after = [LimitPoint(1, 100.0, 10.0), LimitPoint(8, 100.0, 80.0), LimitPoint(16, 105.0, 152.0)]
    assert ceiling_of_runs([before, after]) == [LimitPoint(1, 100.0, 10.0), LimitPoint(8, 110.0, 72.7),
                                                LimitPoint(16, 105.0, 152.0)]
    with pytest.raises(SweepPlanError):
        ceiling_of_runs([[], []])
