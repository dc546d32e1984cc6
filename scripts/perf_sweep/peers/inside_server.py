"""What this project's own server says about one level of the peer comparison.

Why: the peer tables give every target's latency at the client; a level this project misses (a
lone request, most often) says nothing there about where the time went. This project's server
knows: Triton's counters give requests per execution (the dynamic batcher's batches), queue time
and the backend's compute time per request, and the `onnxruntime_cpu` backend's metrics split each
execution into the ONNX Runtime call and the rest of `execute` (decoding, tokenizing, checks,
padding, building responses; serving/backend/metrics.py) and count its framework calls by ONNX
Runtime session (the wide one, a thread per core, or the 1-thread one: serving/backend/session_choice.py
decides, so a lone request's time depends on which ran). Differenced over a level, warm-up
included (the counters cannot tell the warm-up apart), they show whether the batcher waited, how
large the batches grew and what a request cost inside the server.

The backend flushes its metrics once a second (`metrics_flush_interval_s`), so the scrape after a
level waits that long (`BACKEND_FLUSH_S`) before reading them. Pure: two parsed scrapes
(perf_sweep.results.parse_prometheus_text) in, one `InsideServer` out; the suite does the scraping.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from perf_sweep.results import MetricKey, metric_sum, server_metrics_delta

#: The onnxruntime_cpu backend's per-execution histograms (serving/backend/metrics.py's FAMILIES;
#: a unit test holds these names to that table).
FRAMEWORK_SECONDS = "serving_batch_framework_seconds"
REST_OF_EXECUTE_SECONDS = "serving_batch_overhead_seconds"
#: The backend's framework calls by session (label `session`: wide or narrow) and why that one
#: (label `reason`: serving.backend.session_choice.Reason's values).
FRAMEWORK_CALLS = "serving_framework_calls_total"
#: The reasons that force the 1-thread session, whatever the instance measured.
NARROW_FORCED = ("sibling_busy", "cores_busy", "settling")
#: How long after a level its last executions reach the metrics endpoint (the backend's default
#: flush interval, 1 s, and a margin).
BACKEND_FLUSH_S = 1.2


@dataclass(frozen=True)
class InsideServer:
    """One level as this project's server saw it (NaN where a metric was not there)."""

    requests: float
    executions: float
    queue_ms_per_request: float
    compute_infer_ms_per_request: float
    framework_ms_per_execution: float
    rest_of_execute_ms_per_execution: float
    #: Share of the backend's framework calls that ran on the wide session (NaN: one session only,
    #: or a file written before this was recorded).
    wide_session_share: float = math.nan
    #: Shares of the framework calls that ran narrow because a sibling instance computed, and because
    #: the wide session's worker cores were busy (what is left of the narrow calls, the instance chose).
    sibling_busy_share: float = math.nan
    cores_busy_share: float = math.nan
    #: ... and lone calls kept narrow right after a sibling computed (session_choice's `settle_calls`).
    settling_share: float = math.nan

    @property
    def requests_per_execution(self) -> float:
        return self.requests / self.executions if self.executions else math.nan

    def as_dict(self) -> dict[str, float | None]:
        """Plain JSON data (a missing figure is None, not NaN)."""
        values = {**asdict(self), "requests_per_execution": self.requests_per_execution}
        return {k: None if math.isnan(v) else v for k, v in values.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "InsideServer":
        return cls(**{k: math.nan if data.get(k) is None else float(data[k]) for k in cls.__dataclass_fields__})


def _call_shares(before: Mapping[MetricKey, float], after: Mapping[MetricKey, float], model: str) -> dict[str, float]:
    """Shares of the level's framework calls: on the wide session, and narrow for each forced reason."""
    def calls(**labels: str) -> float:
        return metric_sum(after, FRAMEWORK_CALLS, model=model, **labels) - metric_sum(before, FRAMEWORK_CALLS, model=model, **labels)

    total = calls()
    if not total > 0:
        return {}
    return {"wide_session_share": calls(session="wide") / total,
            **{f"{reason}_share": calls(session="narrow", reason=reason) / total for reason in NARROW_FORCED}}


def _per_execution_ms(before: Mapping[MetricKey, float], after: Mapping[MetricKey, float], histogram: str,
                      model: str) -> float:
    def delta(name: str) -> float:
        return metric_sum(after, name, model=model) - metric_sum(before, name, model=model)

    count = delta(f"{histogram}_count")
    return 1e3 * delta(f"{histogram}_sum") / count if count > 0 else math.nan


def inside_server(before: Mapping[MetricKey, float], after: Mapping[MetricKey, float], model: str) -> InsideServer | None:
    """The level between two scrapes of the model's metrics endpoint; None when no request succeeded
    in between (nothing to say)."""
    triton = server_metrics_delta(before, after, model)
    if not triton.requests_succeeded > 0:
        return None
    return InsideServer(
        requests=triton.requests_succeeded,
        executions=triton.executions,
        queue_ms_per_request=triton.queue_ms_per_request,
        compute_infer_ms_per_request=triton.compute_infer_ms_per_request,
        framework_ms_per_execution=_per_execution_ms(before, after, FRAMEWORK_SECONDS, model),
        rest_of_execute_ms_per_execution=_per_execution_ms(before, after, REST_OF_EXECUTE_SECONDS, model),
        **_call_shares(before, after, model),
    )
