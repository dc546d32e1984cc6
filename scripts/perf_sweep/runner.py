"""Run perf_analyzer for each level of a sweep, keeping every raw output and printing progress.

Per level: scrape Triton's metrics, run perf_analyzer (argv from `plan.render_perf_analyzer_command`),
scrape again. If perf_analyzer never stabilises (common on a shared 2-core host), the level is
measured once more with a fixed request count sized from the server's own request counter, and
recorded as "unstable" rather than dropped. A run that gives no result in time is killed, after
its evidence is kept (Triton's counts for the run, perf_analyzer's thread stacks: `level_*.hang.txt`).
When neither shows a request outstanding, the hang was perf_analyzer's own
(`plan.hung_in_perf_analyzer`) and the level is measured once more; a level with requests failed,
queued, possibly unanswered or still awaited by a load worker stays failed. A fixed count is rated
from its answers' timestamps (`results.fixed_count_throughput`). The exact command of every attempt
is appended to `commands.sh` in the run folder, so any number in the report can be reproduced.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from perf_sweep.errors import SweepRunError
from perf_sweep.peers.machine import busy_fraction_between, read_cpu_jiffies
from perf_sweep.plan import (
    LoadMode,
    LoadWorkers,
    SweepSpec,
    find_perf_analyzer,
    fixed_count_timeout_s,
    fixed_request_count,
    hung_in_perf_analyzer,
    level_timeout_s,
    load_workers,
    perf_analyzer_environment,
    render_perf_analyzer_command,
)
from perf_sweep.results import (
    STALL_MS,
    MetricKey,
    PerfRecord,
    fixed_count_throughput,
    failed_requests_from_profile_export,
    latencies_from_profile_export,
    metric_sum,
    parse_perf_stdout,
    parse_prometheus_text,
    record_from_outputs,
    server_metrics_delta,
    slim_profile_export,
)


def scrape_metrics(url: str | None, timeout: float = 5.0) -> dict[MetricKey, float]:
    """Triton's Prometheus metrics as numbers ({} when no metrics URL is known)."""
    if not url:
        return {}
    if not url.startswith("http"):
        url = "http://" + url
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return parse_prometheus_text(response.read().decode())
    except OSError as exc:
        raise SweepRunError(f"could not scrape Triton metrics at {url}: {exc}") from None


@dataclass
class RunFolder:
    """The timestamped folder of one `perf_sweep run`: raw outputs, commands, records, report."""

    root: Path

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.commands = self.root / "commands.sh"
        if not self.commands.exists():
            self.commands.write_text(
                "#!/usr/bin/env bash\n# Every measuring command of this run, in order. Each line measures again into a new\n"
                "# folder of its own (mktemp; printed at its end): the files beside this one are what the run measured,\n"
                "# and perf_analyzer refuses an export file that exists, so a line that wrote over them could not rerun.\n")

    def sweep_dir(self, sweep: SweepSpec) -> Path:
        path = self.root / "raw" / sweep.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def log_command(self, argv: list[str], env: Mapping[str, str] | None = None, comment: str = "") -> None:
        with self.commands.open("a") as f:
            if comment:
                f.write(f"# {comment}\n")
            f.write(rerunnable_command(argv, env) + "\n")


#: perf_analyzer's options that name a file it writes.
OUTPUT_FLAGS = ("-f", "--profile-export-file")


def rerunnable_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One shell line that runs `argv` again with its output files (`OUTPUT_FLAGS`) in a fresh
    `mktemp -d` folder, which it prints: rerun, a line of commands.sh wrote over the run's own CSV
    and failed on its export ("Path must not already exist"; a review, 2026-12-07)."""
    words = []
    for previous, word in zip([""] + list(argv), argv):
        words.append(f'"$out"/{shlex.quote(Path(word).name)}' if previous in OUTPUT_FLAGS else shlex.quote(word))
    prefix = f"LD_LIBRARY_PATH={shlex.quote(env['LD_LIBRARY_PATH'])} " if env and "LD_LIBRARY_PATH" in env else ""
    if not any(previous in OUTPUT_FLAGS for previous in argv):
        return prefix + " ".join(words)
    return f'out=$(mktemp -d) && {prefix}{" ".join(words)}; echo "output in $out"'


Progress = Callable[[str], None]


def _level_tag(load: float) -> str:
    return f"{load:g}".replace(".", "_")


@dataclass(frozen=True)
class HangEvidence:
    """What the server and perf_analyzer were doing when a run overran its limit, read before it
    is killed: Triton's counters for the model since the run started (None without metrics)."""

    answered: float | None
    failed: float | None
    queued: float | None
    summary: str
    #: what perf_analyzer's thread stacks said of its load workers (`plan.load_workers`)
    workers: LoadWorkers = LoadWorkers.UNKNOWN


