"""Where a served model saturates, where to run it, and which batching delay to use.

A sweep raises offered load step by step (concurrency, or a Poisson request rate) and records
throughput and P99 latency at each step. Past the *knee* extra load buys almost no throughput and
is paid for in queueing: P99 climbs steeply. Production should run with headroom below it, so the
recommendation is a fraction (80% by default) of the knee.

Pure functions on plain numbers: no perf_analyzer, no server, tested on synthetic curves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from perf_sweep.errors import SweepPlanError


def _check_positive(field_name: str, value: float, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SweepPlanError(f"`{field_name}` = {value!r} must be a finite number.")
    if value < 0 or (value == 0 and not allow_zero):
        raise SweepPlanError(f"`{field_name}` = {value} must be {'>= 0' if allow_zero else '> 0'}.")


@dataclass(frozen=True)
class LoadPoint:
    """One measured step of a sweep: offered load, achieved throughput (infer/s), P99 (ms)."""

    load: float
    throughput: float
    p99_ms: float

    def __post_init__(self) -> None:
        _check_positive("load", self.load)
        _check_positive("throughput", self.throughput, allow_zero=True)
        _check_positive("p99_ms", self.p99_ms)


@dataclass(frozen=True)
class KneeResult:
    """The outcome of `find_knee`.

    `knee` is None when the sweep never saturated (throughput still grew, or P99 stayed flat,
    up to the last step): then `peak` is only a lower bound of capacity and no operating point is
    recommended. `recommended_*` are `operating_fraction` of the knee's load and throughput;
    `expected_p99_ms` is P99 interpolated at the recommended throughput from the measured curve.
    """

    points: tuple[LoadPoint, ...]
    knee: LoadPoint | None
    peak: LoadPoint
    operating_fraction: float
    rule: str
    recommended_load: float | None = None
    recommended_throughput: float | None = None
    expected_p99_ms: float | None = None

    @property
    def reached(self) -> bool:
        return self.knee is not None


def _interpolate_p99(points: Sequence[LoadPoint], throughput: float) -> float:
    """P99 at `throughput`, linear between the two measured neighbours on the throughput axis."""
    below = [p for p in points if p.throughput <= throughput]
    above = [p for p in points if p.throughput >= throughput]
    if not below:
        return points[0].p99_ms
    if not above:
        return below[-1].p99_ms
    low, high = below[-1], above[0]
    if high.throughput == low.throughput:
        return min(low.p99_ms, high.p99_ms)
    share = (throughput - low.throughput) / (high.throughput - low.throughput)
    return low.p99_ms + share * (high.p99_ms - low.p99_ms)


def find_knee(
    points: Sequence[LoadPoint],
    min_throughput_gain: float = 0.10,
    min_p99_rise: float = 0.25,
    operating_fraction: float = 0.8,
) -> KneeResult:
    """Find the knee of a load sweep and recommend an operating point below it.

    Rule (points sorted by offered load; T is throughput, P is P99): the knee is the FIRST point k,
    not the last, for which both hold:

    1. throughput has stopped growing meaningfully: no later point reaches
       ``T_k * (1 + min_throughput_gain)`` (default: no later step adds 10% or more), and
    2. P99 rises steeply right after it: ``P_{k+1} >= P_k * (1 + min_p99_rise)`` (default +25%).

    Condition 1 looks at every later point, not only the next, so a single noisy step (common on a
    shared CPU) cannot fake a plateau that a later step disproves. The recommended operating point
    is `operating_fraction` (default 0.8) of the knee's load and of its throughput.
    """
    _check_positive("min_throughput_gain", min_throughput_gain)
    _check_positive("min_p99_rise", min_p99_rise)
    if not 0 < operating_fraction <= 1:
        raise SweepPlanError(f"`operating_fraction` = {operating_fraction} must be in (0, 1].")
    ordered = tuple(sorted(points, key=lambda p: p.load))
    if len(ordered) < 2:
        raise SweepPlanError(f"find_knee needs at least 2 sweep points, got {len(ordered)}.")
    loads = [p.load for p in ordered]
    if len(set(loads)) != len(loads):
        raise SweepPlanError(f"sweep points must have distinct loads, got {loads}.")
    rule = (
        f"first point after which no later step adds >= {min_throughput_gain:.0%} throughput and the next step "
        f"raises P99 by >= {min_p99_rise:.0%}; operate at {operating_fraction:.0%} of it"
    )
    peak = max(ordered, key=lambda p: p.throughput)
    for k, point in enumerate(ordered[:-1]):
        later_best = max(p.throughput for p in ordered[k + 1:])
        stalls = later_best < point.throughput * (1 + min_throughput_gain)
        steep = ordered[k + 1].p99_ms >= point.p99_ms * (1 + min_p99_rise)
        if stalls and steep:
            throughput = operating_fraction * point.throughput
            return KneeResult(
                points=ordered, knee=point, peak=peak, operating_fraction=operating_fraction, rule=rule,
                recommended_load=operating_fraction * point.load,
                recommended_throughput=throughput,
                expected_p99_ms=_interpolate_p99(ordered[: k + 1], throughput),
            )
    return KneeResult(points=ordered, knee=None, peak=peak, operating_fraction=operating_fraction, rule=rule)


@dataclass(frozen=True)
class DelayPoint:
    """One step of a batching-delay sweep, all measured at the same offered load."""

    delay_us: int
    throughput: float
    p99_ms: float

    def __post_init__(self) -> None:
        _check_positive("delay_us", self.delay_us, allow_zero=True)
        _check_positive("throughput", self.throughput, allow_zero=True)
        _check_positive("p99_ms", self.p99_ms)


@dataclass(frozen=True)
class DelayChoice:
    points: tuple[DelayPoint, ...]
    chosen: DelayPoint
    p99_budget_ms: float
    rule: str


def choose_max_queue_delay(
    points: Sequence[DelayPoint],
    p99_slack: float = 0.5,
    throughput_tolerance: float = 0.05,
    p99_budget_ms: float | None = None,
) -> DelayChoice:
    """Choose `max_queue_delay_microseconds` from a sweep of the delay window at one load.

    Rule: a delay is *affordable* when its P99 is within the budget, which is `p99_budget_ms` if
    given, else ``(1 + p99_slack) x`` the lowest P99 of the sweep (default 1.5x). Among affordable
    delays take the best throughput; choose the SMALLEST affordable delay whose throughput is within
    `throughput_tolerance` (default 5%) of that best. A longer window must buy throughput, not just
    latency: if it does not, the shorter one wins.
    """
    _check_positive("p99_slack", p99_slack, allow_zero=True)
    _check_positive("throughput_tolerance", throughput_tolerance, allow_zero=True)
    ordered = tuple(sorted(points, key=lambda p: p.delay_us))
    if not ordered:
        raise SweepPlanError("choose_max_queue_delay needs at least one delay point, got none.")
    delays = [p.delay_us for p in ordered]
    if len(set(delays)) != len(delays):
        raise SweepPlanError(f"delay points must have distinct delays, got {delays}.")
    if p99_budget_ms is None:
        budget = min(p.p99_ms for p in ordered) * (1 + p99_slack)
        budget_text = f"P99 <= {budget:.2f} ms ({1 + p99_slack:.2g}x the lowest P99)"
    else:
        _check_positive("p99_budget_ms", p99_budget_ms)
        budget = p99_budget_ms
        budget_text = f"P99 <= {budget:.2f} ms"
    affordable = [p for p in ordered if p.p99_ms <= budget]
    if not affordable:  # only possible with an explicit budget: take the lowest-P99 delay
        chosen = min(ordered, key=lambda p: (p.p99_ms, p.delay_us))
        rule = f"no delay met {budget_text}; chose the lowest P99"
        return DelayChoice(points=ordered, chosen=chosen, p99_budget_ms=budget, rule=rule)
    best = max(p.throughput for p in affordable)
    chosen = next(p for p in affordable if p.throughput >= best * (1 - throughput_tolerance))
    rule = (
        f"smallest delay with {budget_text} and throughput within {throughput_tolerance:.0%} of the best such delay"
    )
    return DelayChoice(points=ordered, chosen=chosen, p99_budget_ms=budget, rule=rule)
