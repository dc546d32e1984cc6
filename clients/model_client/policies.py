"""What a client does when the server pushes back: retry with backoff, degrade to a smaller
model, and keep each request within its priority's size (the server's starvation guarantee).

Everything here is pure: frozen dataclasses that validate themselves, and functions of them. The
loops that sleep and call servers are `model_client.resilient` (blocking) and `model_client.aio`
(asyncio); both ask `next_retry_delay` what to do, so they cannot disagree.

Why these rules (docs/overload.md):
- Retry only what a later identical request can fix: HTTP 503 / gRPC UNAVAILABLE (queue full,
  queue timeout) and, optionally, an unreachable server (a partition being restarted). Never a bad
  input, an unknown model or a request too large for its priority.
- Exponential backoff with FULL jitter (a uniform draw in [0, ceiling]) so that many clients
  rejected by the same full queue do not come back in lockstep; bounded by attempts AND a total
  deadline, so a caller is never held longer than it asked for.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from model_client.errors import ClientError, OverloadedError, RequestRejectedError, ServerUnavailableError

DEFAULT_SERVING_CONFIG = Path(__file__).resolve().parents[2] / "model_repository" / "serving.toml"
#: The small classifier shipped for overload (serving.toml: digit_classifier_small).
DIGIT_FALLBACKS = {"digit_classifier": "digit_classifier_small"}
REALTIME_LEVEL = 1


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ClientError(message)


@dataclass(frozen=True)
class RetryPolicy:
    """Retry 503/UNAVAILABLE with exponential backoff and full jitter, within bounds."""

    #: Rounds in total, the first included (1 = never retry).
    max_attempts: int = 4
    #: Ceiling of the first backoff; each retry multiplies it by `multiplier`, up to `max_delay_s`.
    base_delay_s: float = 0.05
    multiplier: float = 2.0
    max_delay_s: float = 2.0
    #: Total time budget of one call, attempts and sleeps included; also sent to the server as the
    #: request's queue timeout (never longer than what is left), so it drops what we gave up on.
    deadline_s: float = 10.0
    #: Also retry when nothing answers (connection refused): rides out a partition restart.
    retry_unreachable: bool = True

    def __post_init__(self) -> None:
        _check(isinstance(self.max_attempts, int) and 1 <= self.max_attempts <= 100,
               f"RetryPolicy.max_attempts = {self.max_attempts!r}: allowed an integer between 1 and 100.")
        _check(self.base_delay_s > 0, f"RetryPolicy.base_delay_s = {self.base_delay_s}: allowed > 0.")
        _check(self.multiplier >= 1, f"RetryPolicy.multiplier = {self.multiplier}: allowed >= 1.")
        _check(self.max_delay_s >= self.base_delay_s,
               f"RetryPolicy.max_delay_s = {self.max_delay_s}: allowed >= base_delay_s ({self.base_delay_s}).")
        _check(self.deadline_s > 0, f"RetryPolicy.deadline_s = {self.deadline_s}: allowed > 0.")

    def describe(self) -> str:
        return f"up to {self.max_attempts} attempt(s) within {self.deadline_s:g} s"


#: Fail fast: one attempt, no sleeping (e.g. for load generators that count rejections).
NO_RETRY = RetryPolicy(max_attempts=1)


def backoff_ceiling_s(policy: RetryPolicy, retry_index: int) -> float:
    """Upper end of the jitter window before retry number `retry_index` (0 = the first retry)."""
    if retry_index < 0:
        raise ClientError(f"retry_index = {retry_index}: allowed >= 0.")
    # Compare exponents first so huge indices never overflow a float.
    if retry_index * math.log(policy.multiplier) > math.log(policy.max_delay_s / policy.base_delay_s):
        return policy.max_delay_s
    return min(policy.max_delay_s, policy.base_delay_s * policy.multiplier ** retry_index)


def backoff_schedule(policy: RetryPolicy, rng: random.Random) -> tuple[float, ...]:
    """The sleeps before retries 1..max_attempts-1: full jitter, uniform in [0, ceiling].

    Pure given `rng`: the same seed gives the same schedule (that is how it is tested)."""
    return tuple(rng.uniform(0.0, backoff_ceiling_s(policy, k)) for k in range(policy.max_attempts - 1))


def is_retryable(error: BaseException, policy: RetryPolicy) -> bool:
    """503/UNAVAILABLE (queue full, queue timeout) always; unreachable if the policy says so."""
    if isinstance(error, OverloadedError):
        return True
    return policy.retry_unreachable and isinstance(error, ServerUnavailableError)


def next_retry_delay(policy: RetryPolicy, error: BaseException, attempts_made: int, elapsed_s: float,
                     schedule: tuple[float, ...]) -> float | None:
    """Seconds to sleep before the next attempt, or None to give up (and re-raise `error`).

    Gives up on a non-retryable error, after `max_attempts`, or when sleeping would cross the
    deadline (a retry that cannot start in time is not attempted)."""
    if not is_retryable(error, policy) or attempts_made >= policy.max_attempts:
        return None
    delay = schedule[attempts_made - 1]
    if elapsed_s + delay >= policy.deadline_s:
        return None
    return delay


def gave_up(error: ClientError, attempts_made: int, elapsed_s: float, policy: RetryPolicy) -> ClientError:
    """The last error, same type, with how long we tried: callers still catch OverloadedError."""
    if not is_retryable(error, policy):
        return error
    return type(error)(
        f"{error} Gave up after {attempts_made} attempt(s) in {elapsed_s:.2f} s ({policy.describe()})."
    )


def server_timeout_us(requested_us: int | None, remaining_s: float) -> int:
    """Queue timeout to send: the caller's, shortened to what is left of the deadline (>= 1 ms)."""
    remaining_us = max(1000, int(remaining_s * 1e6))
    return remaining_us if requested_us is None else max(1, min(int(requested_us), remaining_us))


