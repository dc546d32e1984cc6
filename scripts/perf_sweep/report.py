"""The Markdown summary and PNG plots of one run, from its results.json (re-renderable offline;
the document is `contracts.perf_results.PerfRunResults`).

Every table shows P50/P95/P99, throughput, server queue and compute time, errors and error rate,
and what Triton's metrics endpoint said (average executed batch size), with the host's CPU busy share over each level (/proc/stat). Plots:
latency percentiles vs throughput per model and variant, and per-priority latency CDFs.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from perf_sweep.results import STALL_TEXT, PerfRecord

from contracts.perf_results import PerfRunResults, as_perf_results


def _f(value: Any, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _pct(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}%"


def records_table(records: Sequence[PerfRecord]) -> list[str]:
    lines = [
        "| load | infer/s | P50 ms | P95 ms | P99 ms | queue ms | compute ms | avg batch | host CPU busy | requests | " + STALL_TEXT + " | errors | error rate | status |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        server = r.server or {}
        # the larger of perf_analyzer's count and Triton's: a backend failure is in both (adding them
        # counted it twice), a request Triton refused before perf_analyzer saw an answer may be in one
        errors = max(r.errors, int(server.get("requests_failed") or 0))
        # a failed level has no CSV (requests 0): perf_analyzer stopped at its first error, after
        # Triton had answered the rest; without them the rate read 100% for 1 error in thousands
        answered = r.requests if r.requests or not server else int(server.get("requests_succeeded") or 0)
        total = answered + errors
        lines.append(
            f"| {r.load:g} | {_f(r.throughput)} | {_f(r.p50_ms, 2)} | {_f(r.p95_ms, 2)} | {_f(r.p99_ms, 2)} | "
            f"{_f(r.server_queue_ms, 2)} | {_f(r.server_compute_ms, 2)} | {_f(server.get('avg_batch_size'))} | "
            f"{_pct(server.get('cpu_utilization'))} | {r.requests} | {r.stalled} | {errors} | {_pct(errors / total if total else math.nan)} | "
            f"{r.status}{(': ' + r.note) if r.note else ''} |"
        )
    return lines


def stream_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| experiment | variant | load | stream | priority | requests | items/s | P50 ms | P95 ms | P99 ms | " + STALL_TEXT + " | rejected | other errors | error rate | send lag P99 ms |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        for s in row["streams"]:
            errors = s["rejected"] + s["other_errors"]
            lines.append(
                f"| {row['experiment']} | {row['variant']} | {row['load']} | {s['stream']} | {s['priority'] or '-'} | "
                f"{s['requests']} | {_f(s['throughput'])} | {_f(s['p50_ms'], 2)} | {_f(s['p95_ms'], 2)} | "
                f"{_f(s['p99_ms'], 2)} | {s.get('stalled', 0)} | {s['rejected']} | {s['other_errors']} | "
                f"{_pct(errors / s['requests'] if s['requests'] else math.nan)} | {_f(s['send_lag_p99_ms'], 2)} |"
            )
    return lines


def _by_sweep(records: Sequence[PerfRecord]) -> dict[str, list[PerfRecord]]:
    grouped: dict[str, list[PerfRecord]] = {}
    for r in records:
        grouped.setdefault(r.sweep, []).append(r)
    return grouped


def plot_latency_vs_throughput(records: Sequence[PerfRecord], path: Path, title: str,
                               panel_of: Callable[[PerfRecord], str] = lambda r: r.model) -> Path | None:
    """One panel per `panel_of` (default: model): P50/P95/P99 against throughput, a colour per sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    good = [r for r in records if r.status != "failed" and r.throughput == r.throughput]
    if not good:
        return None
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    panels = sorted({panel_of(r) for r in good})
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # "4", not "4x10^0"
    for ax, panel in zip(axes[0], panels):
        sweeps = []
        for i, (sweep, rows) in enumerate(sorted(_by_sweep([r for r in good if panel_of(r) == panel]).items())):
            rows = sorted(rows, key=lambda r: r.load)
            # the A/B panel has 11 closed-loop sweeps with an INT8 build: past ten colours the marker
            # changes too, or two variants' curves were drawn alike (same colour, line and marker)
            colour, marker = f"C{i % 10}", "osD^v<>"[i // 10 % 7]
            x = [r.throughput for r in rows]
            ax.plot(x, [r.p99_ms for r in rows], "-" + marker, color=colour, label=f"{sweep} P99")
            # small markers on P95 and P50 too: a one-level sweep drew them as nothing (a line needs two points)
            ax.plot(x, [r.p95_ms for r in rows], "--.", color=colour, alpha=0.7, markersize=4, label=f"{sweep} P95")
            ax.plot(x, [r.p50_ms for r in rows], ":.", color=colour, alpha=0.7, markersize=4, label=f"{sweep} P50")
            sweeps.append(Line2D([], [], color=colour, marker=marker, label=sweep))
        ax.set_title(panel)
        ax.set_xlabel("throughput (infer/s)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}" if f"{value:g}"[0] in "25" else ""))
        ax.grid(True, which="both", alpha=0.3)
        # Outside the data: with many variants an inside legend hides the curves it names. One entry a
        # sweep (its colour) and one a percentile (its line): three a sweep made 33 entries for the A/B
        # panel, and the legend squeezed the data to a third of the figure (a review, 2026-12-07).
        styles = [Line2D([], [], color="grey", ls=ls, label=label) for ls, label in (("-", "P99"), ("--", "P95"), (":", "P50"))]
        ax.legend(handles=sweeps + styles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_latency_cdfs(samples: Mapping[str, Sequence[float]], path: Path, title: str) -> Path | None:
    """Empirical CDF of latency per label (e.g. realtime unloaded / realtime under batch load)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    samples = {k: v for k, v in samples.items() if len(v)}
    if not samples:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in sorted(samples.items()):
        x = np.sort(np.asarray(values))
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=f"{label} (n={len(x)})")
    ax.axhline(0.99, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def limit_section(title: str, limit: Mapping[str, Any]) -> list[str]:
    """An in-process limit: how it was measured, then throughput and batch latency per batch size."""
    unit = limit.get("unit", "items/s")
    runs = limit.get("runs") or {}  # several measurements: each one's throughput beside the kept (fastest) one
    by_run = {when: {p["batch_size"]: p["throughput"] for p in points} for when, points in runs.items()}
    out = [f"## {title}", "", limit["text"], "",
           f"| batch | {unit} | batch latency ms |" + "".join(f" {unit} {when} |" for when in runs),
           "|---:|---:|---:|" + "---:|" * len(runs)]
    out += [f"| {p['batch_size']} | {_f(p['throughput'])} | {_f(p['batch_latency_ms'], 2)} |"
            + "".join(f" {_f(by_run[when].get(p['batch_size']))} |" for when in runs) for p in limit["points"]]
    return out + [""]


def _header_lines(results: PerfRunResults) -> list[str]:
    out = [f"# perf_analyzer sweeps: {results.run_id}", ""]
    out += [f"Command: `{results.command}`. Host: {results.host}.",
            "Raw outputs (CSV, per-request exports, stdout of every perf_analyzer run) are under `raw/`; "
            "every measuring command line is in `commands.sh` (each line measures again into a folder of its own).", ""]
    out += ["## Headline figures (targets are recorded, not asserted)", ""]
    out += [f"- {line}" for line in results.headlines] or ["None this run: no A/B block or in-process limit was measured."]
    out += [""]
    if results.inputs:
        out += ["## Inputs", ""]
        out += [f"- **{model}**: {text}" for model, text in sorted(results.inputs.items())]
        out.append("")
    return out


def _sweep_lines(sweeps: Mapping[str, list[PerfRecord]], knees: Mapping[str, Any]) -> list[str]:
    out = ["## Sweeps", ""]
    for name, rows in sweeps.items():
        if name.startswith("ab."):
            continue
        first = rows[0]
        out += [f"### {name} ({first.model}, {first.variant}, {first.mode}, batch {first.batch_size})", ""]
        out += records_table(sorted(rows, key=lambda r: r.load)) + [""]
        if knees.get(name):
            out += [f"Knee: {knees[name]['text']}", ""]
    return out


def _ab_lines(results: PerfRunResults, sweeps: Mapping[str, list[PerfRecord]]) -> list[str]:
    out: list[str] = []
    if results.delay:
        out += ["## Batching delay (max_queue_delay) sweep", "", results.delay["text"], ""]
    ab_records = {n: r for n, r in sweeps.items() if n.startswith("ab.")}
    if not (ab_records or results.loadgen):
        return out
    out += ["## A/B comparisons (same run, same temporary server)", ""]
    out += [f"- {line}" for line in results.ab_notes or ()] + [""]
    if results.candidates:
        c = results.candidates
        out += ["### Batcher candidates (priority levels and queue policies on)", "",
                f"Against the plain batcher (no delay window, no priority levels or queue policies): "
                f"{c['plain_c16']:.0f} infer/s at concurrency 16. Requests and stalls count both concurrencies (1 and 16); "
                f"all closed-loop A/B measurements of this block: {c['requests_all_closed_loop']} requests, "
                f"{c['stalled_all_closed_loop']} stalled.", "", c["table"], ""]
    for name, rows in ab_records.items():
        out += [f"### {name} ({rows[0].variant}, {rows[0].mode}, batch {rows[0].batch_size})", ""]
        out += records_table(sorted(rows, key=lambda r: r.load)) + [""]
    if results.loadgen:
        out += ["### Open-loop client (Poisson arrivals; static batching waits for its batch to fill)", ""]
        out += stream_table(results.loadgen) + [""]
    return out


def _tail_lines(results: PerfRunResults, plots: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    if results.priority:
        out += ["## Priority mix", "", *results.priority.get("text", []), ""]
        if results.priority.get("streams"):
            out += stream_table(results.priority["streams"]) + [""]
    if results.limit:
        out += limit_section("In-process ONNX Runtime limit", results.limit)
    for model, limit in sorted(results.limits.items()):
        out += limit_section(f"In-process limit of {model}", limit)
    if results.peers:
        from perf_sweep.peers.report import campaign_section_lines

        out += campaign_section_lines(results.peers)
    if plots:
        out += ["## Plots", ""] + [f"![{title}]({file})" for title, file in plots.items()] + [""]
    if results.skipped:
        out += ["## Not measured in this run", ""] + [f"- {line}" for line in results.skipped] + [""]
    return out


def render_markdown(results: PerfRunResults | Mapping[str, Any], plots: Mapping[str, str]) -> str:
    """The report text. `results` is the run's results.json (typed, or a document the typed
    reader checks first); `plots` maps titles to file names."""
    results = as_perf_results(results, "the results to render")
    sweeps = _by_sweep(results.records)
    return "\n".join(_header_lines(results) + _sweep_lines(sweeps, results.knees)
                     + _ab_lines(results, sweeps) + _tail_lines(results, plots))


#: The campaign's latency samples (per sweep and level, for the CDF plots), beside its results.json.
LATENCY_SAMPLES_FILE = "latency_samples.json"


def write_latency_samples(folder: Path, samples: Mapping[str, Any]) -> Path:
    path = Path(folder) / LATENCY_SAMPLES_FILE
    path.write_text(json.dumps(samples))
    return path


def read_latency_samples(folder: Path) -> dict[str, Any]:
    """The samples `write_latency_samples` wrote, {} for a run without them (the report then draws no CDF)."""
    path = Path(folder) / LATENCY_SAMPLES_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def write_report(folder: Path, results: PerfRunResults | Mapping[str, Any],
                 cdf_samples: Mapping[str, Sequence[float]] | None = None) -> Path:
    """report.md and its PNGs in `folder`."""
    folder = Path(folder)
    results = as_perf_results(results, "the results to render")
    records = results.records
    plots: dict[str, str] = {}
    sweep_records = [r for r in records if not r.sweep.startswith("ab.")]
    if plot_latency_vs_throughput(sweep_records, folder / "latency_vs_throughput.png", "Latency vs throughput (served)"):
        plots["Latency vs throughput per model and sweep"] = "latency_vs_throughput.png"
    ab = [r for r in records if r.sweep.startswith("ab.") and r.mode == "concurrency"]
    if plot_latency_vs_throughput(ab, folder / "ab_latency_vs_throughput.png", "A/B variants, same temporary server",
                                  panel_of=lambda r: "closed loop (concurrency sweep)"):
        plots["A/B variants: latency vs throughput"] = "ab_latency_vs_throughput.png"
    if cdf_samples and plot_latency_cdfs(cdf_samples, folder / "priority_latency_cdf.png", "Per-priority latency CDF"):
        plots["Per-priority latency CDF"] = "priority_latency_cdf.png"
    path = folder / "report.md"
    path.write_text(render_markdown(results, plots))
    return path
