"""Calls that survive overload: retries with backoff, fallback to a smaller model, size limits.

`ResilientClient` (blocking) and `model_client.aio.AsyncResilientClient` (asyncio) do the same
thing, built from the same pure pieces (`plan_call`, `policies.AttemptPlanner`, `merge_parts`):

1. Split the items into requests the priority allows (`PriorityLimits`); refuse oversize
   realtime requests before sending anything.
2. Per request, per attempt: send to the model's endpoint (from run/manifest.json) with the queue
   timeout shortened to what is left of the deadline; on 503/UNAVAILABLE try the fallback model
   at once if the policy allows it for this priority (overload stage 2).
3. Between attempts sleep the jittered backoff; stop at `max_attempts` or the deadline and raise
   the last error, same type, saying how long it tried (overload stage 3 reaches the caller).

Steps 2 and 3 are decided by `AttemptPlanner` (no I/O); each client's `_request` only sends,
sleeps and reports failures back, with a blocking or an awaited call.
Every call ends in an `InferenceOutcome` or a `ClientError`: nothing is dropped silently.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, TypeVar

import numpy as np

from model_client.client import ModelInterface, Protocol, TritonModelClient, require_arrays
from model_client.endpoints import DEFAULT_MANIFEST, model_endpoints, resolve_url
from model_client.errors import ClientError, RequestRejectedError, ServerUnavailableError
from model_client.policies import (
    AttemptPlanner,
    FallbackPolicy,
    PriorityLimits,
    RetryPolicy,
    SendRequest,
    SleepBeforeRetry,
    backoff_schedule,
)

log = logging.getLogger("model_client")

T = TypeVar("T")


@dataclass(frozen=True)
class InferenceOutcome:
    """An answer, and how it was obtained."""

    outputs: dict[str, np.ndarray]
    requested_model: str
    #: The model that answered each request sent (one per item range).
    answered_by: tuple[str, ...]
    #: Server calls made in total (primary and fallback, all attempts, all requests).
    calls: int
    elapsed_s: float

    @property
    def degraded(self) -> bool:
        """True if any part was answered by a fallback model (overload stage 2)."""
        return any(m != self.requested_model for m in self.answered_by)


@dataclass(frozen=True)
class CallPlan:
    """The requests one call sends: item ranges, and the models to try in each attempt."""

    ranges: tuple[tuple[int, int], ...]
    models: tuple[str, ...]  # primary first, then its fallback if the priority allows one
    level: int | None


def item_count(inputs: Mapping[str, np.ndarray], model: str = "<model>") -> int:
    require_arrays(model, inputs)
    for name, array in inputs.items():
        if array.ndim == 0:  # a call is cut into requests along the first axis: a scalar has none
            raise RequestRejectedError(f"input {name!r} of {model!r} is a 0-d array (a scalar); expected an array whose "
                                       f"first axis is the batch, e.g. shape [1, ...] (np.atleast_1d, or [None] adds it).")
    sizes = {int(a.shape[0]) for a in inputs.values()} if inputs else set()
    if len(sizes) != 1:
        raise RequestRejectedError(f"inputs must share their first (batch) axis, got sizes {sorted(sizes)}.")
    return sizes.pop()


def models_to_try(model: str, level: int | None, fallback: FallbackPolicy | None) -> tuple[str, ...]:
    """The primary model, then its fallback where the policy allows one at this level."""
    smaller = fallback.fallback_for(model, level) if (fallback is not None and level is not None) else None
    return (model,) if smaller is None else (model, smaller)


def call_level(priority: int, limits: PriorityLimits | None) -> int | None:
    """The priority level a call is served at (None: the model's default, unknown without limits)."""
    if limits is None:
        return priority if priority >= 1 else None
    return limits.effective_level(priority)


def plan_call(model: str, inputs: Mapping[str, np.ndarray], priority: int,
              limits: PriorityLimits | None, fallback: FallbackPolicy | None) -> CallPlan:
    """Pure: how a call is cut into requests and which models each attempt may use."""
    items = item_count(inputs, model)
    level = call_level(priority, limits)
    models = models_to_try(model, level, fallback)
    ranges = ((0, items),) if limits is None else limits.plan_requests(items, priority, models)
    return CallPlan(ranges, models, level)


def slice_inputs(inputs: Mapping[str, np.ndarray], start: int, stop: int) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(a[start:stop]) for name, a in inputs.items()}


