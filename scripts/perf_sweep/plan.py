"""What a sweep is, and the exact perf_analyzer command line for each of its load levels.

A sweep runs perf_analyzer once per load level (not one invocation for the whole range), so the
runner can scrape Triton's metrics between levels, print progress as it goes, and keep the
command, CSV and per-request export of every level. Everything here is pure: argv lists and
environment dictionaries, no processes.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Mapping, Sequence

from perf_sweep.errors import SweepPlanError
from contracts.serving_spec import Protocol


class LoadMode(str, Enum):
    """Closed loop (N requests always in flight) or open loop (requests arrive at a rate)."""

    CONCURRENCY = "concurrency"
    REQUEST_RATE = "request_rate"


class Distribution(str, Enum):
    POISSON = "poisson"
    CONSTANT = "constant"


@dataclass(frozen=True)
class Measurement:
    """How each load level is measured.

    perf_analyzer sends `warmup_requests` first and leaves them out of the statistics, then
    measures windows of `interval_ms` until the last 3 agree within `stability_percentage` on
    throughput and average latency, for at most `max_trials` windows. A noisy shared CPU may never
    agree; the runner then re-measures a fixed `request_count` and marks the level unstable.
    """

    interval_ms: int = 1500
    stability_percentage: int = 20
    max_trials: int = 5
    warmup_requests: int = 50

    def __post_init__(self) -> None:
        if not 100 <= self.interval_ms <= 60_000:
            raise SweepPlanError(f"`interval_ms` = {self.interval_ms} must be between 100 and 60000.")
        if not 1 <= self.stability_percentage <= 100:
            raise SweepPlanError(f"`stability_percentage` = {self.stability_percentage} must be between 1 and 100.")
        if not 3 <= self.max_trials <= 50:
            raise SweepPlanError(f"`max_trials` = {self.max_trials} must be between 3 and 50 (stability needs 3 windows).")
        if self.warmup_requests < 0:
            raise SweepPlanError(f"`warmup_requests` = {self.warmup_requests} must be >= 0.")

    def warmup_requests_at(self, mode: "LoadMode", level: float) -> int:
        """The warm-up count of one level: `warmup_requests`, and at a concurrency at least one request
        per concurrent worker. Why: perf_analyzer 2.51 never leaves a warm-up of fewer requests than its
        concurrency (c=21 with 20, c=64 with 50 hung; c=20 with 20 and c=40 with 50 took 4 s), and the
        sweep reported such a level FAILED while Triton answered 260,580 requests (a review, 2026-12-07)."""
        if mode is LoadMode.CONCURRENCY:
            return max(self.warmup_requests, int(level))
        return self.warmup_requests


@dataclass(frozen=True)
class RequestParameter:
    """`--request-parameter name:value:type`, e.g. Triton's request priority over gRPC."""

    name: str
    value: str
    type: str = "int"

    def __post_init__(self) -> None:
        if self.type not in {"int", "string", "bool"}:
            raise SweepPlanError(f"request parameter `{self.name}` has type {self.type!r}; allowed int, string, bool.")
        if ":" in self.name or ":" in self.value or not self.name:
            raise SweepPlanError(f"request parameter {self.name!r}={self.value!r} must be non-empty and contain no ':'.")

    def render(self) -> str:
        return f"{self.name}:{self.value}:{self.type}"


@dataclass(frozen=True)
class SweepSpec:
    """One sweep of one model (and variant) over a list of load levels."""

    name: str
    model: str
    url: str
    levels: tuple[float, ...]
    mode: LoadMode = LoadMode.CONCURRENCY
    protocol: Protocol = Protocol.GRPC
    distribution: Distribution = Distribution.POISSON
    input_data: str = "random"
    batch_size: int = 1
    measurement: Measurement = Measurement()
    request_parameters: tuple[RequestParameter, ...] = ()
    metrics_url: str | None = None
    #: What is being compared (e.g. "fp32", "no_batching"); shown in tables and plot legends.
    variant: str = "served"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", LoadMode(self.mode))
        object.__setattr__(self, "protocol", Protocol(self.protocol))
        object.__setattr__(self, "distribution", Distribution(self.distribution))
        object.__setattr__(self, "levels", tuple(self.levels))
        if not self.name or "/" in self.name or " " in self.name:
            raise SweepPlanError(f"`name` = {self.name!r} must be non-empty without '/' or spaces (it names files).")
        if not self.levels:
            raise SweepPlanError(f"sweep `{self.name}` has no load levels.")
        for level in self.levels:
            if not (isinstance(level, (int, float)) and math.isfinite(level) and level > 0):
                raise SweepPlanError(f"sweep `{self.name}` has load level {level!r}; levels must be > 0.")
            if self.mode is LoadMode.CONCURRENCY and int(level) != level:
                raise SweepPlanError(f"sweep `{self.name}`: concurrency {level} must be a whole number.")
        if list(self.levels) != sorted(set(self.levels)):
            raise SweepPlanError(f"sweep `{self.name}`: levels {list(self.levels)} must be strictly increasing.")
        if self.batch_size < 1:
            raise SweepPlanError(f"sweep `{self.name}`: `batch_size` = {self.batch_size} must be >= 1.")
        if self.request_parameters and self.protocol is not Protocol.GRPC:
            raise SweepPlanError(
                f"sweep `{self.name}`: request parameters (priority) are sent only over gRPC, not {self.protocol.value}."
            )


