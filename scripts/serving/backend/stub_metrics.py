"""Custom metrics of a Python-backend model, summed in its stub and sent to Triton once a second.

Why: every call of the Python backend's metric API (`observe`, `increment`, `set`) is a
synchronous round trip from the stub process to the server process. Measured on a 2-core AMD EPYC
(Zen 1), digits at concurrency 1: the five calls per batch of the onnxruntime_cpu backend took
575 us per `execute`, as long as everything else in it together, and made the served model slower
than a minimal FastAPI server at concurrency 1; the generation model made ~15 per decode step. A
HISTOGRAM family takes one observation per call, so it cannot be batched. So:

* each histogram is published as the three counter families that ARE a Prometheus classic
  histogram on the wire (`<name>_bucket{le}` cumulative, `<name>_sum`, `<name>_count`):
  `histogram_quantile` and `rate` read them exactly as they read a histogram;
* the model only adds to in-process totals (`MetricTotals`: pure, microseconds per call), or
  queues the arguments it would build its observations from (`record_later`): the flush thread
  builds them. Why: the onnxruntime_cpu backend records after every execution, right after a
  framework call, where building and adding its observations took ~33 us (7 in a warm loop;
  docs/measurements/2026-12-05-intel-xeon/cold-numpy/), on the request's path;
* a daemon thread of `StubMetrics` sends the non-zero deltas (and the gauges' latest values) every
  `flush_interval_s` (default 1 s; a Prometheus scrape interval is 10-30 s, so nothing a dashboard
  shows is lost; the last second before a stub dies can be).

A family table maps each metric to (kind: "counter" | "gauge" | "histogram", description,
histogram buckets or None, its own label names); Triton adds `model` and `version` labels.
"""
from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

FamilyTable = Mapping[str, tuple[str, str, "tuple[float, ...] | None", tuple[str, ...]]]
Series = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Observation:
    """One value for one metric of a family table: added (counter), observed (histogram) or the
    latest value (gauge)."""

    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float


#: An execution queued by `StubMetrics.record_later`: the callable that builds its observations, and its arguments.
QueuedExecution = tuple[Callable[..., Iterable[Observation]], tuple]


def published_families(families: FamilyTable) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Every family registered with Triton: name -> (kind "counter" | "gauge", description, label
    names); a histogram becomes its `_bucket` (with `le`), `_sum` and `_count` counters."""
    published = {}
    for name, (kind, text, _, labels) in families.items():
        if kind == "histogram":
            published[f"{name}_bucket"] = ("counter", f"{text} Cumulative count of observations <= le.", (*labels, "le"))
            published[f"{name}_sum"] = ("counter", f"{text} Sum of the observations.", labels)
            published[f"{name}_count"] = ("counter", f"{text} Number of observations.", labels)
        else:
            published[name] = (kind, text, labels)
    return published


def exposed_names(families: FamilyTable) -> set[str]:
    """The sample names a family table shows on the metrics endpoint."""
    return set(published_families(families))


def le_label(bound: float) -> str:
    """A bucket's `le` as Prometheus clients write it: 1 -> "1", 0.00025 -> "0.00025", inf -> "+Inf"."""
    return "+Inf" if math.isinf(bound) else repr(float(bound)).removesuffix(".0")


