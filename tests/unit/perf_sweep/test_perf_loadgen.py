"""Open-loop planning: Poisson arrivals, static batches that wait to fill, outcome summaries."""
import numpy as np
import pytest

from perf_sweep import loadgen
from perf_sweep.errors import SweepPlanError


def test_poisson_arrivals_have_the_requested_rate_and_are_seeded():
    times = loadgen.poisson_arrivals(200.0, 30.0, seed=1)
    assert len(times) == pytest.approx(6000, rel=0.05)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV = 1
    assert np.array_equal(times, loadgen.poisson_arrivals(200.0, 30.0, seed=1))


def test_static_batches_are_sent_when_their_last_item_arrives_and_incomplete_ones_never():
    stream = loadgen.Stream("static", rate=50.0, batch_size=8, static_batching=True)
    planned = loadgen.plan_requests([stream], 2.0, seed=3)
    arrivals = loadgen.poisson_arrivals(50.0, 2.0, seed=3)
    assert len(planned) == len(arrivals) // 8
    for request in planned:
        assert len(request.item_arrivals) == 8
        assert request.send_at == request.item_arrivals[-1] >= request.item_arrivals[0]


def test_mixed_streams_are_merged_in_time_order_with_their_priorities():
    streams = [loadgen.Stream("rt", 20.0, priority=1), loadgen.Stream("batch", 10.0, batch_size=8, priority=2)]
    planned = loadgen.plan_requests(streams, 3.0, seed=0)
    assert [r.send_at for r in planned] == sorted(r.send_at for r in planned)
    assert {r.priority for r in planned if r.stream == "rt"} == {1}
    assert all(len(r.item_arrivals) == 8 for r in planned if r.stream == "batch")
    with pytest.raises(SweepPlanError, match="unique"):
        loadgen.plan_requests([streams[0], streams[0]], 1.0)


def test_summary_counts_rejections_per_stream_and_item_latency_includes_fill_wait():
    request = loadgen.PlannedRequest("s", 0.010, (0.0, 0.010), None)
    ok = loadgen.Outcome(request, 0.010, 0.015, None)
    full = loadgen.Outcome(request, 0.010, 0.011, "[StatusCode.UNAVAILABLE] Exceeds maximum queue size")
    broken = loadgen.Outcome(request, 0.010, 0.011, "[StatusCode.INTERNAL] boom")
    summary, latencies = loadgen.summarize([ok, full, broken], "s", 1.0)
    assert latencies == pytest.approx([5.0, 15.0])  # the first item waited 10 ms for the batch to fill
    assert summary.requests == 3 and summary.rejected == 1 and summary.other_errors == 1
    assert summary.items_ok == 2 and summary.error_rate == pytest.approx(2 / 3)


def test_stream_validation():
    with pytest.raises(SweepPlanError, match="rate"):
        loadgen.Stream("x", 0)
    with pytest.raises(SweepPlanError, match="priority"):
        loadgen.Stream("x", 1, priority=0)


def test_throughput_counts_only_items_answered_inside_the_window():
    """Offered 1000 items/s for 6 s to a server that answers 500/s: the backlog drains until 12 s, and
    counting every answer over the 6 s window reported ~1000 items/s."""
    planned = loadgen.plan_requests([loadgen.Stream("no_batching", 1000.0)], 6.0, seed=0)
    outcomes = [loadgen.Outcome(r, r.send_at, (i + 1) / 500.0, None) for i, r in enumerate(planned)]
    summary, latencies = loadgen.summarize(outcomes, "no_batching", 6.0)
    assert summary.throughput == pytest.approx(500.0, rel=0.01)
    assert summary.items_ok == len(latencies) == len(planned)  # every answer still counts for latency
    batch = loadgen.PlannedRequest("b", 0.5, (0.5,) * 8, 2)
    summary, _ = loadgen.summarize([loadgen.Outcome(batch, 0.5, 0.6, None), loadgen.Outcome(batch, 0.5, 1.2, None)], "b", 1.0)
    assert summary.throughput == 8.0 and summary.items_ok == 16