def _scrape_or_note(url: str | None, notes: list[str], when: str) -> dict[MetricKey, float]:
    """Triton's metrics, or {} with the reason added to `notes`: a scrape that fails (a restarted
    or busy server, a timeout) costs the level its server-side figures, never the whole run."""
    try:
        return scrape_metrics(url)
    except SweepRunError as exc:
        notes.append(f"{exc} ({when}); the level is kept without Triton's figures")
        return {}


def _hang_evidence(pid: int, sweep: SweepSpec, before: Mapping[MetricKey, float], path: Path) -> HangEvidence:
    """Triton's answered/failed/queued counts for the run, and perf_analyzer's thread stacks (gdb,
    when installed) appended to `path` beside the level's output."""
    counts, summary = (None, None, None), "no Triton metrics URL"
    if sweep.metrics_url and not before:
        summary = "no Triton metrics from before the run"
    elif sweep.metrics_url:
        try:
            now = scrape_metrics(sweep.metrics_url)
            delta = server_metrics_delta(before, now, sweep.model)
            counts = (delta.requests_succeeded, delta.requests_failed,
                      metric_sum(now, "nv_inference_pending_request_count", model=sweep.model))
            summary = "Triton meanwhile: {:.0f} answered, {:.0f} failed, {:.0f} queued".format(*counts)
        except SweepRunError as exc:
            summary = f"Triton's metrics unreadable ({exc})"
    stacks = thread_stacks(pid)
    workers = load_workers(stacks)
    summary += f"; perf_analyzer's load workers: {workers.value}"
    with path.open("a") as f:  # a level measured once more keeps both attempts' evidence
        f.write(f"{summary}\n\nperf_analyzer's threads (pid {pid}):\n{stacks}\n")
    return HangEvidence(*counts, summary=f"{summary} (perf_analyzer's stacks: {path.name})", workers=workers)


def thread_stacks(pid: int) -> str:
    """Every thread's stack of process `pid` (gdb's `thread apply all bt`), or why there is none
    (gdb's own complaint, e.g. an attach that ptrace refused)."""
    if not shutil.which("gdb"):
        return "gdb not installed"
    try:
        done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "gdb took over 30 s"
    except OSError as exc:  # evidence only: never let it cost the level
        return f"gdb did not run: {exc}"
    return done.stdout if "\nThread " in done.stdout else f"{done.stdout}\n{done.stderr}".strip()