def concurrency_levels(max_concurrency: int, start: int = 1) -> tuple[int, ...]:
    """Doubling concurrencies start, 2*start, ... up to and including `max_concurrency`."""
    if start < 1 or max_concurrency < start:
        raise SweepPlanError(f"need 1 <= start <= max_concurrency, got start={start}, max={max_concurrency}.")
    levels = []
    level = start
    while level < max_concurrency:
        levels.append(level)
        level *= 2
    levels.append(max_concurrency)
    return tuple(levels)


def request_rate_levels(peak_throughput: float, fractions: Sequence[float] = (0.25, 0.5, 0.7, 0.85, 1.0, 1.15)) -> tuple[float, ...]:
    """Poisson rates as fractions of the peak throughput a concurrency sweep measured.

    Spanning light load to just past capacity shows both the sparse-traffic latency (where a
    batching delay costs the most) and the saturation knee under open-loop arrivals.
    """
    if not (math.isfinite(peak_throughput) and peak_throughput > 0):
        raise SweepPlanError(f"`peak_throughput` = {peak_throughput} must be > 0 to plan request rates.")
    rates = sorted({round(max(1.0, f * peak_throughput), 1) for f in fractions if f > 0})
    if not rates:
        raise SweepPlanError(f"`fractions` = {list(fractions)} has no positive fraction.")
    return tuple(rates)


def render_perf_analyzer_command(
    sweep: SweepSpec,
    level: float,
    csv_path: Path,
    export_path: Path | None = None,
    perf_analyzer: str | os.PathLike = "perf_analyzer",
    request_count: int | None = None,
) -> list[str]:
    """The argv of one perf_analyzer run measuring `sweep` at one load `level`.

    `request_count` replaces the stability search by one fixed-count measurement (the fallback
    for levels that never stabilise on a noisy host).
    """
    if level not in sweep.levels:
        raise SweepPlanError(f"level {level} is not one of sweep `{sweep.name}`'s levels {list(sweep.levels)}.")
    m = sweep.measurement
    argv = [
        str(perf_analyzer), "-m", sweep.model, "-u", sweep.url, "-i", sweep.protocol.value,
        "-b", str(sweep.batch_size), "--input-data", str(sweep.input_data),
        "--measurement-mode", "time_windows", "--measurement-interval", str(m.interval_ms),
        "--stability-percentage", str(m.stability_percentage), "--max-trials", str(m.max_trials),
        "--warmup-request-count", str(m.warmup_requests_at(sweep.mode, level)),
        "-f", str(csv_path), "--verbose-csv",
    ]
    if sweep.mode is LoadMode.CONCURRENCY:
        argv += ["--concurrency-range", str(int(level))]
    else:
        # Open loop: asynchronous calls, so slow responses do not hold back the arrival process.
        argv += ["--request-rate-range", f"{level:g}", "--request-distribution", sweep.distribution.value, "--async"]
    if export_path is not None:
        argv += ["--profile-export-file", str(export_path)]
    if request_count is not None:
        if request_count < 1:
            raise SweepPlanError(f"`request_count` = {request_count} must be >= 1.")
        argv += ["--request-count", str(request_count)]
    for parameter in sweep.request_parameters:
        argv += ["--request-parameter", parameter.render()]
    return argv


def fixed_request_count(rate_per_s: float, interval_ms: int) -> int:
    """How many requests a fixed-count measurement sends in place of the stability search: about
    three measurement windows at `rate_per_s`, at least 100 and at most 20,000."""
    return int(max(100, min(20_000, rate_per_s * 3 * interval_ms / 1000)))