def merge_parts(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


class ResilientClientBase:
    """What the blocking and the asyncio resilient clients share: policies, the clock and sleep
    (injectable for tests), and one connection per server URL resolved from the manifest."""

    #: How a connection is made: (url, protocol, network_timeout_s) -> client.
    default_client_factory: Callable[..., object] = TritonModelClient
    default_sleep: Callable[[float], object] = staticmethod(time.sleep)

    def __init__(
        self,
        protocol: Protocol | str = Protocol.HTTP,
        url: str | None = None,
        manifest: Path = DEFAULT_MANIFEST,
        retry: RetryPolicy = RetryPolicy(),
        fallback: FallbackPolicy | None = None,
        limits: PriorityLimits | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        network_timeout_s: float = 30.0,
        client_factory: Callable[..., object] | None = None,
    ):
        self.protocol = Protocol(protocol)
        self.url, self.manifest = url, Path(manifest)
        self.retry, self.fallback, self.limits = retry, fallback, limits
        self._rng = rng or random.Random()
        self._sleep, self._clock = sleep or self.default_sleep, clock
        self._network_timeout_s = network_timeout_s
        #: Tests inject their own factory.
        self._client_factory = client_factory or self.default_client_factory
        self._clients: dict[str, object] = {}
        self._connecting = threading.Lock()
        self._said_unreachable: set[str] = set()

    def _record_failure(self, planner: AttemptPlanner, step: SendRequest, error: ClientError) -> None:
        """Report a failed send to the planner; the first time a server is found unreachable, say so
        (a warning on the `model_client` logger) with how long the call keeps trying: an unreachable
        server is retried until the deadline (it rides out a partition's restart), and a command run
        with no server up sat silent for those 10 s (a first-run review, 2026-12-07)."""
        planner.record_failure(error)
        if isinstance(error, ServerUnavailableError):
            url = resolve_url(step.model, self.protocol, self.url, self.manifest)
            if url not in self._said_unreachable:  # once per server, not once per request of a long call
                self._said_unreachable.add(url)
                if not self.retry.retry_unreachable:
                    return  # the call ends now, with this error: nothing more to announce
                # where a fallback follows it is asked at once (the planner's `_may_send_next`), and its
                # answer usually ends the call; retries only where the policy makes more than one attempt
                following = planner.models[planner.models.index(step.model) + 1:]
                fallback = f"Asking the fallback {following[0]!r} now" if following else ""
                if self.retry.max_attempts > 1:
                    retrying = (f"retrying until the call's deadline of {self.retry.deadline_s:g} s (RetryPolicy.deadline_s; "
                                f"--deadline-s on the command line)")
                    then = f"{fallback}; should it fail too, {retrying}" if fallback else retrying[0].upper() + retrying[1:]
                elif fallback:
                    then = f"{fallback} (no retries: max_attempts = 1)"
                else:
                    return
                log.warning("%s %s.", error, then)

    def now(self) -> float:
        """This client's clock (`time.monotonic` unless a test gave another): what `infer`'s
        `started_s` is measured on."""
        return self._clock()

    def _connect_primary(self, plan: CallPlan) -> None:
        """Make the primary model's connection before the first attempt is planned: a first call's
        set-up (importing tritonclient, ~0.1-0.3 s) then counts against its deadline and its queue
        timeout, where it overshot a 1 s deadline by 0.13-0.28 s (a review, 2026-12-07). A failure
        here is the first attempt's to report, with its retries."""
        try:
            self.client_for(plan.models[0])
        except ClientError:
            pass

    def client_for(self, model: str):
        """The connection to the server that serves `model`. A `url` names the primary models' server;
        a fallback may live elsewhere (its own partition), so the manifest is asked for it first (with
        `url` the fallback went to the primary's server, which did not serve it: never degraded)."""
        listed = model_endpoints(model, self.manifest) if self.url and self._fallback_only(model) else None
        # resolve_url returns a url it is given without reading the manifest again
        url = resolve_url(model, self.protocol, self.url if listed is None else listed.url(self.protocol), self.manifest)
        with self._connecting:  # threads sharing a gRPC client made one connection each and kept one (a review)
            if url not in self._clients:
                self._clients[url] = self._client_factory(url, self.protocol, self._network_timeout_s)
            return self._clients[url]

    def _fallback_only(self, model: str) -> bool:
        pairs = self.fallback.pairs if self.fallback is not None else ()
        return any(model == small for _, small in pairs) and all(model != big for big, _ in pairs)

    def _interface_plan(self, model: str, priority: int) -> CallPlan:
        """What `interface` asks for: one request, to the primary and, where the priority allows it,
        its fallback (which takes the same inputs; that is what makes it a fallback)."""
        return CallPlan(((0, 1),), models_to_try(model, call_level(priority, self.limits), self.fallback), None)

    def _attempt_planner(self, plan: CallPlan, timeout_us: int | None, call_start_s: float) -> AttemptPlanner:
        """The decisions of one request: its own jittered backoff schedule, and the deadline of the
        whole call it is part of (a call cut into several requests gets one deadline, not one each)."""
        return AttemptPlanner(plan.models, self.retry, backoff_schedule(self.retry, self._rng), timeout_us,
                              call_start_s)


class ResilientClient(ResilientClientBase):
    """Blocking client with retry, fallback and size limits; one per thread (HTTP connections are
    not shared across threads), or use `model_client.aio` for many calls at once."""

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> "ResilientClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], priority: int = 0,
              timeout_us: int | None = None, started_s: float | None = None) -> InferenceOutcome:
        """The items of `inputs`, answered within `retry.deadline_s`, counted from `started_s` (this
        client's `now()`) when an earlier step of the same call, such as its `interface`, shares the
        deadline, else from now."""
        start = self._clock() if started_s is None else started_s
        plan = plan_call(model, inputs, priority, self.limits, self.fallback)
        parts, answered_by, calls = [], [], 0
        for lo, hi in plan.ranges:  # one after another, all within the call's deadline
            outputs, used, n = self._request(plan, slice_inputs(inputs, lo, hi), priority, timeout_us, start)
            parts.append(outputs)
            answered_by.append(used)
            calls += n
        return InferenceOutcome(merge_parts(parts), model, tuple(answered_by), calls, self._clock() - start)

    def interface(self, model: str, priority: int = 0) -> ModelInterface:
        """The model's inputs and outputs, with a call's retries and fallback: from the primary, or,
        while it is unreachable or overloaded and `priority` allows the fallback, from the fallback.
        So a caller that needs tensor names before `infer` degrades as `infer` does instead of
        failing on the metadata."""
        interface, _, _ = self._with_retries(self._interface_plan(model, priority), None, self._clock(), lambda client, step: client.interface(
            step.model, client_timeout_s=step.client_timeout_s))
        return interface

    def _request(self, plan: CallPlan, inputs: dict[str, np.ndarray], priority: int,
                 timeout_us: int | None, call_start_s: float) -> tuple[dict[str, np.ndarray], str, int]:
        """One request with retries: (outputs, model that answered, server calls made)."""
        return self._with_retries(plan, timeout_us, call_start_s, lambda client, step: client.infer(
            step.model, inputs, priority=priority, timeout_us=step.timeout_us, client_timeout_s=step.client_timeout_s))

    def _with_retries(self, plan: CallPlan, timeout_us: int | None, call_start_s: float,
                      send: Callable[[object, SendRequest], T]) -> tuple[T, str, int]:
        """`send(client, step)` for each step the planner asks for: (its answer, the model that gave
        it, server calls made)."""
        self._connect_primary(plan)
        planner = self._attempt_planner(plan, timeout_us, call_start_s)
        while True:
            step = planner.next_step(self._clock())  # raises the final error when it gives up
            if isinstance(step, SleepBeforeRetry):
                self._sleep(step.seconds)
                continue
            try:
                answer = send(self.client_for(step.model), step)
            except ClientError as exc:  # 503/UNAVAILABLE or unreachable: the fallback may still answer
                self._record_failure(planner, step, exc)
                continue
            return answer, step.model, planner.calls
