"""Turn what perf_analyzer and Triton write into numbers: CSV rows, stdout facts, per-request
latencies from the profile export, and Prometheus metrics scraped before/after each level.

perf_analyzer's CSV (`-f`, with `--verbose-csv`) gives one row per load level with times in
microseconds: client send/recv, server queue and compute (input/infer/output), p50/p90/p95/p99
and average latency. It stops at the first failed request, so error counts come from its stdout
(`Thread [i] had error: ...`) and from Triton's failure counters.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from perf_sweep.errors import SweepRunError

# PerfRecord lives with the typed results.json it is stored in; the sweeps build it here.
from contracts.perf_results import PerfRecord  # noqa: F401 (re-exported)

_US = 1e-3  # microseconds -> milliseconds
#: A request slower than this is counted as stalled: Triton 2.51's dynamic batcher was seen here to
#: leave requests queued for its 500 ms idle wait when priority levels or queue policies are set.
STALL_MS = 450.0
#: How reports head the count of such requests.
STALL_TEXT = f">= {STALL_MS / 1000:g} s"


@dataclass(frozen=True)
class CsvRow:
    """One row of perf_analyzer's CSV, times in milliseconds."""

    load: float
    throughput: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float
    client_send_ms: float
    client_recv_ms: float
    network_ms: float
    server_queue_ms: float
    server_compute_input_ms: float
    server_compute_infer_ms: float
    server_compute_output_ms: float

    @property
    def server_compute_ms(self) -> float:
        return self.server_compute_input_ms + self.server_compute_infer_ms + self.server_compute_output_ms


_CSV_COLUMNS = {
    "throughput": "Inferences/Second",
    "p50_ms": "p50 latency", "p90_ms": "p90 latency", "p95_ms": "p95 latency", "p99_ms": "p99 latency",
    "avg_ms": "Avg latency", "client_send_ms": "Client Send", "client_recv_ms": "Client Recv",
    "network_ms": "Network+Server Send/Recv", "server_queue_ms": "Server Queue",
    "server_compute_input_ms": "Server Compute Input", "server_compute_infer_ms": "Server Compute Infer",
    "server_compute_output_ms": "Server Compute Output",
}
_LOAD_COLUMNS = ("Concurrency", "Request Rate")


def parse_perf_csv(text: str) -> list[CsvRow]:
    """Rows of a perf_analyzer `-f` CSV (concurrency or request-rate mode)."""
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    load_column = next((c for c in _LOAD_COLUMNS if c in header), None)
    missing = [c for c in _CSV_COLUMNS.values() if c not in header and c != "Avg latency"]
    if load_column is None or missing:
        raise SweepRunError(
            f"perf_analyzer CSV lacks expected columns (load column one of {_LOAD_COLUMNS}; missing {missing}); "
            f"header was {header}. Was it written by perf_analyzer 2.51 with --verbose-csv?"
        )
    rows = []
    for raw in reader:
        if not raw.get(load_column):
            continue  # trailing blank line or metrics section
        values = {}
        for key, column in _CSV_COLUMNS.items():
            value = float(raw.get(column) or "nan")
            values[key] = value if key == "throughput" else value * _US
        rows.append(CsvRow(load=float(raw[load_column]), **values))
    return rows


@dataclass(frozen=True)
class StdoutFacts:
    """What only perf_analyzer's console output says."""

    request_count: int | None = None
    send_rate: float | None = None
    delayed_fraction: float | None = None
    unstable: bool = False
    errors: tuple[str, ...] = ()


def parse_perf_stdout(text: str) -> StdoutFacts:
    count = re.search(r"Client:\s*\n\s*Request count:\s*(\d+)", text)
    send = re.search(r"Avg send request rate:\s*([\d.]+)", text)
    delayed = re.search(r"([\d.]+)% of the requests were delayed", text)
    errors = tuple(m.group(1).strip() for m in re.finditer(r"Thread \[\d+\] had error:\s*(.*)", text))
    return StdoutFacts(
        request_count=int(count.group(1)) if count else None,
        send_rate=float(send.group(1)) if send else None,
        delayed_fraction=float(delayed.group(1)) / 100 if delayed else (0.0 if send else None),
        unstable="Failed to obtain stable measurement" in text,
        errors=errors,
    )