def fixed_count_timeout_s(request_count: int, warmup_requests: int, rate_per_s: float) -> float:
    """How long a fixed-count perf_analyzer run may take before it counts as hung: twice the
    time its warm-up and measured requests need at `rate_per_s` (the level's rate, or the rate
    the server served), plus 20 s for start-up and slow answers; at least 30 s."""
    if request_count < 1 or warmup_requests < 0:
        raise SweepPlanError(f"request_count = {request_count} (>= 1 expected) and warmup_requests = "
                             f"{warmup_requests} (>= 0 expected).")
    return max(30.0, 2 * (request_count + warmup_requests) / max(rate_per_s, 1e-3) + 20)


def level_timeout_s(measurement: Measurement, mode: LoadMode, level: float, request_count: int | None = None) -> float:
    """How long one perf_analyzer run of a level may take before it counts as hung. A fixed count
    at a request rate: `fixed_count_timeout_s` at that rate (the A/B and isolation runs fix their
    counts this way; a count sized for minutes must not be cut at the time-window limit, nor a
    short one wait for it). Otherwise the warm-up plus every trial window, doubled for slow
    answers, plus 30 s (a fixed count at a concurrency has no rate to size by: its callers pass
    their own limit from the rate the server served)."""
    if request_count and mode is LoadMode.REQUEST_RATE:
        return fixed_count_timeout_s(request_count, measurement.warmup_requests_at(mode, level), level)
    return (measurement.max_trials + 2) * measurement.interval_ms / 1000 * 2 + 30


class LoadWorkers(Enum):
    """What perf_analyzer's thread stacks say of its load workers while a run hangs (`load_workers`)."""

    #: Every load worker waits to be resumed, each past waiting out its own requests: nothing in flight.
    IDLE = "idle"
    #: A load worker is still at work: waiting out its requests, for a free context or its next slot.
    BUSY = "busy"
    #: No verdict: no stacks (no gdb, attach refused), no worker or main thread recognised.
    UNKNOWN = "unknown"


def hung_in_perf_analyzer(answered: float, failed: float, queued: float, expected: int | None,
                          workers: LoadWorkers = LoadWorkers.UNKNOWN) -> bool:
    """Whether a perf_analyzer run that overran its limit hung on its own side, so that measuring
    the level once more is honest. `answered`/`failed` are Triton's counters for the model over the
    run and `queued` its pending requests, all read while the run hangs; `expected` is how many
    requests the run sends in all (a fixed count plus the warm-up), None when that is open-ended
    (time windows send for as long as they measure); `workers` is what perf_analyzer's own thread
    stacks showed (`load_workers`).

    Why: perf_analyzer 2.51 can wait forever on its own. With `--request-count N` it sends exactly N
    requests and waits for N records, but clears its records only after its workers have started
    (RequestRateManager::ChangeRequestRate, then InferenceProfiler::ProfileHelper's
    SwapRequestRecords), so an answer landing in between is dropped: then Triton answered all the
    run sent. And its warm-up can end in a deadlock: the main thread joins the load workers
    (LoadManager::WaitForWarmupAndCleanup) while a worker that found itself paused before sending
    its share waits to be resumed, and misses the wake-up (RequestRateManager::ResumeWorkers sets
    the flag and notifies without holding the worker's mutex). That run sends fewer requests than
    `expected`. On a 2-core Intel Xeon, 3 of 150 Poisson runs at 40 req/s (priority 1, 10 warm-up
    requests, 100 counted) against the digit classifier never left their warm-up, each with 7
    requests answered (docs/measurements/2026-12-05-intel-xeon/perf-analyzer-2.51/); CI runs of
    tests/integration/test_perf_sweep.py met it too. Triton's counters cannot tell requests never
    sent from requests stuck inside a model instance (those are not counted as queued), but the
    workers' stacks can: a worker waits to be resumed only after waiting out every request of its
    own (LoadWorker::WaitForOngoingRequests).

    So: never when Triton failed a request or holds one queued, nor when a worker is still at work
    (a request of the run may be stuck in the server); always when every worker was idle (nothing
    in flight; a run that sent nothing included); without stacks, when Triton answered something
    and, for a fixed count, everything the run was to send."""
    if failed > 0 or queued > 0 or workers is LoadWorkers.BUSY:
        return False
    if workers is LoadWorkers.IDLE:
        return True
    if answered <= 0:
        return False
    return expected is None or answered >= expected


