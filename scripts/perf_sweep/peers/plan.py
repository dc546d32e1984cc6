"""What one peer comparison measures: the models, the targets, the load levels, the timing.

Every target gets the same levels: a closed loop at each concurrency (warm-up excluded, a fixed
measuring window), then open-loop Poisson arrivals at the same absolute rates for every target.
The rates are fractions of the reference target's best closed-loop throughput (the minimal
server, measured first), so they mean the same load for every target on this machine.
Pure: no process is started here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

from perf_sweep.errors import SweepPlanError

FULL_CONCURRENCIES = (1, 2, 4, 8, 16, 32)
QUICK_CONCURRENCIES = (1, 4, 16)


class ModelKind(Enum):
    """The two served models every target is asked to serve, by their served names."""

    DIGITS = "digit_classifier"
    TEXT = "text_embedder"

    @property
    def unit(self) -> str:
        return "images/s" if self is ModelKind.DIGITS else "texts/s"


class TargetKind(Enum):
    MINIMAL = "minimal_fastapi"
    PYTRITON = "pytriton"
    INFINITY = "infinity_emb"
    PROJECT = "this_project"

    @property
    def is_peer(self) -> bool:
        return self is not TargetKind.PROJECT

    def serves(self) -> tuple[ModelKind, ...]:
        return (ModelKind.TEXT,) if self is TargetKind.INFINITY else (ModelKind.DIGITS, ModelKind.TEXT)


#: Measured in this order: the minimal server first (it sets the Poisson rates), this project last.
TARGET_ORDER = (TargetKind.MINIMAL, TargetKind.PYTRITON, TargetKind.INFINITY, TargetKind.PROJECT)
#: The peer this project's P50 at c=1 is judged against (perf_sweep.peers.verdicts.p50_verdict): the
#: minimal server, what one request costs with little but the model around it.
REFERENCE_TARGET = TargetKind.MINIMAL


class LoadMode(Enum):
    CLOSED = "closed"
    POISSON = "poisson"


@dataclass(frozen=True)
class LoadLevel:
    """One level: `value` clients in a closed loop, or Poisson arrivals at `value` requests/s."""

    mode: LoadMode
    value: float
    warmup_s: float
    window_s: float

    def __post_init__(self) -> None:
        if not (self.value > 0 and math.isfinite(self.value)):
            raise SweepPlanError(f"a load level needs a positive finite `value`, got {self.value!r}.")
        if self.mode is LoadMode.CLOSED and self.value != int(self.value):
            raise SweepPlanError(f"a closed-loop level needs a whole concurrency, got {self.value}.")
        if self.warmup_s < 0 or not self.window_s > 0:
            raise SweepPlanError(f"need `warmup_s` >= 0 and `window_s` > 0, got {self.warmup_s} and {self.window_s}.")

    @property
    def label(self) -> str:
        return f"c={int(self.value)}" if self.mode is LoadMode.CLOSED else f"poisson {self.value:g}/s"


@dataclass(frozen=True)
class SuiteTiming:
    """How long each level runs and which levels there are."""

    concurrencies: tuple[int, ...] = FULL_CONCURRENCIES
    rate_fractions: tuple[float, ...] = (0.25, 0.5, 0.8)
    warmup_s: float = 2.0
    window_s: float = 10.0
    #: A request without an answer after this long is counted as a timeout.
    request_timeout_s: float = 10.0
    #: A level starts once the machine's busy cores are within this margin of the idle baseline
    #: measured before any target started (`machine_settled`) ...
    quiet_margin_cores: float = 0.35
    #: ... or after this long regardless (the level then records that it started on a busy machine).
    quiet_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.concurrencies or any(c < 1 for c in self.concurrencies):
            raise SweepPlanError(f"`concurrencies` {list(self.concurrencies)} must be a non-empty list of integers >= 1.")
        if list(self.concurrencies) != sorted(set(self.concurrencies)):
            raise SweepPlanError(f"`concurrencies` {list(self.concurrencies)} must be strictly increasing.")
        if any(not 0 < f <= 2 for f in self.rate_fractions):
            raise SweepPlanError(f"`rate_fractions` {list(self.rate_fractions)} must lie in (0, 2] (of the reference peak).")
        if not self.request_timeout_s > 0:
            raise SweepPlanError(f"`request_timeout_s` = {self.request_timeout_s} must be > 0.")
        if not self.quiet_margin_cores > 0 or self.quiet_timeout_s < 0:
            raise SweepPlanError(f"`quiet_margin_cores` = {self.quiet_margin_cores} must be > 0 and "
                                 f"`quiet_timeout_s` = {self.quiet_timeout_s} >= 0.")
        LoadLevel(LoadMode.CLOSED, 1, self.warmup_s, self.window_s)  # validates the two durations

    @classmethod
    def quick(cls) -> "SuiteTiming":
        """A development smoke run: three concurrencies, one Poisson rate, 1 s + 2 s per level."""
        return cls(concurrencies=QUICK_CONCURRENCIES, rate_fractions=(0.5,), warmup_s=1.0, window_s=2.0,
                   request_timeout_s=5.0)

    def seconds_per_target_model(self) -> float:
        levels = len(self.concurrencies) + len(self.rate_fractions)
        return levels * (self.warmup_s + self.window_s)


def closed_loop_levels(timing: SuiteTiming) -> tuple[LoadLevel, ...]:
    return tuple(LoadLevel(LoadMode.CLOSED, c, timing.warmup_s, timing.window_s) for c in timing.concurrencies)


def poisson_levels(reference_peak: float | None, timing: SuiteTiming) -> tuple[LoadLevel, ...]:
    """The Poisson rates, `rate_fractions` of the reference target's best closed-loop throughput
    (items/s; one item per request). None or 0 (the reference measured nothing): no Poisson levels."""
    if not reference_peak or not math.isfinite(reference_peak):
        return ()
    rates = sorted({max(1.0, round(f * reference_peak, 1)) for f in timing.rate_fractions})
    return tuple(LoadLevel(LoadMode.POISSON, r, timing.warmup_s, timing.window_s) for r in rates)


def interleaved(levels: Sequence[LoadLevel], targets: Sequence[TargetKind]) -> tuple[tuple[LoadLevel, TargetKind], ...]:
    """(level, target) in the order they are measured: each level on every target back to back, the
    target order reversed on every other level. Why: a shared host drifts by tens of percent within
    a run (the in-process limit before and after the targets has differed by 40%); measured one
    target after the other, the last one would take all of a slowdown, while back to back at each
    level every ratio compares windows a few seconds apart."""
    return tuple((level, target) for i, level in enumerate(levels)
                 for target in (tuple(targets) if i % 2 == 0 else tuple(reversed(targets))))


#: Consecutive samples (perf_sweep.peers.machine.QUIET_SAMPLE_S apart) that must be under the bar.
QUIET_SAMPLES = 2


def machine_settled(recent_busy_cores: Sequence[float], baseline_busy_cores: float, margin_cores: float,
                    samples: int = QUIET_SAMPLES) -> bool:
    """Whether the last `samples` readings of busy cores are all within `margin_cores` of the idle
    baseline. Why wait at all: a target overloaded at the previous level (a peer whose queue grew
    far past the client's timeout at 0.8 x the reference rate) keeps computing its backlog after
    its window ends, and the next target would be measured on a machine that is not its own (seen
    on a 2-core EPYC: this project's text level at 418/s ran after two such peers, its load
    generator sent 287 ms late at P99 and 449 requests took >= 0.45 s, against 5.5 ms and 0
    for the minimal server that ran before them)."""
    tail = list(recent_busy_cores)[-samples:]
    return len(tail) == samples and all(busy <= baseline_busy_cores + margin_cores for busy in tail)


def plan_targets(wanted: Sequence[TargetKind] | None = None) -> tuple[TargetKind, ...]:
    """The targets to measure, in TARGET_ORDER; the project is always among them (every ratio
    is about it)."""
    chosen = set(wanted or TARGET_ORDER) | {TargetKind.PROJECT}
    return tuple(t for t in TARGET_ORDER if t in chosen)


def estimated_seconds(targets: Sequence[TargetKind], models: Sequence[ModelKind], timing: SuiteTiming,
                      startup_s: float = 45.0, limits_s: float = 90.0) -> float:
    """A rough duration of the run (measuring, each target's start, the limit twice), for the progress line."""
    pairs = sum(1 for t in targets for m in t.serves() if m in models)
    return pairs * timing.seconds_per_target_model() + len(targets) * startup_s + limits_s
