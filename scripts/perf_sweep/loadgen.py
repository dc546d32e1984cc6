"""An open-loop load generator for what perf_analyzer cannot measure here.

perf_analyzer stops at the first rejected request, and it times a batch from the moment it is
sent; two measurements need more:

* the priority mix: realtime and batch traffic together, with rejections counted per priority
  (a saturating batch stream is expected to hit its queue limit);
* client-side static batching: a client that waits until `batch_size` requests have ARRIVED, then
  sends them as one batch. Each item's latency includes that wait to fill, which is the whole
  point of comparing it with dynamic batching at sparse load.

Arrivals are Poisson and planned up front from a seed (pure functions below); `run_open_loop`
only fires them on time with tritonclient's gRPC async API and records every request's outcome.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError, SweepRunError
from perf_sweep.results import STALL_MS


@dataclass(frozen=True)
class Stream:
    """One kind of traffic: `rate` arrivals per second, sent in requests of `batch_size` items.

    With `static_batching`, arrivals are grouped into fixed batches of `batch_size`: a request is
    sent when its last item arrives. Without it, every request carries `batch_size` items at once
    (e.g. an offline job submitting chunks) and `rate` counts requests.
    """

    name: str
    rate: float
    batch_size: int = 1
    priority: int | None = None
    static_batching: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise SweepPlanError("a stream needs a name.")
        if not self.rate > 0:
            raise SweepPlanError(f"stream `{self.name}`: `rate` = {self.rate} must be > 0.")
        if self.batch_size < 1:
            raise SweepPlanError(f"stream `{self.name}`: `batch_size` = {self.batch_size} must be >= 1.")
        if self.priority is not None and self.priority < 1:
            raise SweepPlanError(f"stream `{self.name}`: `priority` = {self.priority} must be >= 1 (1 is served first).")


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> np.ndarray:
    """Arrival times (s) of a Poisson process of `rate`/s on [0, duration_s)."""
    if not (rate > 0 and duration_s > 0):
        raise SweepPlanError(f"need rate > 0 and duration > 0, got rate={rate}, duration={duration_s}.")
    rng = np.random.default_rng(seed)
    expected = int(rate * duration_s * 1.5 + 50)
    times = np.cumsum(rng.exponential(1.0 / rate, size=expected))
    while times[-1] < duration_s:  # astronomically rare; keep drawing until the window is covered
        times = np.concatenate([times, times[-1] + np.cumsum(rng.exponential(1.0 / rate, size=expected))])
    return times[times < duration_s]


@dataclass(frozen=True)
class PlannedRequest:
    stream: str
    send_at: float
    #: When each item of the request arrived (== send_at unless statically batched).
    item_arrivals: tuple[float, ...]
    priority: int | None


def plan_requests(streams: Sequence[Stream], duration_s: float, seed: int = 0) -> list[PlannedRequest]:
    """Every request of every stream, merged in send order. Static batches that are still
    incomplete when the window closes are never sent (a static batcher would still be waiting)."""
    names = [s.name for s in streams]
    if len(set(names)) != len(names):
        raise SweepPlanError(f"stream names must be unique, got {names}.")
    planned: list[PlannedRequest] = []
    for i, stream in enumerate(streams):
        arrivals = poisson_arrivals(stream.rate, duration_s, seed + 1000 * i)
        if stream.static_batching:
            full = len(arrivals) // stream.batch_size * stream.batch_size
            for group in arrivals[:full].reshape(-1, stream.batch_size):
                planned.append(PlannedRequest(stream.name, float(group[-1]), tuple(map(float, group)), stream.priority))
        else:
            planned += [PlannedRequest(stream.name, float(t), (float(t),) * stream.batch_size, stream.priority)
                        for t in arrivals]
    return sorted(planned, key=lambda r: r.send_at)


@dataclass(frozen=True)
class Outcome:
    request: PlannedRequest
    sent_at: float
    done_at: float
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def rejected(self) -> bool:
        """Refused by Triton's queue policy (queue full, or timed out waiting in the queue)."""
        return self.error is not None and ("maximum queue size" in self.error or "timeout" in self.error.lower())

    def item_latencies_ms(self) -> list[float]:
        return [(self.done_at - arrival) * 1e3 for arrival in self.request.item_arrivals]


