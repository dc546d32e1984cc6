"""What each executed batch looked like, published through the Python backend's metrics API.

Why: Triton's own metrics say how many requests and executions there were, not how well the
batches were filled, how much of their compute was padding, or how much time the backend spent
outside the framework call. The field reports ask for exactly those (batch fill efficiency,
scheduling overhead share), so the `onnxruntime_cpu` backend publishes, per model and version, on
the partition's Triton metrics endpoint (beside `nv_*`):

| metric | kind | what |
|---|---|---|
| `serving_batch_requests` | histogram | requests per execution (Triton's dynamic batch) |
| `serving_batch_rows` | histogram | rows (items) per execution |
| `serving_batch_real_tokens_total`, `serving_batch_computed_tokens_total` | counter | real vs computed (padded) tokens; their rate ratio is the padding efficiency |
| `serving_batch_bucket_calls_total{bucket}` | counter | framework calls per sequence-length bucket |
| `serving_batch_framework_seconds` | histogram | time inside ONNX Runtime per execution |
| `serving_batch_overhead_seconds` | histogram | time in `execute` outside ONNX Runtime (decode, checks, padding, responses) |
| `serving_framework_calls_total{session,reason}` | counter | framework calls on the wide (a thread per core) or the narrow (1 thread) session, for models with both, and why that one (`session_choice.Reason`: sibling_busy, cores_busy, settling, exploring, recheck, preferred, size_class; serving/backend/session_choice.py) |
| `serving_session_choice_median_seconds{model_instance,session,size_class}` | gauge | per instance and size class (elements fed, a power-of-two range), the median of each session's last warm lone calls that the choice compares; republished at each decision (serving/backend/session_choice.py) |
| `serving_rejected_requests_total{reason}` | counter | requests refused before batching (input contract, text) or isolated after a framework failure |

The histograms are published as the counter series of a Prometheus classic histogram, summed in
the stub and flushed once a second (serving/backend/stub_metrics.py says why: each metric call of
the Python backend is a round trip to the server process).

`batch_observations` is pure (a batch's `BatchStats` in, observations out) and tested without
Triton; the backend hands them to a `StubMetrics` over `FAMILIES`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from serving.backend.batch_execution import BatchStats
from serving.backend.session_choice import size_class_range
from serving.backend.stub_metrics import FamilyTable, Observation, exposed_names

#: Histogram buckets: requests/rows per batch (powers of two up to a max_batch_size of 128).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
#: Histogram buckets in seconds: 0.1 ms .. 2 s.
SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)

#: The rejection counter and its reasons: every reason's series is published at 0 when a model
#: loads (`initial_series`), so the first refusals show as an increase (Prometheus reads a series that
#: appears at its first event as starting there: 3 refused requests read `increase() = 0`).
REJECTED_REQUESTS, INVALID_INPUT, FRAMEWORK_FAILURE = "serving_rejected_requests_total", "invalid_input", "framework_failure"


def initial_series() -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """(metric, labels) of the series a model shows at 0 from its load."""
    return [(REJECTED_REQUESTS, (("reason", reason),)) for reason in (INVALID_INPUT, FRAMEWORK_FAILURE)]


#: name -> (kind, description, histogram buckets or None, extra label names)
FAMILIES: FamilyTable = {
    "serving_batch_requests": ("histogram", "Requests per execution (the dynamic batch).", BATCH_BUCKETS, ()),
    "serving_batch_rows": ("histogram", "Rows (items) per execution.", BATCH_BUCKETS, ()),
    "serving_batch_real_tokens_total": ("counter", "Real (unpadded) tokens computed.", None, ()),
    "serving_batch_computed_tokens_total": ("counter", "Tokens computed, padding included.", None, ()),
    "serving_batch_bucket_calls_total": ("counter", "Framework calls per sequence-length bucket.", None, ("bucket",)),
    "serving_batch_framework_seconds": ("histogram", "Time inside ONNX Runtime per execution.", SECONDS_BUCKETS, ()),
    "serving_batch_overhead_seconds": ("histogram", "Time in execute outside ONNX Runtime per execution.", SECONDS_BUCKETS, ()),
    "serving_rejected_requests_total": ("counter", "Requests refused before batching or isolated after a framework failure.", None, ("reason",)),
    "serving_session_choice_median_seconds": ("gauge", "Median of a session's last warm lone calls of a size class, as the session choice compares them.", None, ("model_instance", "session", "size_class")),
    "serving_framework_calls_total": ("counter", "Framework calls per ONNX Runtime session (wide: a thread per core; narrow: 1 thread) and why it ran.", None, ("session", "reason")),
}


def exposed_metric_names() -> set[str]:
    """The sample names these families show on the metrics endpoint (histograms as _bucket/_sum/_count)."""
    return exposed_names(FAMILIES)


def bucket_of(width: int, boundaries: Sequence[int]) -> str:
    """The bucket label of a call padded to `width` tokens: its boundary, or `all` without buckets."""
    for boundary in boundaries:
        if width <= boundary:
            return str(boundary)
    return str(boundaries[-1]) if boundaries else "all"


def batch_observations(stats: BatchStats | None, execute_s: float, refused: int, boundaries: Sequence[int] = (),
                       calls_by_session: Mapping[tuple[str, str], int] | None = None) -> list[Observation]:
    """Everything one `execute` call adds to the metrics. `stats` is None when no request of the
    batch reached the framework (all refused); `calls_by_session` counts its framework calls by
    (session name, reason) (only for models with a wide and a narrow session)."""
    out = [Observation(REJECTED_REQUESTS, (("reason", INVALID_INPUT),), refused)] if refused else []
    out += [Observation("serving_framework_calls_total", (("reason", reason), ("session", session)), calls)
            for (session, reason), calls in sorted((calls_by_session or {}).items()) if calls]
    if stats is None:
        return out
    out += [
        Observation("serving_batch_requests", (), stats.requests + refused),
        Observation("serving_batch_rows", (), stats.rows),
        Observation("serving_batch_framework_seconds", (), stats.framework_s),
        Observation("serving_batch_overhead_seconds", (), max(0.0, execute_s - stats.framework_s)),
    ]
    if stats.computed_tokens:
        out += [Observation("serving_batch_real_tokens_total", (), stats.real_tokens),
                Observation("serving_batch_computed_tokens_total", (), stats.computed_tokens)]
    for width, calls in sorted(stats.calls_by_width.items()):
        out.append(Observation("serving_batch_bucket_calls_total", (("bucket", bucket_of(width, boundaries)),), calls))
    if stats.failed_requests:
        out.append(Observation(REJECTED_REQUESTS, (("reason", FRAMEWORK_FAILURE),), stats.failed_requests))
    return out


def choice_observations(instance: int, medians_s: Mapping[int, Mapping[str, float]]) -> list[Observation]:
    """The session choice's medians (`SessionChoice.medians_s()`: per size class, seconds per
    session) as gauges of one instance."""
    return [Observation("serving_session_choice_median_seconds",
                        (("model_instance", str(instance)), ("session", session), ("size_class", size_class_range(size))), seconds)
            for size, sessions in sorted(medians_s.items()) for session, seconds in sorted(sessions.items())]
