"""What a client does when the server pushes back: retry with backoff, degrade to a smaller
model, and keep each request within its priority's size (the server's starvation guarantee).

Everything here is pure: frozen dataclasses that validate themselves, functions of them, and
`AttemptPlanner`, which makes every retry/fallback decision of one request without doing any I/O.
The loops that call servers and sleep are `model_client.resilient` (blocking) and
`model_client.aio` (asyncio); both are thin drivers of the same planner, so they cannot disagree.

Why these rules (docs/overload.md):
- Retry only what a later identical request can fix: HTTP 503 / gRPC UNAVAILABLE (queue full,
  queue timeout) and, optionally, an unreachable server (a partition being restarted). Never a bad
  input, an unknown model or a request too large for its priority.
- Exponential backoff with FULL jitter (a uniform draw in [0, ceiling]) so that many clients
  rejected by the same full queue do not come back in lockstep; bounded by attempts AND a total
  deadline, so a caller is never held longer than it asked for.
- An unreachable server is retried until the deadline, not for `max_attempts`: a restarted
  partition is back in ~5 s (docs/partitions.md), and four quick tries (0.35 s of sleeps at most)
  gave up long before; each retry waits at least UNREACHABLE_RETRY_FLOOR_S.
- With a fallback, the primary gets at most PRIMARY_SHARE_WITH_FALLBACK of what is left of the
  deadline: a hung primary (answering nothing, not yet restarted by the supervisor) must leave time
  for the fallback, which is what a fallback is for.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from model_client.errors import ClientError, ModelNotFoundError, OverloadedError, RequestRejectedError, ServerUnavailableError

from contracts.layout import SERVING_CONFIG as DEFAULT_SERVING_CONFIG
#: The small classifier shipped for overload (serving.toml: digit_classifier_small).
DIGIT_FALLBACKS = {"digit_classifier": "digit_classifier_small"}
REALTIME_LEVEL = 1


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ClientError(message)


#: The longest call deadline: a day (infinity crashed the queue timeout's conversion to microseconds).
MAX_DEADLINE_S = 86_400.0


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
    #: Also retry when nothing answers (connection refused), until the deadline whatever
    #: `max_attempts` says (unless it is 1): rides out a partition restart (~5 s).
    retry_unreachable: bool = True

    def __post_init__(self) -> None:
        _check(isinstance(self.max_attempts, int) and 1 <= self.max_attempts <= 100,
               f"RetryPolicy.max_attempts = {self.max_attempts!r}: allowed an integer between 1 and 100.")
        _check(self.base_delay_s > 0, f"RetryPolicy.base_delay_s = {self.base_delay_s}: allowed > 0.")
        _check(self.multiplier >= 1, f"RetryPolicy.multiplier = {self.multiplier}: allowed >= 1.")
        _check(self.max_delay_s >= self.base_delay_s,
               f"RetryPolicy.max_delay_s = {self.max_delay_s}: allowed >= base_delay_s ({self.base_delay_s}).")
        _check(isinstance(self.deadline_s, (int, float)) and 0 < self.deadline_s <= MAX_DEADLINE_S,
               f"RetryPolicy.deadline_s = {self.deadline_s!r}: allowed seconds > 0 and <= {MAX_DEADLINE_S:g} (a day; "
               f"it is also sent as the requests' queue timeout, in microseconds).")

    def describe(self) -> str:
        unreachable = "; an unreachable server until the deadline" if self.retry_unreachable and self.max_attempts > 1 else ""
        return f"up to {self.max_attempts} attempt(s) within {self.deadline_s:g} s{unreachable}"


#: Fail fast: one attempt, no sleeping (e.g. for load generators that count rejections).
NO_RETRY = RetryPolicy(max_attempts=1)
#: Least sleep before retrying an unreachable server: a refused connection costs nothing to find out,
#: so without a floor a restart's ~5 s would be spent in dozens of tries.
UNREACHABLE_RETRY_FLOOR_S = 0.25
#: Share of what is left of the deadline the primary model may take when a fallback follows.
PRIMARY_SHARE_WITH_FALLBACK = 0.5


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
                     schedule: tuple[float, ...], unreachable_attempts: int = 0) -> float | None:
    """Seconds to sleep before the next attempt, or None to give up (and re-raise `error`).

    Gives up on a non-retryable error, after `max_attempts` attempts that reached a server (those
    that found none, `unreachable_attempts` of the `attempts_made`, do not count: they retry until
    the deadline, at least UNREACHABLE_RETRY_FLOOR_S apart), or when sleeping would cross the
    deadline (a retry that cannot start in time is not attempted)."""
    if not is_retryable(error, policy) or policy.max_attempts == 1:
        return None
    if isinstance(error, ServerUnavailableError):
        delay = UNREACHABLE_RETRY_FLOOR_S + schedule[min(max(unreachable_attempts, 1), len(schedule)) - 1]
    else:
        answered = attempts_made - unreachable_attempts
        if answered >= policy.max_attempts:
            return None
        delay = schedule[max(answered, 1) - 1]
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
    """Queue timeout to send: the caller's, shortened to what is left of the deadline (>= 1 ms).
    None or 0 (Triton's "the model's default") sends what is left of the deadline: a 0 must not
    become 1 us, which rejects any request that has to wait at all."""
    remaining_us = max(1000, int(remaining_s * 1e6))
    return remaining_us if not requested_us or requested_us < 0 else min(int(requested_us), remaining_us)


def attempt_error(errors: Sequence[tuple[str, ClientError]]) -> ClientError:
    """The error of one attempt: the primary model's, and what its fallback said. Of the primary's
    type, which decides whether to retry: the fallback is tried only after a retryable error of the
    primary, and a fallback that is missing or refuses the request (a smaller model may take smaller
    batches) must not stop the primary from being retried."""
    if len(errors) == 1:
        return errors[0][1]
    (_, first), (fallback, last) = errors[0], errors[-1]
    return type(first)(f"{first} Fallback {fallback!r}: {last}")


@dataclass(frozen=True)
class SendRequest:
    """Send the request to `model` now, with these timeouts (both shortened to the deadline)."""

    model: str
    #: Queue timeout for the server (`server_timeout_us`).
    timeout_us: int
    #: Deadline of the whole call on the client side (every transport: gRPC as its own deadline, HTTP by a timer).
    client_timeout_s: float


@dataclass(frozen=True)
class SleepBeforeRetry:
    """Every model of this attempt failed with a retryable error: sleep, then ask again."""

    seconds: float


class AttemptPlanner:
    """Sans-IO: which model to call next, whether to fall back, whether and how long to wait before
    retrying, and the error to raise in the end, for ONE request. The blocking and the asyncio
    clients only carry out its steps, so their behaviour is the same by construction.

    Protocol (`now_s` is the caller's monotonic clock, the same one as `start_s`):
    - `next_step(now_s)` returns a `SendRequest` or a `SleepBeforeRetry`, or raises the final
      error (`gave_up`: same type as the last error, saying how long it tried).
    - After a `SendRequest` that fails with a `ClientError`, call `record_failure(error)` and ask
      again; one that succeeds ends the request (`calls` counts the server calls made).
    - After a `SleepBeforeRetry`, sleep that long and ask again.

    Within an attempt the models are tried in order (primary, then its fallback) at once; the
    fallback is skipped when the primary's error is neither retryable nor "not served", or the
    deadline has passed.
    """

    def __init__(self, models: Sequence[str], retry: RetryPolicy, schedule: Sequence[float],
                 timeout_us: int | None, start_s: float):
        _check(len(models) >= 1, "AttemptPlanner.models is empty: allowed the primary model, then its fallback.")
        _check(len(schedule) >= retry.max_attempts - 1,
               f"AttemptPlanner.schedule has {len(schedule)} sleep(s): allowed >= max_attempts - 1 "
               f"({retry.max_attempts - 1}); draw it with backoff_schedule.")
        self.models, self.retry, self.schedule = tuple(models), retry, tuple(schedule)
        self.timeout_us, self.start_s = timeout_us, start_s
        #: Server calls and attempts (rounds over the models) started so far; attempts that found no server.
        self.calls = self.attempts = self.unreachable_attempts = 0
        self._errors: list[tuple[str, ClientError]] = []  # this attempt's, one per model tried
        self._tried = 0  # models of this attempt sent so far
        self._in_attempt = False
        self._awaiting_result = False

    def next_step(self, now_s: float) -> SendRequest | SleepBeforeRetry:
        if self._awaiting_result:
            raise RuntimeError("AttemptPlanner.next_step after a SendRequest: report its failure with "
                               "record_failure first (a success ends the request).")
        elapsed = now_s - self.start_s
        if not self._in_attempt:
            if elapsed >= self.retry.deadline_s:  # spent by the call's earlier requests, or a sleep that overran
                raise self._deadline_passed(elapsed) from None
            self.attempts, self._errors, self._tried, self._in_attempt = self.attempts + 1, [], 0, True
        if self._may_send_next(elapsed):
            model = self.models[self._tried]
            self._tried, self.calls, self._awaiting_result = self._tried + 1, self.calls + 1, True
            remaining = self.retry.deadline_s - elapsed
            if self._tried < len(self.models):  # a fallback follows: leave it time if this one hangs
                remaining *= PRIMARY_SHARE_WITH_FALLBACK
            return SendRequest(model, server_timeout_us(self.timeout_us, remaining), max(remaining, 0.001))
        self._in_attempt = False
        error = attempt_error(self._errors)
        self.unreachable_attempts += isinstance(error, ServerUnavailableError)
        delay = next_retry_delay(self.retry, error, self.attempts, elapsed, self.schedule, self.unreachable_attempts)
        if delay is None:
            raise gave_up(error, self.attempts, elapsed, self.retry) from None
        return SleepBeforeRetry(delay)

    def _deadline_passed(self, elapsed_s: float) -> ClientError:
        """Nothing is sent once the deadline has passed: the last attempt's error (as `gave_up`), or,
        before any attempt, an overload error saying where the time went."""
        if self._errors:
            return gave_up(attempt_error(self._errors), self.attempts, elapsed_s, self.retry)
        return OverloadedError(
            f"the call's deadline of {self.retry.deadline_s:g} s had passed ({elapsed_s:.2f} s) before this request "
            f"was sent: the call's earlier steps used it (its earlier requests, or fetching the model's metadata); allow a "
            f"longer deadline or send fewer items per call.")

    def record_failure(self, error: ClientError) -> None:
        if not self._awaiting_result:
            raise RuntimeError("AttemptPlanner.record_failure without a SendRequest to report on.")
        self._awaiting_result = False
        self._errors.append((self.models[self._tried - 1], error))

    def _may_send_next(self, elapsed_s: float) -> bool:
        """The first model always; the next one only after a retryable error, or a primary that is not
        served (unloaded, failed to load, not ready: its fallback is what a realtime caller wants then,
        where the call failed outright before), and within the deadline."""
        if not self._errors:
            return True
        last = self._errors[-1][1]
        primary_missing = len(self._errors) == 1 and isinstance(last, ModelNotFoundError)
        if self._tried >= len(self.models) or not (is_retryable(last, self.retry) or primary_missing):
            return False
        return self.retry.deadline_s - elapsed_s > 0


@dataclass(frozen=True)
class FallbackPolicy:
    """Degrade to a smaller model when the primary answers 503/UNAVAILABLE (overload stage 2), is
    unreachable, or is not served.

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
    #: A model's own sizes where serving.toml gives it some (`[models.<name>] max_request_batch_size`):
    #: model -> ((level, size), ...), every level; other models use `max_items`.
    model_items: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        levels = [lv for lv, _ in self.max_items]
        _check(levels == list(range(1, len(levels) + 1)),
               f"PriorityLimits.max_items levels = {levels}: allowed 1..N without gaps.")
        _check(all(n >= 1 for _, n in self.max_items), f"PriorityLimits.max_items = {self.max_items}: sizes must be >= 1.")
        _check(self.default_level in levels, f"PriorityLimits.default_level = {self.default_level}: allowed one of {levels}.")
        for model, items in dict(self.model_items).items():
            _check([lv for lv, _ in items] == levels and all(n >= 1 for _, n in items),
                   f"PriorityLimits.model_items[{model!r}] = {items}: expected a size >= 1 for each of the levels {levels}.")

    @classmethod
    def from_serving_config(cls, path: str | Path = DEFAULT_SERVING_CONFIG) -> "PriorityLimits":
        from contracts.errors import ServingError  # lazy: the client library works without it
        from contracts.serving_spec import load_serving_spec

        try:
            spec = load_serving_spec(path, allow_non_loopback=True)  # read for its sizes: where it binds is not ours
        except ServingError as exc:
            raise ClientError(f"cannot read priority limits: {exc}") from None
        return cls.from_spec(spec)

    @classmethod
    def from_spec(cls, spec) -> "PriorityLimits":
        """The limits of a loaded `contracts.serving_spec.ServingSpec`: the shared sizes, and each model's
        own where it sets some."""
        sizes = lambda levels: tuple((p.level, p.max_request_batch_size) for p in levels)
        return cls(spec.default_priority_level, sizes(spec.priorities),
                   {m.name: sizes(spec.priorities_for(m)) for m in spec.models if m.max_request_batch_size})

    @property
    def lowest_level(self) -> int:
        return len(self.max_items)

    def effective_level(self, priority: int) -> int:
        """Triton's rule: 0 or a level above the last means the model's default level."""
        return priority if 1 <= priority <= self.lowest_level else self.default_level

    def limit(self, level: int, models: Sequence[str] = ()) -> int:
        """Items per request at `level`: the smallest of `models`' sizes (a part that falls back to
        another model is re-sent whole), the shared size when no model is named."""
        return self._limit_and_source(level, models)[0]

    def _limit_and_source(self, level: int, models: Sequence[str]) -> tuple[int, str]:
        """The limit, and where serving.toml sets it (the model whose size is the smallest)."""
        def source(model: str) -> str:
            if model in self.model_items:
                return f"models.{model}.max_request_batch_size"
            return f"serving.toml max_request_batch_size{f', {model} on the shared sizes' if model else ''}"

        return min((dict(self.model_items.get(model, self.max_items))[level], source(model)) for model in (models or ("",)))

    def plan_requests(self, items: int, priority: int, models: Sequence[str] = ()) -> tuple[tuple[int, int], ...]:
        """[start, stop) item ranges, one per request to send for `items` at `priority` to `models`
        (the primary, then its fallback)."""
        if items < 1:
            raise RequestRejectedError(f"a request needs at least one item, got {items}.")
        level = self.effective_level(priority)
        limit, source = self._limit_and_source(level, models)
        if items > limit and level != self.lowest_level:
            raise RequestRejectedError(
                f"{items} items at priority level {level}: at most {limit} per request at this level "
                f"({source}); send bulk work at level {self.lowest_level}, where it is split."
            )
        return tuple((start, min(start + limit, items)) for start in range(0, items, limit))