class MetricTotals:
    """What the observations since the last `drain` do to each published series (pure).

    A histogram observation v adds 1 to every `_bucket` whose le >= v (the +Inf one included), v to
    `_sum` and 1 to `_count`, as a Prometheus client library's histogram does. `add` runs on the
    serving path, so it only counts v into its own bucket (a bisect); `drain` makes the counts
    cumulative. A gauge keeps its latest value."""

    def __init__(self, families: FamilyTable) -> None:
        self.families = families
        #: histogram -> the `le` label of each of its buckets, +Inf last
        self.le_labels = {name: (*(le_label(b) for b in buckets), "+Inf")
                          for name, (kind, _, buckets, _) in families.items() if kind == "histogram"}
        self.counters: dict[Series, float] = {}
        self.gauges: dict[Series, float] = {}
        #: (metric, labels) -> [per-bucket counts (the last one +Inf), sum, count]
        self.histograms: dict[Series, list] = {}

    def add(self, observations: Iterable[Observation]) -> None:
        for o in observations:
            kind, _, buckets, _ = self.families[o.metric]
            key = (o.metric, o.labels)
            if kind == "gauge":
                self.gauges[key] = o.value
            elif kind != "histogram":
                if o.value:
                    self.counters[key] = self.counters.get(key, 0.0) + o.value
            else:
                totals = self.histograms.get(key)
                if totals is None:
                    totals = self.histograms[key] = [[0] * (len(buckets) + 1), 0.0, 0]
                totals[0][bisect.bisect_left(buckets, o.value)] += 1
                totals[1] += o.value
                totals[2] += 1

    def drain(self) -> list[tuple[Series, float]]:
        """The non-zero counter deltas and the gauges set since the last drain, then a fresh start.

        In the order they are to be sent, one call each: counters and gauges sorted, then each
        histogram's buckets from +Inf down to the smallest `le`, its `_sum`, its `_count`. A scrape
        that lands during a flush then still sees every histogram's buckets cumulative (a wider
        bucket has always had its increment first) and a `_count` that is only equal to the +Inf
        bucket once the whole histogram is sent."""
        deltas = sorted([(series, value) for series, value in self.counters.items() if value > 0] + list(self.gauges.items()))
        for (metric, labels), (counts, total, count) in sorted(self.histograms.items()):
            cumulative, buckets = 0, []
            for le, in_bucket in zip(self.le_labels[metric], counts):
                cumulative += in_bucket
                if cumulative:
                    buckets.append(((f"{metric}_bucket", (*labels, ("le", le))), cumulative))
            deltas += reversed(buckets)
            if count:
                deltas += [((f"{metric}_sum", labels), total), ((f"{metric}_count", labels), count)]
        self.counters, self.gauges, self.histograms = {}, {}, {}
        return deltas

    def series_of(self, metric: str, labels: tuple[tuple[str, str], ...] = ()) -> list[Series]:
        """Every published series one metric with these labels shows (a histogram: each bucket, sum, count)."""
        if self.families[metric][0] != "histogram":
            return [(metric, labels)]
        return ([(f"{metric}_bucket", (*labels, ("le", le))) for le in self.le_labels[metric]]
                + [(f"{metric}_sum", labels), (f"{metric}_count", labels)])