@dataclass(frozen=True)
class FallbackPolicy:
    """Degrade to a smaller model when the primary answers 503/UNAVAILABLE (overload stage 2).

    Only for the priority levels listed: realtime callers prefer a slightly worse answer now;
    batch work should back off and keep its model (docs/overload.md)."""

    #: (primary model, smaller model) pairs.
    pairs: tuple[tuple[str, str], ...]
    levels: frozenset[int] = field(default_factory=lambda: frozenset({REALTIME_LEVEL}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "pairs", tuple((str(a), str(b)) for a, b in self.pairs))
        object.__setattr__(self, "levels", frozenset(self.levels))
        primaries = [a for a, _ in self.pairs]
        _check(len(set(primaries)) == len(primaries), f"FallbackPolicy.pairs: a primary model appears twice in {primaries}.")
        for primary, fallback in self.pairs:
            _check(bool(primary) and bool(fallback) and primary != fallback,
                   f"FallbackPolicy.pairs: ({primary!r}, {fallback!r}) must name two different models.")
        _check(bool(self.levels) and all(isinstance(v, int) and v >= 1 for v in self.levels),
               f"FallbackPolicy.levels = {sorted(self.levels)}: allowed a non-empty set of levels >= 1.")

    @classmethod
    def of(cls, fallbacks: Mapping[str, str], levels=(REALTIME_LEVEL,)) -> "FallbackPolicy":
        return cls(tuple(sorted(fallbacks.items())), frozenset(levels))

    def fallback_for(self, model: str, level: int) -> str | None:
        if level not in self.levels:
            return None
        return dict(self.pairs).get(model)


@dataclass(frozen=True)
class PriorityLimits:
    """Items per request at each priority level, and the default level (from serving.toml).

    The starvation bound (docs/priorities.md) holds only while callers keep these sizes: work at
    the lowest level is split into requests of at most its size; a larger request above it is
    refused before it is sent (send bulk work at the lowest priority instead)."""

    default_level: int
    #: (level, max_request_batch_size), one per level.
    max_items: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        levels = [lv for lv, _ in self.max_items]
        _check(levels == list(range(1, len(levels) + 1)),
               f"PriorityLimits.max_items levels = {levels}: allowed 1..N without gaps.")
        _check(all(n >= 1 for _, n in self.max_items), f"PriorityLimits.max_items = {self.max_items}: sizes must be >= 1.")
        _check(self.default_level in levels, f"PriorityLimits.default_level = {self.default_level}: allowed one of {levels}.")

    @classmethod
    def from_serving_config(cls, path: str | Path = DEFAULT_SERVING_CONFIG) -> "PriorityLimits":
        from serving.errors import ServingError  # lazy: the client library works without it
        from serving.spec import load_serving_spec

        try:
            spec = load_serving_spec(path)
        except ServingError as exc:
            raise ClientError(f"cannot read priority limits: {exc}") from None
        return cls(spec.default_priority_level, tuple((p.level, p.max_request_batch_size) for p in spec.priorities))

    @property
    def lowest_level(self) -> int:
        return len(self.max_items)

    def effective_level(self, priority: int) -> int:
        """Triton's rule: 0 or a level above the last means the model's default level."""
        return priority if 1 <= priority <= self.lowest_level else self.default_level

    def limit(self, level: int) -> int:
        return dict(self.max_items)[level]

    def plan_requests(self, items: int, priority: int) -> tuple[tuple[int, int], ...]:
        """[start, stop) item ranges, one per request to send for `items` at `priority`."""
        if items < 1:
            raise RequestRejectedError(f"a request needs at least one item, got {items}.")
        level = self.effective_level(priority)
        limit = self.limit(level)
        if items > limit and level != self.lowest_level:
            raise RequestRejectedError(
                f"{items} items at priority level {level}: at most {limit} per request at this level "
                f"(serving.toml max_request_batch_size); send bulk work at level {self.lowest_level}, where it is split."
            )
        return tuple((start, min(start + limit, items)) for start in range(0, items, limit))