@dataclass(frozen=True)
class StreamSummary:
    stream: str
    priority: int | None
    requests: int
    items_ok: int
    rejected: int
    other_errors: int
    throughput: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    send_lag_p99_ms: float
    first_error: str | None
    stalled: int = 0

    @property
    def error_rate(self) -> float:
        return (self.rejected + self.other_errors) / self.requests if self.requests else float("nan")


def summarize(outcomes: Sequence[Outcome], stream: str, duration_s: float) -> tuple[StreamSummary, list[float]]:
    """Per-stream counts and item latency percentiles (ms); also returns the latencies for CDFs.
    Throughput is the items answered by the end of the `duration_s` window over its length: an
    answer that came while the backlog drained after the window was not delivered in it (counted,
    an overloaded variant read as carrying the whole offered load)."""
    mine = [o for o in outcomes if o.request.stream == stream]
    ok = [o for o in mine if o.ok]
    latencies = sorted(x for o in ok for x in o.item_latencies_ms())
    delivered = sum(len(o.request.item_arrivals) for o in ok if o.done_at <= duration_s)
    lags = [(o.sent_at - o.request.send_at) * 1e3 for o in mine]

    def pct(values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) if values else float("nan")

    errors = [o for o in mine if not o.ok]
    summary = StreamSummary(
        stream=stream, priority=mine[0].request.priority if mine else None, requests=len(mine),
        items_ok=len(latencies), rejected=sum(o.rejected for o in errors),
        other_errors=sum(not o.rejected for o in errors), throughput=delivered / duration_s,
        p50_ms=pct(latencies, 50), p95_ms=pct(latencies, 95), p99_ms=pct(latencies, 99),
        send_lag_p99_ms=pct(lags, 99), first_error=errors[0].error if errors else None,
        stalled=sum(latency >= STALL_MS for latency in latencies),
    )
    return summary, latencies


def run_open_loop(url: str, model: str, input_name: str, samples: np.ndarray, datatype: str,
                  planned: Sequence[PlannedRequest], drain_timeout_s: float = 30.0) -> list[Outcome]:
    """Fire `planned` requests at their times over gRPC (async), wait for all answers.

    `samples` is [N, *dims]; a request of k items takes k consecutive samples, cycling.
    """
    import tritonclient.grpc as grpcclient  # lazy: planning needs no client

    client = grpcclient.InferenceServerClient(url)
    outcomes: list[Outcome | None] = [None] * len(planned)
    pending = threading.Semaphore(0)
    cache: dict[tuple[int, int], list] = {}

    def inputs_for(index: int, size: int) -> list:
        key = (index % 32, size)  # a small pool of prepared inputs; their contents vary by key
        if key not in cache:
            rows = np.take(samples, range(index * size, index * size + size), axis=0, mode="wrap")
            tensor = grpcclient.InferInput(input_name, list(rows.shape), datatype)
            tensor.set_data_from_numpy(rows)
            cache[key] = [tensor]
        return cache[key]

    start = time.monotonic() + 0.2
    for index, request in enumerate(planned):
        delay = start + request.send_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent = time.monotonic() - start

        def done(result, error, index=index, request=request, sent=sent):
            outcomes[index] = Outcome(request, sent, time.monotonic() - start, None if error is None else str(error))
            pending.release()

        kwargs = {"priority": request.priority} if request.priority else {}
        client.async_infer(model, inputs_for(index, len(request.item_arrivals)), done, **kwargs)
    deadline = time.monotonic() + drain_timeout_s
    for _ in planned:
        if not pending.acquire(timeout=max(0.0, deadline - time.monotonic())):
            break
    client.close()
    missing = sum(o is None for o in outcomes)
    if missing:
        raise SweepRunError(f"{missing} of {len(planned)} requests to {model} at {url} got no answer within {drain_timeout_s:.0f} s.")
    return [o for o in outcomes if o is not None]
