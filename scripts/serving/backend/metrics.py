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
| `serving_rejected_requests_total{reason}` | counter | requests refused before batching (input contract, text) or isolated after a framework failure |

Why the histograms are counters, flushed once a second: every call of the Python backend's metric
API (`observe`, `increment`) is a synchronous round trip from the stub process to the server
process. Measured on a 2-core AMD EPYC (Zen 1), digits at concurrency 1: the five calls per batch
took 575 us per `execute`, as long as everything else in it together, and made the served model
slower than a minimal FastAPI server at concurrency 1. A HISTOGRAM family takes one observation per
call, so it cannot be batched. So each histogram is published as the three counter families that
ARE a Prometheus classic histogram on the wire (`<name>_bucket{le}` cumulative, `<name>_sum`,
`<name>_count`: `histogram_quantile` and `rate` read them exactly as they read a histogram),
`execute` only adds to in-process totals (`MetricTotals`, pure, microseconds), and a flush thread
sends the non-zero deltas once per `flush_interval_s` (default 1 s; a Prometheus scrape interval is
10-30 s, so nothing a dashboard shows is lost; the last second before a stub dies can be).

`batch_observations` is pure (a batch's `BatchStats` in, (metric, labels, value) out) and tested
without Triton, as is `MetricTotals`; `BackendMetrics` registers the families with
`triton_python_backend_utils` and runs the flush.
"""
from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from serving.backend.batch_execution import BatchStats

#: Histogram buckets: requests/rows per batch (powers of two up to a max_batch_size of 128).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
#: Histogram buckets in seconds: 0.1 ms .. 2 s.
SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)

#: name -> (kind, description, histogram buckets or None, extra label names)
FAMILIES: dict[str, tuple[str, str, tuple[float, ...] | None, tuple[str, ...]]] = {
    "serving_batch_requests": ("histogram", "Requests per execution (the dynamic batch).", BATCH_BUCKETS, ()),
    "serving_batch_rows": ("histogram", "Rows (items) per execution.", BATCH_BUCKETS, ()),
    "serving_batch_real_tokens_total": ("counter", "Real (unpadded) tokens computed.", None, ()),
    "serving_batch_computed_tokens_total": ("counter", "Tokens computed, padding included.", None, ()),
    "serving_batch_bucket_calls_total": ("counter", "Framework calls per sequence-length bucket.", None, ("bucket",)),
    "serving_batch_framework_seconds": ("histogram", "Time inside ONNX Runtime per execution.", SECONDS_BUCKETS, ()),
    "serving_batch_overhead_seconds": ("histogram", "Time in execute outside ONNX Runtime per execution.", SECONDS_BUCKETS, ()),
    "serving_rejected_requests_total": ("counter", "Requests refused before batching or isolated after a framework failure.", None, ("reason",)),
}


def published_families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every COUNTER family registered with Triton: name -> (description, label names); a histogram
    of FAMILIES becomes its `_bucket` (with `le`), `_sum` and `_count` families."""
    published = {}
    for name, (kind, text, _, labels) in FAMILIES.items():
        if kind == "histogram":
            published[f"{name}_bucket"] = (f"{text} Cumulative count of observations <= le.", (*labels, "le"))
            published[f"{name}_sum"] = (f"{text} Sum of the observations.", labels)
            published[f"{name}_count"] = (f"{text} Number of observations.", labels)
        else:
            published[name] = (text, labels)
    return published


def exposed_metric_names() -> set[str]:
    """The sample names these families show on the metrics endpoint (histograms as _bucket/_sum/_count)."""
    return set(published_families())


def le_label(bound: float) -> str:
    """A bucket's `le` as Prometheus clients write it: 1 -> "1", 0.00025 -> "0.00025", inf -> "+Inf"."""
    return "+Inf" if math.isinf(bound) else repr(float(bound)).removesuffix(".0")


@dataclass(frozen=True)
class Observation:
    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float


def bucket_of(width: int, boundaries: Sequence[int]) -> str:
    """The bucket label of a call padded to `width` tokens: its boundary, or `all` without buckets."""
    for boundary in boundaries:
        if width <= boundary:
            return str(boundary)
    return str(boundaries[-1]) if boundaries else "all"


def batch_observations(stats: BatchStats | None, execute_s: float, refused: int, boundaries: Sequence[int] = ()) -> list[Observation]:
    """Everything one `execute` call adds to the metrics. `stats` is None when no request of the
    batch reached the framework (all refused)."""
    out = [Observation("serving_rejected_requests_total", (("reason", "invalid_input"),), refused)] if refused else []
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
        out.append(Observation("serving_rejected_requests_total", (("reason", "framework_failure"),), stats.failed_requests))
    return out


Series = tuple[str, tuple[tuple[str, str], ...]]
#: histogram -> the `le` label of each of its buckets, +Inf last
LE_LABELS = {name: (*(le_label(b) for b in buckets), "+Inf")
             for name, (kind, _, buckets, _) in FAMILIES.items() if kind == "histogram"}


class MetricTotals:
    """What the observations since the last `drain` add to each published counter series (pure).

    A histogram observation v adds 1 to every `_bucket` whose le >= v (the +Inf one included), v to
    `_sum` and 1 to `_count`, as a Prometheus client library's histogram does. `add` runs in every
    `execute`, so it only counts v into its own bucket (a bisect); `drain` makes the counts
    cumulative."""

    def __init__(self) -> None:
        self.counters: dict[Series, float] = {}
        #: (metric, labels) -> [per-bucket counts (the last one +Inf), sum, count]
        self.histograms: dict[Series, list] = {}

    def add(self, observations: Iterable[Observation]) -> None:
        for o in observations:
            kind, _, buckets, _ = FAMILIES[o.metric]
            key = (o.metric, o.labels)
            if kind != "histogram":
                if o.value:
                    self.counters[key] = self.counters.get(key, 0.0) + o.value
                continue
            totals = self.histograms.get(key)
            if totals is None:
                totals = self.histograms[key] = [[0] * (len(buckets) + 1), 0.0, 0]
            totals[0][bisect.bisect_left(buckets, o.value)] += 1
            totals[1] += o.value
            totals[2] += 1

    def drain(self) -> list[tuple[Series, float]]:
        """The non-zero deltas of every published series, sorted, and a fresh start."""
        deltas = [(series, value) for series, value in self.counters.items() if value > 0]
        for (metric, labels), (counts, total, count) in self.histograms.items():
            cumulative = 0
            for le, in_bucket in zip(LE_LABELS[metric], counts):
                cumulative += in_bucket
                if cumulative:
                    deltas.append(((f"{metric}_bucket", (*labels, ("le", le))), cumulative))
            if count:
                deltas += [((f"{metric}_sum", labels), total), ((f"{metric}_count", labels), count)]
        self.counters, self.histograms = {}, {}
        return sorted(deltas)


class BackendMetrics:
    """The families above for one model instance, registered with the Python backend (`pb_utils`):
    `record` adds a batch's observations to in-process totals (no round trip to the server), a
    daemon thread flushes them every `flush_interval_s` (see the module docstring)."""

    def __init__(self, pb_utils: Any, model: str, version: str, flush_interval_s: float = 1.0):
        if not flush_interval_s > 0:
            raise ValueError(f"the metrics flush interval must be > 0 seconds, got {flush_interval_s!r}.")
        self.labels, self.logger = {"model": model, "version": str(version)}, pb_utils.Logger
        # the families must outlive their metrics (Triton refuses to observe after a family is gone)
        self.families = {name: pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.COUNTER)
                         for name, (text, _) in published_families().items()}
        self.metrics: dict[Series, Any] = {}
        self.totals, self.lock = MetricTotals(), threading.Lock()
        self.flush_interval_s, self.stopping = flush_interval_s, threading.Event()
        self.flusher = threading.Thread(target=self._flush_every_interval, name=f"metrics-{model}", daemon=True)
        self.flusher.start()

    def record(self, observations: Sequence[Observation]) -> None:
        with self.lock:
            self.totals.add(observations)

    def flush(self) -> None:
        """Send what was recorded since the last flush (one `increment` per changed series)."""
        with self.lock:
            deltas = self.totals.drain()
        for (name, labels), value in deltas:
            if (name, labels) not in self.metrics:
                self.metrics[(name, labels)] = self.families[name].Metric(labels={**self.labels, **dict(labels)})
            self.metrics[(name, labels)].increment(value)

    def _flush_every_interval(self) -> None:
        while not self.stopping.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception as exc:  # the server may be going away; the next interval tries again
                self.logger.log_warn(f"model '{self.labels['model']}': metrics flush failed ({type(exc).__name__}: {exc}).")

    def close(self) -> None:
        """Stop the flush thread and send what is left (the model is being unloaded)."""
        self.stopping.set()
        self.flusher.join(timeout=5 * self.flush_interval_s)
        self.flush()