def latencies_from_profile_export(export: Mapping[str, Any], last_windows: int = 3) -> list[float]:
    """Per-request latencies (ms) of the measured windows of each experiment in a profile export.

    perf_analyzer reports the statistics of its last (stable) windows; requests before them are
    earlier trial windows. Requests without a response (failed) are left out.
    """
    return [(request["response_timestamps"][-1] - request["timestamp"]) / 1e6
            for request in _measured_requests(export, last_windows) if request.get("response_timestamps")]


def failed_requests_from_profile_export(export: Mapping[str, Any], last_windows: int = 3) -> int:
    """Requests of the same measured windows that got no response at all (a request perf_analyzer
    gave up on). A rejected request (a full queue) has a response time like an answered one in the
    export, so this does not count those; perf_analyzer's `Thread [i] had error` lines (one per load
    thread) are the other lower bound (runner.perf_analyzer_notes)."""
    return sum(1 for request in _measured_requests(export, last_windows) if not request.get("response_timestamps"))


def _measured_requests(export: Mapping[str, Any], last_windows: int):
    for experiment in export.get("experiments", []):
        bounds = experiment.get("window_boundaries") or []
        start = bounds[-(last_windows + 1)] if len(bounds) > last_windows else (bounds[0] if bounds else None)
        for request in experiment.get("requests", []):
            if start is None or request["timestamp"] >= start:
                yield request


def fixed_count_throughput(export: Mapping[str, Any], batch_size: int = 1) -> float | None:
    """Inferences per second of a fixed-count run (`--request-count`, `batch_size` items per
    request), from its profile export: the answered requests' items over the time from the first
    request sent to the last answer; None without answers.

    Why not perf_analyzer's own figure: perf_analyzer 2.51 divides a fixed count by a window of
    whole seconds, the first that holds every answer. Measured against the digit classifier on
    a 2-core Intel Xeon (docs/measurements/2026-12-05-intel-xeon/perf-analyzer-2.51/): 100 Poisson
    requests (40 req/s) answered within 3.01 s were rated 25.0 infer/s (over 4.00 s), against 33.2
    from their answers; 200 within 6.08 s, 28.6 against 32.9; 300 at concurrency 4 within 0.115 s,
    299.7 against 2,617; in a `make perf-quick` A/B level, 12,489 requests at concurrency 16, 4,159
    against 4,497. The sweeps' fallback counts last about three windows, so their rates read up to a
    quarter low (the true rate up to a third higher), and short counts far lower."""
    answered = [(request["timestamp"], request["response_timestamps"][-1])
                for experiment in export.get("experiments", []) for request in experiment.get("requests", [])
                if request.get("response_timestamps")]
    if not answered:
        return None
    span_ns = max(answer for _, answer in answered) - min(sent for sent, _ in answered)
    return len(answered) * batch_size / (span_ns / 1e9) if span_ns > 0 else None


def slim_profile_export(export: Mapping[str, Any]) -> dict[str, Any]:
    """The profile export without request/response tensors (which can be megabytes of text)."""
    slim = {k: v for k, v in export.items() if k != "experiments"}
    slim["experiments"] = [
        {
            "experiment": e.get("experiment"),
            "window_boundaries": e.get("window_boundaries"),
            "requests": [
                {"timestamp": r["timestamp"], "response_timestamps": r.get("response_timestamps", [])}
                for r in e.get("requests", [])
            ],
        }
        for e in export.get("experiments", [])
    ]
    return slim


# ------------------------------------------------------------------------------------ Prometheus
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

MetricKey = tuple[str, tuple[tuple[str, str], ...]]