class StubMetrics:
    """A family table's metrics for one model instance, registered with the Python backend
    (`pb_utils`): `record` adds to in-process totals (no round trip to the server), a daemon
    thread flushes them every `flush_interval_s` (see the module docstring)."""

    #: Queued executions beyond this are built at once on the caller's thread (a flush that hangs,
    #: e.g. while the server shuts down, must not let the queue grow by one entry per execution).
    MAX_PENDING = 4096
    #: A metric update that failed this many flushes in a row is dropped (a transient failure, as
    #: at unload, is retried; one that always fails must not pile up).
    MAX_SEND_TRIES = 3

    def __init__(self, pb_utils: Any, families: FamilyTable, model: str, version: str, flush_interval_s: float = 1.0):
        if not flush_interval_s > 0:
            raise ValueError(f"the metrics flush interval must be > 0 seconds, got {flush_interval_s!r}.")
        self.labels, self.logger = {"model": model, "version": str(version)}, pb_utils.Logger
        kinds = {"counter": pb_utils.MetricFamily.COUNTER, "gauge": pb_utils.MetricFamily.GAUGE}
        self.kinds = {name: kind for name, (kind, _, _) in published_families(families).items()}
        # the families must outlive their metrics (Triton refuses to update after a family is gone)
        self.families = {name: pb_utils.MetricFamily(name=name, description=text, kind=kinds[kind])
                         for name, (kind, text, _) in published_families(families).items()}
        self.metrics: dict[Series, Any] = {}
        self.totals, self.lock = MetricTotals(families), threading.Lock()
        self.pending: list[QueuedExecution] = []  # record_later's
        #: Deltas a flush failed to send, with their failed tries: sent first by the next flush.
        self.unsent: list[tuple[Series, float, int]] = []
        self.flush_interval_s, self.stopping = flush_interval_s, threading.Event()
        self.flusher = threading.Thread(target=self._flush_every_interval, name=f"metrics-{model}", daemon=True)
        self.flusher.start()

    def record(self, observations: Sequence[Observation]) -> None:
        with self.lock:
            self.totals.add(observations)

    def record_later(self, observe: Callable[..., Iterable[Observation]], *args: Any) -> None:
        """Queue `observe(*args)` for the flush thread (the module docstring says why): the
        arguments must not change afterwards."""
        with self.lock:
            if len(self.pending) < self.MAX_PENDING:
                self.pending.append((observe, args))
                return
        self.record(self._build([(observe, args)]))  # never raises: an execution never fails for its metrics

    def _build(self, queued: Sequence[QueuedExecution]) -> list[Observation]:
        """The observations of queued executions; one whose figures cannot be built is left out (it must
        not take the others with it) and the failures are logged once."""
        observations, failures = [], []
        for observe, args in queued:
            try:
                observations.extend(observe(*args))
            except Exception as exc:  # noqa: BLE001 - reported below, once per call
                failures.append(exc)
        if failures:
            self.logger.log_warn(f"model '{self.labels['model']}': the metrics of {len(failures)} of {len(queued)} queued "
                                 f"executions could not be built ({type(failures[0]).__name__}: {failures[0]}); the others were sent.")
        return observations

    def _series(self, series: Series):
        if series not in self.metrics:
            name, labels = series
            self.metrics[series] = self.families[name].Metric(labels={**self.labels, **dict(labels)})
        return self.metrics[series]

    def create(self, metric: str, labels: tuple[tuple[str, str], ...] = ()) -> None:
        """Show a metric's series at 0 before its first value (dashboards and alerts see the model at once)."""
        for series in self.totals.series_of(metric, labels):
            self._series(series)

    def flush(self) -> None:
        """Send what was recorded since the last flush (one call per changed series)."""
        with self.lock:
            pending, self.pending = self.pending, []
        observations = self._build(pending)
        with self.lock:
            self.totals.add(observations)
            deltas, self.unsent = self.unsent + [(series, value, 0) for series, value in self.totals.drain()], []
        failed, errors = [], []
        for series, value, tries in deltas:  # every delta is tried: one that fails must not hold up the others
            try:
                metric = self._series(series)
                if self.kinds[series[0]] == "gauge":
                    metric.set(value)
                else:
                    metric.increment(value)
            except Exception as exc:  # noqa: BLE001 - kept for the next flush, dropped after MAX_SEND_TRIES
                errors.append(exc)
                if tries + 1 < self.MAX_SEND_TRIES:
                    failed.append((series, value, tries + 1))
        if errors:  # a failure used to lose the rest of its flush (a histogram's _count below its +Inf bucket)
            with self.lock:
                self.unsent = failed + self.unsent
            raise RuntimeError(f"{len(errors)} of {len(deltas)} metric updates failed ({len(failed)} kept for the next "
                               f"flush): {type(errors[0]).__name__}: {errors[0]}")

    def _flush_logging_failures(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # the server may be going away; the next interval tries again
            self.logger.log_warn(f"model '{self.labels['model']}': metrics flush failed ({type(exc).__name__}: {exc}).")

    def _flush_every_interval(self) -> None:
        while not self.stopping.wait(self.flush_interval_s):
            self._flush_logging_failures()

    def close(self) -> None:
        """Stop the flush thread and send what is left (the model is being unloaded; a failure to
        send is logged, never raised from `finalize`)."""
        self.stopping.set()
        self.flusher.join(timeout=5 * self.flush_interval_s)
        self._flush_logging_failures()