#: gdb's header of each thread: `Thread 8 (Thread 0x7f.. (LWP 7560) "perf_analyzer"):`, or `Thread 1.8 (...)`
#: with several inferiors.
_THREAD_HEADER = re.compile(r"^Thread \d+(?:\.\d+)? ", re.M)
#: A frame of one of perf_analyzer's load workers (ConcurrencyWorker, RequestRateWorker, ...): its thread's loop.
_WORKER_LOOP = "Worker::Infer("
#: Frames of perf_analyzer's main thread while it waits on its workers or its measurement.
_MAIN_WAITS = ("LoadManager::", "InferenceProfiler::")


def load_workers(stacks: str) -> LoadWorkers:
    """What gdb's `thread apply all bt` of a hung perf_analyzer says of its load workers.

    IDLE needs the main thread recognised (waiting in its load manager or profiler) and at least
    one worker, every one with `HandleExecuteOff` as its innermost perf_analyzer frame and waiting
    on a condition variable there. Why that means nothing is in flight: a worker that finds itself
    paused first waits out its ongoing requests (LoadWorker::WaitForOngoingRequests, a 50-ms sleep
    loop, not a condition wait) and only then waits to be resumed. A worker anywhere else (in that
    loop, waiting for a free context or for its schedule's next slot) is BUSY; stacks it cannot
    read (no gdb, an attach refused, frames without names, a thread header it does not know) are
    UNKNOWN."""
    blocks = _THREAD_HEADER.split(stacks)[1:]
    frames_of = [[line for line in block.splitlines() if line.startswith("#")] for block in blocks]
    workers = [frames for frames in frames_of if any(_WORKER_LOOP in frame for frame in frames)]
    main_seen = any(wait in frame for frames in frames_of for frame in frames for wait in _MAIN_WAITS)
    if not workers or not main_seen or any(sum(_WORKER_LOOP in f for f in frames) != 1 for frames in workers):
        return LoadWorkers.UNKNOWN

    def idle(frames: list[str]) -> bool:
        own = next((i for i, frame in enumerate(frames) if "perfanalyzer::" in frame), None)
        return (own is not None and "::HandleExecuteOff(" in frames[own]
                and any("pthread_cond_wait" in frame for frame in frames[:own]))

    return LoadWorkers.IDLE if all(idle(frames) for frames in workers) else LoadWorkers.BUSY


def find_perf_analyzer(explicit: str | os.PathLike | None = None) -> Path:
    """perf_analyzer from $PERF_ANALYZER, this interpreter's bin/ (the venv), or PATH."""
    candidates = [explicit or os.environ.get("PERF_ANALYZER"), Path(sys.executable).parent / "perf_analyzer",
                  shutil.which("perf_analyzer")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise SweepPlanError(
        "perf_analyzer not found: run `make setup` (tritonclient[all]==2.51.0 installs it into .venv/bin) "
        "or set PERF_ANALYZER=/path/to/perf_analyzer."
    )


def perf_analyzer_environment(site_packages: Sequence[str | os.PathLike] | None = None,
                              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for perf_analyzer 2.51 from the wheel: it links libcudart.so.12, which the
    nvidia-cuda-runtime-cu12 wheel provides under <site-packages>/nvidia/cuda_runtime/lib."""
    env = dict(os.environ if base is None else base)
    roots = site_packages if site_packages is not None else [p for p in sys.path if p.endswith("site-packages")]
    lib_dirs = [str(Path(root) / "nvidia" / "cuda_runtime" / "lib") for root in roots]
    lib_dirs = [d for d in lib_dirs if Path(d).is_dir()] or lib_dirs[:1]
    existing = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = ":".join(lib_dirs + ([existing] if existing else []))
    return env


@dataclass(frozen=True)
class Endpoint:
    """Where one served model answers (from run/manifest.json)."""

    model: str
    http_url: str
    grpc_url: str
    metrics_url: str
    server: str = "default"
    #: The partition's home cores and ONNX Runtime thread count (empty/0: not partitioned): what the
    #: A/B server is pinned to (a controlled comparison of variants, as docs/performance.md reads it).
    cpus: tuple[int, ...] = ()
    intra_op_threads: int = 0
    #: Every core the partition may run on (elastic CPU sets: also the ones idle neighbours lend it):
    #: what in-process limits are pinned to, so a served figure is held against the cores it computed
    #: on (pinned to the home core alone, reports said "served at 137-152% of the limit"). () = `cpus`.
    reachable_cpus: tuple[int, ...] = ()

    @property
    def limit_cpus(self) -> tuple[int, ...]:
        return self.reachable_cpus or self.cpus

    def url(self, protocol: Protocol) -> str:
        return self.grpc_url if Protocol(protocol) is Protocol.GRPC else self.http_url