def parse_prometheus_text(text: str) -> dict[MetricKey, float]:
    """Samples of a Prometheus text exposition: {(name, sorted labels): value}."""
    samples: dict[MetricKey, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        samples[(name, tuple(sorted(_LABEL.findall(labels or ""))))] = number
    return samples


def metric_sum(samples: Mapping[MetricKey, float], name: str, **labels: str) -> float:
    """Sum of `name` over every sample whose labels include `labels` (0 when absent)."""
    total = 0.0
    for (sample_name, sample_labels), value in samples.items():
        if sample_name == name and all((k, v) in sample_labels for k, v in labels.items()):
            total += value
    return total


@dataclass(frozen=True)
class ServerMetrics:
    """Triton's own view of one measurement, from counter differences (after - before)."""

    requests_succeeded: float
    requests_failed: float
    inferences: float
    executions: float
    queue_ms_per_request: float
    compute_infer_ms_per_request: float
    #: The host's CPUs busy over the measurement (0-1, every process: the server and perf_analyzer),
    #: from /proc/stat before and after; NaN when not read. It was Triton's nv_cpu_utilization gauge
    #: read after the run, its last second: "3.0%" beside 6,333 infer/s on 2 cores (a review, 2026-12-07).
    cpu_utilization: float
    cpu_memory_used_mb: float
    failures_by_reason: Mapping[str, float] = field(default_factory=dict)

    @property
    def avg_batch_size(self) -> float:
        return self.inferences / self.executions if self.executions else math.nan

    @property
    def error_rate(self) -> float:
        total = self.requests_succeeded + self.requests_failed
        return self.requests_failed / total if total else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "avg_batch_size": self.avg_batch_size, "error_rate": self.error_rate}


def server_metrics_delta(before: Mapping[MetricKey, float], after: Mapping[MetricKey, float], model: str,
                         host_cpu_busy: float = math.nan) -> ServerMetrics:
    def delta(name: str, **labels: str) -> float:
        return metric_sum(after, name, model=model, **labels) - metric_sum(before, name, model=model, **labels)

    succeeded = delta("nv_inference_request_success")
    reasons = sorted({dict(k[1]).get("reason", "") for k in after if k[0] == "nv_inference_request_failure"} - {""})
    return ServerMetrics(
        requests_succeeded=succeeded,
        requests_failed=delta("nv_inference_request_failure"),
        inferences=delta("nv_inference_count"),
        executions=delta("nv_inference_exec_count"),
        queue_ms_per_request=delta("nv_inference_queue_duration_us") * _US / succeeded if succeeded else math.nan,
        compute_infer_ms_per_request=delta("nv_inference_compute_infer_duration_us") * _US / succeeded if succeeded else math.nan,
        cpu_utilization=host_cpu_busy,
        cpu_memory_used_mb=metric_sum(after, "nv_cpu_memory_used_bytes") / 2**20,
        failures_by_reason={r: delta("nv_inference_request_failure", reason=r) for r in reasons},
    )


def record_from_outputs(
    *, sweep: str, model: str, variant: str, mode: str, load: float, batch_size: int, command: Sequence[str],
    csv_text: str | None, stdout: str, server: ServerMetrics | None, status: str = "ok", note: str = "",
) -> PerfRecord:
    """Combine one level's CSV row, stdout facts and server metrics into a record."""
    facts = parse_perf_stdout(stdout)
    common = dict(
        sweep=sweep, model=model, variant=variant, mode=mode, load=load, batch_size=batch_size,
        command=" ".join(command), errors=len(facts.errors), send_rate=facts.send_rate,
        delayed_fraction=facts.delayed_fraction, server=server.as_dict() if server else {},
    )
    rows = parse_perf_csv(csv_text) if csv_text else []
    if not rows:
        reason = facts.errors[0] if facts.errors else ("unstable" if facts.unstable else "no CSV written")
        return PerfRecord(status="failed", note=(note + " " + reason).strip(), **common)
    row = rows[-1]
    return PerfRecord(
        status=status, note=note, throughput=row.throughput, p50_ms=row.p50_ms, p95_ms=row.p95_ms,
        p99_ms=row.p99_ms, avg_ms=row.avg_ms, server_queue_ms=row.server_queue_ms,
        server_compute_ms=row.server_compute_ms, requests=facts.request_count or 0, **common,
    )

