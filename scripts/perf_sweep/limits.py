"""The in-process limit: what the served model's own work costs without a server around it.

A served model's throughput is compared with the same work done by ONNX Runtime in this process
at its best batch size, with the session options of the `onnxruntime_cpu` backend (the
partition's intra-op threads, 1 inter-op thread, all graph optimisations) and pinned to the
partition's CPUs. The gap is the server's share: request handling, IPC with the Python backend,
queueing, (de)serialisation.

One timing loop serves every model: `measure_pinned_throughput` pins, builds the model's batch
calls (after pinning, so the threads ONNX Runtime or a tokenizer start inherit the CPU set) and
times each batch size over whole passes of its calls, so every batch size sees the same inputs.
`measure_in_process_limit` is the digit classifier's use of it (one fixed feed per batch size);
`perf_sweep.text_limit` is the text embedder's (tokenizer + bucketed encoder over the swept texts).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from itertools import cycle, islice
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError

#: One batch of the model's work; calling it runs the batch once (the result is discarded).
BatchCall = Callable[[], Any]
#: batch size -> the calls of one pass over the sample at that batch size (each call = batch size items).
BatchCallsFor = Callable[[int], Sequence[BatchCall]]

#: Batch sizes tried by default; those above the served max_batch_size are dropped.
DEFAULT_BATCH_SIZES = (1, 8, 16, 32, 64)


@dataclass(frozen=True)
class LimitPoint:
    batch_size: int
    throughput: float  # items per second
    batch_latency_ms: float

    def __post_init__(self) -> None:
        if self.batch_size < 1 or not self.throughput > 0 or not self.batch_latency_ms > 0:
            raise SweepPlanError(f"a limit point needs batch_size >= 1 and positive timings, got {self}.")


def limit_batch_sizes(max_batch_size: int, candidates: Sequence[int] = DEFAULT_BATCH_SIZES) -> tuple[int, ...]:
    """The candidates the server could actually execute (<= max_batch_size), plus max_batch_size
    itself: the limit must be a ceiling the served model can reach, not one its config forbids."""
    if max_batch_size < 1:
        raise SweepPlanError(f"`max_batch_size` = {max_batch_size} must be >= 1.")
    if any(b < 1 for b in candidates):
        raise SweepPlanError(f"batch sizes {list(candidates)} must all be >= 1.")
    return tuple(sorted({b for b in candidates if b <= max_batch_size} | {max_batch_size}))


def time_batch_calls(batch_size: int, calls: Sequence[BatchCall], seconds: float, warmup_calls: int = 3,
                     clock: Callable[[], float] = time.perf_counter) -> LimitPoint:
    """Items/s of cycling through `calls` (each `batch_size` items) for at least `seconds` and at
    least one whole pass, after `warmup_calls` untimed calls."""
    if not calls:
        raise SweepPlanError(f"batch size {batch_size}: no batch calls to time.")
    for call in islice(cycle(calls), warmup_calls):
        call()
    runs, started = 0, clock()
    while runs < len(calls) or clock() - started < seconds:
        calls[runs % len(calls)]()
        runs += 1
    elapsed = max(clock() - started, 1e-9)
    return LimitPoint(batch_size, runs * batch_size / elapsed, elapsed / runs * 1e3)


def measure_pinned_throughput(setup: Callable[[], BatchCallsFor], batch_sizes: Sequence[int],
                              seconds_per_batch: float = 1.5, cpus: Sequence[int] = ()) -> list[LimitPoint]:
    """Pin this thread to `cpus`, call `setup()` (sessions, tokenizers: their threads inherit the
    pinning), then time each batch size; the previous CPU set is restored afterwards."""
    previous = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        calls_for = setup()
        return [time_batch_calls(batch, calls_for(batch), seconds_per_batch) for batch in batch_sizes]
    finally:
        os.sched_setaffinity(0, previous)


def describe_pinning(cpus: Sequence[int], threads: int, partition: str) -> str:
    """How a measurement was pinned, for reports (the A/B server and both in-process limits)."""
    if not cpus:
        return "unpinned, ONNX Runtime default threads"
    return f"pinned to CPUs {list(cpus)} with {threads} ONNX Runtime thread(s) like partition `{partition}`"


def served_onnx_session(onnx_path: Path, intra_op_threads: int = 0):
    """An ONNX Runtime session with the `onnxruntime_cpu` backend's options (0 threads: ORT's default)."""
    from contracts.onnx_sessions import served_session

    return served_session(onnx_path, intra_op_threads)


def measure_in_process_limit(onnx_path: Path, samples: np.ndarray, input_name: str,
                             batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                             intra_op_threads: int = 0, seconds_per_batch: float = 1.5,
                             cpus: Sequence[int] = ()) -> list[LimitPoint]:
    """Items/s of the same ONNX file (fixed-shape input such as digit images) in ONNX Runtime in
    this process, session options as served, pinned to the partition's `cpus`. The best batch
    size is the ceiling the served throughput is compared with."""

    def setup() -> BatchCallsFor:
        session = served_onnx_session(onnx_path, intra_op_threads)

        def calls_for(batch: int) -> list[BatchCall]:
            feed = {input_name: np.take(samples, range(batch), axis=0, mode="wrap")}
            return [lambda: session.run(None, feed)]

        return calls_for

    return measure_pinned_throughput(setup, batch_sizes, seconds_per_batch, cpus)


def best_point(points: Sequence[LimitPoint]) -> LimitPoint:
    if not points:
        raise SweepPlanError("no limit points were measured.")
    return max(points, key=lambda p: p.throughput)


def ceiling_of_runs(runs: Sequence[Sequence[LimitPoint]]) -> list[LimitPoint]:
    """Per batch size, the fastest of several measurements (e.g. before and after the served
    sweeps): on a shared host the slower one was slowed by something else, and a limit is a ceiling."""
    best: dict[int, LimitPoint] = {}
    for run in runs:
        for point in run:
            if point.batch_size not in best or point.throughput > best[point.batch_size].throughput:
                best[point.batch_size] = point
    if not best:
        raise SweepPlanError("no limit points were measured.")
    return [best[b] for b in sorted(best)]


def served_vs_limit_headlines(model: str, knee_entry: Mapping[str, Any] | None, served: Sequence[Any],
                              limit: LimitPoint, unit: str = "items/s", limit_what: str = "") -> list[str]:
    """Headline lines: the served knee (or peak) and the best throughput served anywhere in the run
    (`served`: PerfRecord-like rows with sweep, load, throughput, p99_ms, status) as fractions of
    the in-process limit. Pure; no line for what was not measured."""
    lines = []
    what = f"; {limit_what}" if limit_what else ""
    point = (knee_entry or {}).get("knee") or (knee_entry or {}).get("peak")
    if point:
        which = "knee" if (knee_entry or {}).get("knee") else "peak (knee not reached)"
        lines.append(f"{model}: served throughput at the {which}: {point['throughput']:.0f} {unit} = "
                     f"{point['throughput'] / limit.throughput:.1%} of the in-process limit {limit.throughput:.0f} "
                     f"{unit} (batch {limit.batch_size}{what}) [target >= 85%].")
    good = [r for r in served if r.status != "failed" and r.throughput == r.throughput and r.throughput > 0]
    if good:
        best = max(good, key=lambda r: r.throughput)
        lines.append(f"{model}: best throughput served anywhere in this run: {best.throughput:.0f} {unit} "
                     f"({best.sweep} at {best.load:g}, P99 {best.p99_ms:.1f} ms) = "
                     f"{best.throughput / limit.throughput:.1%} of the in-process limit.")
    return lines