def _run_perf_analyzer(argv: list[str], env: Mapping[str, str], limit: float, sweep: SweepSpec,
                       before: Mapping[MetricKey, float], hang_path: Path) -> tuple[str, int, HangEvidence | None]:
    """(output, exit code, None) of one perf_analyzer run; past `limit` seconds, its hang evidence is
    taken (`_hang_evidence`) before it is killed, and the output says so (exit code -9)."""
    proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        stdout, _ = proc.communicate(timeout=limit)
        return stdout, proc.returncode, None
    except subprocess.TimeoutExpired:
        try:
            hang = _hang_evidence(proc.pid, sweep, before, hang_path)
        finally:  # a hung perf_analyzer never outlives its level
            proc.kill()
        stdout, _ = proc.communicate()
        return stdout + f"\n[perf_sweep] no result after {limit:.0f} s: perf_analyzer killed; {hang.summary}", -9, hang


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of every CPU from /proc/stat; None where there is none."""
    try:
        return read_cpu_jiffies()
    except OSError:
        return None


def _read_export(path: Path, batch_size: int, fixed_count: bool) -> tuple[list[float], float | None, int | None]:
    """The level's per-request latencies (ms) from its profile export, for a fixed count its
    throughput from the answers (`results.fixed_count_throughput`), and its unanswered requests
    (`results.failed_requests_from_profile_export`); the file is then slimmed to timestamps.
    ([], None, None) when perf_analyzer wrote none."""
    if not path.exists():
        return [], None, None
    export = json.loads(path.read_text())
    path.write_text(json.dumps(slim_profile_export(export)))
    return (latencies_from_profile_export(export),
            fixed_count_throughput(export, batch_size) if fixed_count else None,
            failed_requests_from_profile_export(export))


def perf_analyzer_notes(stdout: str, failed_in_export: int | None) -> list[str]:
    """What perf_analyzer's console said beside its figures, for the level's note: its load threads'
    errors and a load generator that fell behind its schedule ("N% of the requests were delayed").
    Both were in stdout only, and the report showed neither (a review, 2026-12-07). perf_analyzer 2.51
    prints one error per load thread (`Thread [i] had error: ...`), not a count, and records a
    rejected request in its export with a response time like an answered one: the errors column is
    a lower bound there (here, 2026-12-07: 4 threads' errors at a Poisson rate where the client
    counted 40,221 requests and Triton 40,151 successes; without errors the two differ by up to ~12)."""
    facts = parse_perf_stdout(stdout)
    notes = []
    if facts.errors:
        kinds = sorted({re.sub(r"^\[request id: \d+\]\s*", "", error) for error in facts.errors})
        unanswered = f"; {failed_in_export} measured request(s) unanswered in the export" if failed_in_export else ""
        notes.append(f"perf_analyzer: {len(facts.errors)} load thread(s) reported an error ({'; '.join(kinds)[:200]}): "
                     f"at least that many requests failed (it prints one error a thread, not a count){unanswered}")
    if facts.delayed_fraction:
        notes.append(f"perf_analyzer: {facts.delayed_fraction:.1%} of the requests were sent late (the load "
                     "generator fell behind the schedule; the offered rate was lower)")
    return notes


def _run_with_server_view(argv: list[str], env: Mapping[str, str], limit: float, sweep: SweepSpec, hang_path: Path,
                          stdout_path: Path) -> tuple[str, HangEvidence | None, float, ServerMetrics | None, list[str]]:
    """One perf_analyzer run between two scrapes of Triton's metrics and two readings of the host's
    CPU time: (its stdout, kept at `stdout_path`; the hang evidence when it overran `limit`; seconds;
    Triton's view of the run; notes on scrapes that failed)."""
    scrape_notes: list[str] = []
    before = _scrape_or_note(sweep.metrics_url, scrape_notes, "before the run")
    started, jiffies_before = time.monotonic(), _cpu_jiffies()
    stdout, returncode, hang = _run_perf_analyzer(argv, env, limit, sweep, before, hang_path)
    elapsed, jiffies_after = time.monotonic() - started, _cpu_jiffies()
    after = _scrape_or_note(sweep.metrics_url, scrape_notes, "after the run") if before else {}
    stdout_path.write_text(f"$ {shlex.join(argv)}\n# exit code {returncode}\n{stdout}")
    host_busy = (busy_fraction_between(jiffies_before, jiffies_after)
                 if jiffies_before is not None and jiffies_after is not None else math.nan)
    server = server_metrics_delta(before, after, sweep.model, host_busy) if before and after else None
    return stdout, hang, elapsed, server, scrape_notes


def run_level(sweep: SweepSpec, level: float, folder: RunFolder, perf_analyzer: Path, env: Mapping[str, str],
              request_count: int | None = None, timeout: float | None = None,
              fixed_reason: str | None = None, remeasured: str = "") -> tuple[PerfRecord, list[float]]:
    """Measure one load level; returns the record and the per-request latencies (ms).

    With `request_count`, one fixed-count measurement replaces the stability search (by design,
    e.g. to fix how long a level lasts while other traffic runs). With `fixed_reason` too, the level
    counts as "unstable" (the stability search failed or was skipped for that reason). A run killed
    while neither Triton nor perf_analyzer showed anything outstanding is measured once more
    (`plan.hung_in_perf_analyzer`: perf_analyzer's own hang); `remeasured` says why."""
    out = folder.sweep_dir(sweep)
    tag = _level_tag(level) + ("_fixed" if request_count else "")
    csv_path, export_path, hang_path = (out / f"level_{tag}{suffix}" for suffix in (".csv", ".export.json", ".hang.txt"))
    for stale in (csv_path, export_path) + (() if remeasured else (hang_path,)):
        stale.unlink(missing_ok=True)
    argv = render_perf_analyzer_command(sweep, level, csv_path, export_path, perf_analyzer, request_count)
    folder.log_command(argv, env, f"{sweep.name} level {level:g}" + (" (fixed request count)" if request_count else ""))
    m = sweep.measurement
    limit = timeout or level_timeout_s(m, sweep.mode, level, request_count)  # overrun = hung
    stdout, hang, elapsed, server, scrape_notes = _run_with_server_view(argv, env, limit, sweep, hang_path,
                                                                         out / f"level_{tag}.stdout.txt")
    latencies, answer_rate, failed_in_export = _read_export(export_path, sweep.batch_size, fixed_count=bool(request_count))
    record = record_from_outputs(
        sweep=sweep.name, model=sweep.model, variant=sweep.variant, mode=sweep.mode.value, load=level,
        batch_size=sweep.batch_size, command=argv, csv_text=csv_path.read_text() if csv_path.exists() else None,
        stdout=stdout, server=server, status="unstable" if fixed_reason else "ok",
        note="; ".join(filter(None, (
            f"no result within {limit:.0f} s (perf_analyzer killed; {hang.summary})" if hang is not None
            else f"fixed {request_count} requests: {fixed_reason}" if fixed_reason
            else f"fixed {request_count} requests" if request_count else "",
            remeasured, *scrape_notes, *perf_analyzer_notes(stdout, failed_in_export)))),
    )
    if failed_in_export:  # unanswered requests of the export, when more than the threads that reported one
        record = dataclasses.replace(record, errors=max(record.errors, failed_in_export))
    warmup = m.warmup_requests_at(sweep.mode, level)
    expected = request_count + warmup if request_count else None
    if (hang is not None and not remeasured and hang.answered is not None
            and hung_in_perf_analyzer(hang.answered, hang.failed, hang.queued, expected, hang.workers)):
        return run_level(sweep, level, folder, perf_analyzer, env, request_count=request_count, timeout=limit,
                         fixed_reason=fixed_reason, remeasured=(
                             f"measured again: the first run was killed after {limit:.0f} s with nothing "
                             f"outstanding ({hang.summary}; plan.hung_in_perf_analyzer)"))
    record = dataclasses.replace(record, stalled=sum(latency >= STALL_MS for latency in latencies))
    if answer_rate is not None and record.status != "failed":
        record = dataclasses.replace(record, throughput=answer_rate, note="; ".join(filter(None, (
            record.note, f"throughput from the export's answers (perf_analyzer's own {record.throughput:.1f} "
                         "infer/s counts whole seconds: results.fixed_count_throughput)"))))
    if record.status == "failed" and request_count is None and "Failed to obtain stable measurement" in stdout:
        # Size a fixed-count measurement as ~3 windows at the rate the server actually served.
        served_rate = (server.requests_succeeded / elapsed) if server and elapsed > 0 else 0.0
        count = fixed_request_count(served_rate, m.interval_ms)
        rate = level if sweep.mode.value == "request_rate" else served_rate
        # without Triton's counters there is no served rate to size the limit by (at rate 0 it read 83 hours)
        limit_s = fixed_count_timeout_s(count, warmup, rate) if rate > 0 else limit
        return run_level(sweep, level, folder, perf_analyzer, env, request_count=count, timeout=timeout or limit_s,
                         fixed_reason=f"never stable within {m.max_trials} windows", remeasured=remeasured)
    return record, latencies


def fixed_count_sizing_rate(mode: LoadMode, level: float, last: PerfRecord) -> float:
    """The rate a fixed count for `level` is sized by (`fixed_request_count`: ~3 windows at it): the
    level's own rate, or at a concurrency the last measured rate scaled by the concurrency's growth, the
    most a closed loop can reach there (no request gets faster under load). Sized by the last rate
    alone, c=16 after an unstable c=1 (321/s) sent 963 requests, 0.49 s at the 1,960/s it served: under
    one window (a review, 2026-12-07). The run's time limit stays sized by the last rate (slower
    is the safe side there)."""
    if mode is LoadMode.REQUEST_RATE:
        return level
    return last.throughput * max(1.0, level / last.load) if last.load > 0 else last.throughput


def run_sweep(sweep: SweepSpec, folder: RunFolder, progress: Progress = print,
              perf_analyzer: Path | None = None, env: Mapping[str, str] | None = None,
              stop_after_failure: bool = True,
              stop_when: Callable[[list[PerfRecord]], str | None] | None = None,
              ) -> tuple[list[PerfRecord], dict[float, list[float]]]:
    """Every level of `sweep`, in order, with one progress line per level; `stop_when(records)`
    may end the sweep early by returning the reason (e.g. the knee is already behind us)."""
    binary = perf_analyzer or find_perf_analyzer()
    environment = env or perf_analyzer_environment()
    records: list[PerfRecord] = []
    latencies: dict[float, list[float]] = {}
    unit = "concurrency" if sweep.mode.value == "concurrency" else "req/s"
    fixed_from: PerfRecord | None = None  # the first level that never stabilised
    from contracts.progress import progress as progress_bar

    for i, level in enumerate(progress_bar(sweep.levels, f"sweep {sweep.name}", lines=False), 1):
        started = time.monotonic()
        if fixed_from is None:
            record, level_latencies = run_level(sweep, level, folder, binary, environment)
        else:  # this host is too noisy for this sweep: measure ~3 windows' worth directly, once
            # sized for this level from the last measured one (fixed_count_sizing_rate); the time limit from
            # the last measured rate itself, the slower side
            last = next(r for r in reversed(records) if r.status != "failed")
            rate = level if sweep.mode.value == "request_rate" else last.throughput
            count = fixed_request_count(fixed_count_sizing_rate(sweep.mode, level, last), sweep.measurement.interval_ms)
            reason = f"stability search skipped after {sweep.mode.value} {fixed_from.load:g} never stabilised"
            record, level_latencies = run_level(sweep, level, folder, binary, environment, request_count=count,
                                                fixed_reason=reason,
                                                timeout=fixed_count_timeout_s(
                                                    count, sweep.measurement.warmup_requests_at(sweep.mode, level), rate))
        if fixed_from is None and record.status == "unstable":
            fixed_from = record
        records.append(record)
        latencies[level] = level_latencies
        took = time.monotonic() - started
        if record.status == "failed":
            progress(f"[perf] {sweep.name} {i}/{len(sweep.levels)} {unit} {level:g}: FAILED ({record.note}) [{took:.0f} s]")
            if stop_after_failure:
                progress(f"[perf] {sweep.name}: stopping this sweep (higher load would fail too)")
                break
            continue
        batch = record.server.get("avg_batch_size") if record.server else None
        batch_text = f"  avg batch {batch:.1f}" if batch == batch and batch is not None else ""
        progress(
            f"[perf] {sweep.name} {i}/{len(sweep.levels)} {unit} {level:g}: {record.throughput:.1f} infer/s  "
            f"p50 {record.p50_ms:.1f} ms  p99 {record.p99_ms:.1f} ms{batch_text}"
            f"{'  (unstable)' if record.status == 'unstable' else ''} [{took:.0f} s]"
        )
        reason = stop_when(records) if stop_when else None
        if reason and i < len(sweep.levels):
            progress(f"[perf] {sweep.name}: stopping early, {reason}")
            break
    return records, latencies
