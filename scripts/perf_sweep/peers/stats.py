"""One level's numbers from its requests: every request accounted for, percentiles, throughput.

A level sends requests for `warmup_s`, then for `window_s`. A request belongs to the phase in
which it was due (`scheduled_s`: when a closed-loop client sent it, when a Poisson arrival was
planned), and every one is awaited until its answer, an explicit error or the request timeout:
sent = warm-up + measured, and measured = ok + http errors + wrong answers + timeouts +
connection errors, printed per level. Latency runs from `scheduled_s` to the end of the answer
(for Poisson it includes any wait in the client: an open loop's latency starts at the arrival).
Percentiles are over the measured requests that were answered correctly; throughput is the
correct answers that COMPLETED inside the window divided by its length (what the target
delivered while it was loaded). Pure.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any, Mapping, Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.plan import LoadLevel, LoadMode
from perf_sweep.results import STALL_MS


class Outcome(Enum):
    OK = "ok"
    HTTP_ERROR = "http_error"  # an answer with a non-200 status (503 from a full queue, 500, ...)
    WRONG_ANSWER = "wrong_answer"  # 200, but the wrong shape or values (codec.AnswerCheck)
    TIMEOUT = "timeout"  # no answer within the request timeout
    CONNECTION_ERROR = "connection_error"  # refused, reset, closed mid-answer


@dataclass(frozen=True)
class RequestRecord:
    """One request. Times are seconds from the start of the level."""

    index: int
    scheduled_s: float
    sent_s: float
    done_s: float
    outcome: Outcome
    detail: str | None = None
    score: float = math.nan  # codec.AnswerCheck's score (cosine, or argmax agreement)

    @property
    def latency_ms(self) -> float:
        return (self.done_s - self.scheduled_s) * 1e3


@dataclass(frozen=True)
class LevelSummary:
    target: str
    model: str
    mode: str
    load: float
    label: str
    warmup_s: float
    window_s: float
    sent: int
    warmup_requests: int
    measured: int
    outcomes: Mapping[str, int]
    ok: int
    throughput: float  # correct answers completed in the window per second (one item per request)
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    stalled: int  # measured correct answers that took >= STALL_MS
    send_lag_p99_ms: float  # how late the client sent (Poisson): the client keeping up
    min_score: float
    client_cpu: float  # the load generator's CPU time / wall time (1.0 = one core)
    first_error: str | None
    #: This project's levels: what its server saw (perf_sweep.peers.inside_server.InsideServer.as_dict).
    server: Mapping[str, float] | None = None
    #: The host's speed-up of a call on every core over one, just before the window
    #: (perf_sweep.peers.machine.HostParallelism; None: not probed, e.g. on one core).
    host_speedup: float | None = None
    #: The same probe's 1-thread call (ms): the host's own speed just before the window, which drifts by
    #: tens of percent over a session on these KVM hosts (docs/performance.md, "Tried and not kept
    #: (2026-12-06, morning)"). None: not probed.
    host_one_thread_ms: float | None = None

    @property
    def errors(self) -> int:
        return self.measured - self.ok

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LevelSummary":
        # levels.jsonl of earlier runs lacks the fields added since (`server`, `host_speedup`, `host_one_thread_ms`):
        # their defaults apply, the 1-thread time from the probe's own record where there is one; a missing
        # required field is the constructor's TypeError naming it
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        probe = data.get("host_parallelism")
        if "host_one_thread_ms" not in values and isinstance(probe, Mapping) and "one_thread_ms" in probe:
            values["host_one_thread_ms"] = probe["one_thread_ms"]
        return cls(**values)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def summarize_level(records: Sequence[RequestRecord], level: LoadLevel, target: str, model: str,
                    window_start_s: float, client_cpu: float = math.nan) -> LevelSummary:
    """The summary of one level whose window ran from `window_start_s` for `level.window_s`."""
    window_end = window_start_s + level.window_s
    late = [r for r in records if r.scheduled_s >= window_end]
    if late:
        raise SweepPlanError(f"{len(late)} requests were due after the window closed ({target} {model} {level.label}); "
                             "the load generator must stop sending at the end of the window.")
    measured = [r for r in records if r.scheduled_s >= window_start_s]
    ok = [r for r in measured if r.outcome is Outcome.OK]
    latencies = sorted(r.latency_ms for r in ok)
    completed_in_window = sum(1 for r in records if r.outcome is Outcome.OK and window_start_s <= r.done_s < window_end)
    counts = Counter(r.outcome.value for r in measured)
    errors = [r for r in measured if r.outcome is not Outcome.OK]
    scores = [r.score for r in ok if not math.isnan(r.score)]
    return LevelSummary(
        target=target, model=model, mode=level.mode.value, load=level.value, label=level.label,
        warmup_s=level.warmup_s, window_s=level.window_s, sent=len(records),
        warmup_requests=len(records) - len(measured), measured=len(measured),
        outcomes={o.value: counts.get(o.value, 0) for o in Outcome}, ok=len(ok),
        throughput=completed_in_window / level.window_s,
        p50_ms=percentile(latencies, 50), p95_ms=percentile(latencies, 95), p99_ms=percentile(latencies, 99),
        mean_ms=float(np.mean(latencies)) if latencies else math.nan,
        stalled=sum(latency >= STALL_MS for latency in latencies),
        send_lag_p99_ms=percentile([(r.sent_s - r.scheduled_s) * 1e3 for r in measured], 99),
        min_score=min(scores) if scores else math.nan, client_cpu=client_cpu,
        first_error=(f"{errors[0].outcome.value}: {errors[0].detail}" if errors else None),
    )


def accounting_line(summary: LevelSummary) -> str:
    """The per-level progress line: every request accounted for."""
    parts = ", ".join(f"{name} {count}" for name, count in summary.outcomes.items() if count or name == "ok")
    return (f"{summary.target} {summary.model} {summary.label}: sent {summary.sent} = warm-up {summary.warmup_requests} + "
            f"measured {summary.measured} ({parts}); {summary.throughput:.1f} items/s, P50 {summary.p50_ms:.2f} / "
            f"P95 {summary.p95_ms:.2f} / P99 {summary.p99_ms:.2f} ms; client CPU {summary.client_cpu:.0%} of a core"
            + ("" if summary.host_speedup is None else f"; host x{summary.host_speedup:.2f} on every core")
            + _server_part(summary.server))


def _server_part(server: Mapping[str, float | None] | None) -> str:
    """`; server: ...` for this project's levels (perf_sweep.peers.inside_server), else nothing."""
    if not server:
        return ""

    def figure(key: str) -> str:
        value = server.get(key)
        return "-" if value is None else f"{value:.2f}"

    return (f"; server: {figure('requests_per_execution')} requests per execution, queue {figure('queue_ms_per_request')} ms, "
            f"ONNX Runtime {figure('framework_ms_per_execution')} + rest of execute "
            f"{figure('rest_of_execute_ms_per_execution')} ms per execution"
            + ("" if server.get("wide_session_share") is None else f", {server['wide_session_share']:.0%} of calls wide"))


def best_closed_loop_throughput(summaries: Sequence[LevelSummary]) -> float | None:
    good = [s.throughput for s in summaries if s.mode == LoadMode.CLOSED.value and s.ok > 0]
    return max(good) if good else None
