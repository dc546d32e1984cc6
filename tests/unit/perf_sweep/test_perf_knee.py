"""find_knee and choose_max_queue_delay on synthetic sweep curves."""
import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.knee import DelayPoint, LoadPoint, choose_max_queue_delay, find_knee


def saturating_curve(capacity=1000.0, service_ms=2.0, loads=(1, 2, 4, 8, 16, 32, 64)):
    """Closed-loop M/D/1-like curve: throughput saturates at `capacity`, latency = load / throughput."""
    points = []
    for n in loads:
        throughput = min(n * 1000.0 / service_ms / 2, capacity)
        points.append(LoadPoint(n, throughput, 1000.0 * n / throughput * 1.5))
    return points


def test_find_knee_returns_first_point_where_throughput_stalls_and_p99_climbs():
    result = find_knee(saturating_curve())
    assert result.reached
    assert result.knee.load == 4  # 4 reaches capacity; 8 adds nothing but doubles P99
    assert result.peak.throughput == pytest.approx(1000.0)


def test_find_knee_recommends_80_percent_of_knee_load_and_throughput():
    result = find_knee(saturating_curve())
    assert result.recommended_load == pytest.approx(0.8 * result.knee.load)
    assert result.recommended_throughput == pytest.approx(0.8 * result.knee.throughput)
    assert result.expected_p99_ms <= result.knee.p99_ms


def test_find_knee_ignores_single_noisy_dip_that_a_later_point_disproves():
    points = [LoadPoint(1, 100, 10), LoadPoint(2, 190, 11), LoadPoint(4, 185, 20),  # dip + P99 jump: noise
              LoadPoint(8, 400, 21), LoadPoint(16, 410, 40), LoadPoint(32, 405, 80)]
    result = find_knee(points)
    assert result.knee.load == 8


def test_find_knee_reports_not_reached_when_throughput_keeps_growing():
    points = [LoadPoint(n, 100.0 * n, 10.0 + n) for n in (1, 2, 4, 8)]
    result = find_knee(points)
    assert not result.reached
    assert result.recommended_load is None
    assert result.peak.load == 8


def test_find_knee_flat_throughput_with_flat_latency_is_not_a_knee():
    points = [LoadPoint(n, 500.0, 5.0) for n in (1, 2, 4)]
    assert not find_knee(points).reached


def test_find_knee_thresholds_are_parameters():
    points = [LoadPoint(1, 100, 10), LoadPoint(2, 115, 20), LoadPoint(4, 125, 40)]
    assert find_knee(points, min_throughput_gain=0.10).knee.load == 2
    assert find_knee(points, min_throughput_gain=0.30).knee.load == 1
    assert not find_knee(points, min_throughput_gain=0.10, min_p99_rise=1.5).reached


def test_find_knee_sorts_by_load_and_rejects_bad_input():
    shuffled = list(reversed(saturating_curve()))
    assert find_knee(shuffled).knee.load == 4
    with pytest.raises(SweepPlanError, match="at least 2"):
        find_knee([LoadPoint(1, 10, 1)])
    with pytest.raises(SweepPlanError, match="distinct loads"):
        find_knee([LoadPoint(1, 10, 1), LoadPoint(1, 12, 2)])
    with pytest.raises(SweepPlanError, match="operating_fraction"):
        find_knee(saturating_curve(), operating_fraction=1.5)
    with pytest.raises(SweepPlanError, match="p99_ms"):
        LoadPoint(1, 10, float("nan"))


def test_choose_max_queue_delay_prefers_smallest_delay_that_keeps_the_throughput():
    points = [DelayPoint(0, 600, 8.0), DelayPoint(2000, 900, 9.0), DelayPoint(5000, 920, 10.0),
              DelayPoint(10000, 930, 15.0), DelayPoint(20000, 940, 25.0)]
    choice = choose_max_queue_delay(points)
    # budget 1.5 x 8 ms = 12 ms: 0..5 ms affordable; best 920; 900 is within 5% -> 2 ms
    assert choice.chosen.delay_us == 2000
    assert choice.p99_budget_ms == pytest.approx(12.0)


def test_choose_max_queue_delay_takes_longer_window_only_when_it_buys_throughput():
    flat = [DelayPoint(d, 500, 5.0 + d / 1000) for d in (0, 2000, 5000)]
    assert choose_max_queue_delay(flat).chosen.delay_us == 0


def test_choose_max_queue_delay_with_explicit_budget_none_affordable_picks_lowest_p99():
    points = [DelayPoint(0, 100, 50.0), DelayPoint(5000, 200, 40.0)]
    choice = choose_max_queue_delay(points, p99_budget_ms=10.0)
    assert choice.chosen.delay_us == 5000
    assert "no delay met" in choice.rule


def test_choose_max_queue_delay_rejects_empty_or_duplicate():
    with pytest.raises(SweepPlanError):
        choose_max_queue_delay([])
    with pytest.raises(SweepPlanError, match="distinct"):
        choose_max_queue_delay([DelayPoint(0, 1, 1), DelayPoint(0, 2, 2)])
