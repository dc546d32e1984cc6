"""The peer comparison's levels, timing and targets (pure planning)."""
import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.plan import (LoadLevel, LoadMode, ModelKind, SuiteTiming, TargetKind, closed_loop_levels,
    estimated_seconds, interleaved, plan_targets, poisson_levels)


def test_the_full_timing_is_the_issues_concurrencies_with_warm_up_and_a_fixed_window():
    timing = SuiteTiming()
    levels = closed_loop_levels(timing)
    assert [level.value for level in levels] == [1, 2, 4, 8, 16, 32]
    assert all(level.mode is LoadMode.CLOSED and level.warmup_s == 2 and level.window_s == 10 for level in levels)
    assert [level.label for level in levels][:2] == ["c=1", "c=2"]


def test_quick_timing_is_short_and_keeps_a_high_concurrency_level():
    quick = SuiteTiming.quick()
    assert quick.concurrencies == (1, 4, 16) and quick.rate_fractions == (0.5,)
    assert quick.seconds_per_target_model() == 4 * 3.0


def test_poisson_rates_are_fractions_of_the_reference_peak_and_the_same_for_every_target():
    levels = poisson_levels(1000.0, SuiteTiming(rate_fractions=(0.25, 0.5, 0.8)))
    assert [(level.mode, level.value) for level in levels] == [(LoadMode.POISSON, 250.0), (LoadMode.POISSON, 500.0),
                                                              (LoadMode.POISSON, 800.0)]
    assert levels[0].label == "poisson 250/s"


def test_no_poisson_levels_when_the_reference_measured_nothing():
    assert poisson_levels(None, SuiteTiming()) == ()
    assert poisson_levels(0.0, SuiteTiming()) == ()


def test_poisson_rates_never_fall_below_one_request_per_second():
    assert [level.value for level in poisson_levels(1.0, SuiteTiming(rate_fractions=(0.25,)))] == [1.0]


@pytest.mark.parametrize("bad, match", [
    (dict(concurrencies=()), "concurrencies"),
    (dict(concurrencies=(4, 2)), "strictly increasing"),
    (dict(concurrencies=(0, 1)), ">= 1"),
    (dict(rate_fractions=(0.0,)), "rate_fractions"),
    (dict(window_s=0), "window_s"),
    (dict(request_timeout_s=0), "request_timeout_s"),
    (dict(quiet_margin_cores=0), "quiet_margin_cores"),
    (dict(quiet_timeout_s=-1), "quiet_timeout_s"),
])
def test_suite_timing_rejects_settings_that_cannot_measure(bad, match):
    with pytest.raises(SweepPlanError, match=match):
        SuiteTiming(**bad)


def test_a_closed_loop_level_needs_a_whole_concurrency():
    with pytest.raises(SweepPlanError, match="whole concurrency"):
        LoadLevel(LoadMode.CLOSED, 1.5, 1, 1)
    with pytest.raises(SweepPlanError, match="positive"):
        LoadLevel(LoadMode.POISSON, 0, 1, 1)


def test_targets_keep_their_order_and_always_include_this_project():
    assert plan_targets() == (TargetKind.MINIMAL, TargetKind.PYTRITON, TargetKind.INFINITY, TargetKind.PROJECT)
    assert plan_targets([TargetKind.INFINITY, TargetKind.MINIMAL]) == (TargetKind.MINIMAL, TargetKind.INFINITY,
                                                                       TargetKind.PROJECT)


def test_infinity_serves_only_text_and_the_project_is_not_a_peer():
    assert TargetKind.INFINITY.serves() == (ModelKind.TEXT,)
    assert TargetKind.PYTRITON.serves() == (ModelKind.DIGITS, ModelKind.TEXT)
    assert not TargetKind.PROJECT.is_peer and TargetKind.MINIMAL.is_peer


def test_estimated_seconds_counts_each_target_model_pair_and_each_start():
    timing = SuiteTiming.quick()
    seconds = estimated_seconds(plan_targets(), list(ModelKind), timing, startup_s=10, limits_s=30)
    assert seconds == 7 * 12.0 + 4 * 10 + 30


def test_levels_are_interleaved_over_the_targets_with_the_order_reversed_every_other_level():
    timing = SuiteTiming(concurrencies=(1, 2, 4), warmup_s=0.5, window_s=1.0)
    levels = closed_loop_levels(timing)
    targets = (TargetKind.MINIMAL, TargetKind.PYTRITON, TargetKind.PROJECT)
    order = interleaved(levels, targets)
    assert [(lv.value, t) for lv, t in order] == [
        (1, TargetKind.MINIMAL), (1, TargetKind.PYTRITON), (1, TargetKind.PROJECT),
        (2, TargetKind.PROJECT), (2, TargetKind.PYTRITON), (2, TargetKind.MINIMAL),
        (4, TargetKind.MINIMAL), (4, TargetKind.PYTRITON), (4, TargetKind.PROJECT)]
    assert interleaved((), targets) == () and interleaved(levels, ()) == ()


def test_the_machine_is_settled_only_after_enough_readings_near_the_idle_baseline():
    from perf_sweep.peers.plan import machine_settled

    assert not machine_settled([], 0.1, 0.35)
    assert not machine_settled([0.2], 0.1, 0.35), "one reading is not enough"
    assert machine_settled([1.9, 0.3, 0.4], 0.1, 0.35)
    assert not machine_settled([0.3, 1.2], 0.1, 0.35), "the backlog of the last level is still computing"
    assert not machine_settled([0.3, 0.46], 0.1, 0.35)
    assert machine_settled([1.0, 1.3], 1.0, 0.35), "a host busy before the run is measured against its own baseline"
