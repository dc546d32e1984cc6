"""Report of `make perf-generate`: tables, the targets checked, and plots (pure rendering + matplotlib)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

COLUMNS = ("name", "output_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p99_s",
           "goodput_requests_per_s", "sla_met", "mean_decode_batch", "mean_occupancy", "prefix_hit_rate", "load_average_before_after")


def _arm(arms: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((a for a in arms if a["name"] == name), None)


def targets(arms: Sequence[Mapping[str, Any]]) -> list[str]:
    """The issue's two targets, checked on the measured arms (PASS/FAIL with the numbers)."""
    lines = []
    rates = sorted({a["rate"] for a in arms if a["name"].startswith("continuous@")})
    if rates:
        top = rates[-1]
        cont, stat = _arm(arms, f"continuous@{top:g}"), _arm(arms, f"static@{top:g}")
        if cont and stat:
            ratio = cont["output_tokens_per_s"] / stat["output_tokens_per_s"]
            ok = ratio >= 2.0 and cont["ttft_p99_s"] <= stat["ttft_p99_s"]
            lines.append(f"- {'PASS' if ok else 'FAIL'}: continuous >= 2x static output tokens/s at equal or better P99 TTFT "
                         f"(at {top:g} req/s): {ratio:.2f}x, P99 TTFT {cont['ttft_p99_s']} s vs {stat['ttft_p99_s']} s.")
    on = next((a for a in arms if a["name"].startswith("prefix on@")), None)
    off = next((a for a in arms if a["name"].startswith("prefix off@")), None)
    if on and off:
        cut = 1 - on["ttft_p50_s"] / off["ttft_p50_s"]
        lines.append(f"- {'PASS' if cut >= 0.30 else 'FAIL'}: prefix sharing cuts TTFT by >= 30%: P50 {on['ttft_p50_s']} s on vs "
                     f"{off['ttft_p50_s']} s off ({cut:.0%} lower; hit rate {on['prefix_hit_rate']:.0%}).")
    return lines


def render_generate_markdown(document: Mapping[str, Any], plots: Sequence[str]) -> str:
    arms = document["arms"]
    sla = document["sla"]
    lines = ["# Generation benchmark (`make perf-generate`)", "", f"Machine: {document['machine']}.", f"Command: `{document['command']}`.",
             f"Engine settings (from the served config): {', '.join(f'{k}={v}' for k, v in sorted(document['settings'].items()) if k in ('max_running', 'num_blocks', 'block_size', 'prefill_chunk_tokens', 'kv_dtype', 'max_context'))}.",
             f"SLA for goodput: TTFT <= {sla['ttft_s']} s and mean inter-token gap <= {sla['itl_s']} s.", "", "## Targets", "",
             *targets(arms), "", "## All arms", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for arm in arms:
        lines.append("| " + " | ".join(str(arm.get(c, "")) for c in COLUMNS) + " |")
    lines += ["", "Occupancy = mean decode batch / slots, per decode step. Times in seconds; open-loop Poisson arrivals, seeded.", ""]
    if document.get("decode_speed"):
        lines += ["## Decode step speed (ONNX Runtime, this process's threads)", "", "| batch | past | step ms | tokens/s | load average |",
                  "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['batch']} | {r['past']} | {r['step_ms']} | {r['tokens_per_s']} | {r['load_average']} |" for r in document["decode_speed"]]
        lines.append("")
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def plot_by_rate(arms: Sequence[Mapping[str, Any]], folder: Path) -> list[str]:
    if not arms:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for metric, label, file in (("output_tokens_per_s", "output tokens/s", "tokens_per_s.png"), ("ttft_p99_s", "P99 TTFT (s)", "ttft_p99.png")):
        figure, axis = plt.subplots(figsize=(6, 4))
        for policy in ("continuous", "static", "one_at_a_time"):
            points = sorted((a["rate"], a[metric]) for a in arms if a["name"].startswith(f"{policy}@"))
            if points:
                axis.plot(*zip(*points), marker="o", label=policy)
        axis.set_xlabel("arrival rate (requests/s)")
        axis.set_ylabel(label)
        axis.legend()
        axis.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(folder / file, dpi=100)
        plt.close(figure)
        names.append(file)
    return names


def write_generate_report(folder: Path, document: Mapping[str, Any]) -> Path:
    plots = plot_by_rate(document["arms"], folder)
    path = folder / "report.md"
    path.write_text(render_generate_markdown(document, plots))
    return path
