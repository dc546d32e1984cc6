"""The build report: what each model and variant cost and how good it is (JSON + Markdown).

Per model and variant: file size, accuracy or fidelity (the budget metric), ONNX Runtime CPU
latency at batch 1 and 32 (measured in the build, FP32 and INT8 interleaved in one run), the
layers kept in higher precision, and the calibration (method, sampling, size, seed). The
stratified-vs-random calibration study is written by `python -m model_build benchmark` (it takes
minutes) and included here when present.
"""
from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from contracts.devices import read_cpu_info


def render_build_report_markdown(report: Mapping[str, Any]) -> str:
    lines = [
        "# Build report",
        "",
        f"Generated {report['generated_at']} on {report['machine']}.",
        "",
        "| model | recipe | variant | served | file size | metric | value | CPU ms b1 | CPU ms b32 | kept in higher precision | calibration | build s |",
        "|---|---|---|---|---:|---|---:|---:|---:|---|---|---:|",
    ]
    for model in report["models"]:
        for name, variant in sorted(model.get("variants", {}).items()):
            served = "yes" if variant.get("file") == model.get("served_file") else ""
            latency = variant.get("latency_ms") or _fp32_latency_from_int8_run(model, name)
            kept = variant.get("high_precision_layers")
            calibration = variant.get("calibration")
            lines.append(
                f"| {model['model']} | {model['recipe']} | {name} | {served} | "
                f"{variant.get('size_bytes', 0) / 1e6:.2f} MB | {variant.get('metric', '')} | "
                f"{variant.get('value', float('nan')):.4f} | {_ms(latency.get('batch_1'))} | {_ms(latency.get('batch_32'))} | "
                f"{_kept(kept)} | {_calibration(calibration)} | {model.get('build_seconds', '')} |"
            )
    for model in report["models"]:
        for section in model.get("report_sections", []):
            lines += ["", section]
        for variant in model.get("variants", {}).values():
            if variant.get("report_section"):
                lines += ["", variant["report_section"]]
    if report.get("served"):
        lines += ["", "## Served (model_repository/, what clients call)", "",
                  "| model | served | backend | max_batch_size | instances | file | sha256 |", "|---|---|---|---:|---:|---|---|"]
        lines += [f"| {r['model']} | {r['served']} | {r['backend']} | {r['max_batch_size']} | {r['instances']} | {r['file']} | "
                  f"{r['sha256']} |" for r in report["served"]]
    reduced = [m["model"] for m in report["models"] if (m.get("build_host") or {}).get("int8_reduce_range")]
    if reduced:
        lines += ["", f"INT8 CPU weights are 7-bit (`reduce_range`) in {', '.join(reduced)}: built on a CPU without VNNI "
                      f"(model_build.int8.quantize.cpu_lacks_vnni); the same serving.toml built on a VNNI CPU gives 8-bit weights."]
    for section in report.get("extra_sections", []):
        lines += ["", section]
    for line in report.get("skipped", []):
        lines += ["", f"SKIPPED: {line}"]
    return "\n".join(lines) + "\n"


def _fp32_latency_from_int8_run(model: Mapping[str, Any], name: str) -> Mapping[str, float]:
    """FP32 latency measured in the same run as the INT8 variant (recipes that do not time FP32)."""
    if name != "fp32":
        return {}
    return model.get("variants", {}).get("int8_mixed", {}).get("fp32_latency_ms_same_run", {})


def _ms(value) -> str:
    return "" if value is None else f"{value:.2f}"


def _kept(layers) -> str:
    if layers is None:
        return ""
    return f"{len(layers)}: " + ", ".join(f"`{n}`" for n in layers) if layers else "none"


def _calibration(calibration) -> str:
    if not calibration:
        return ""
    return f"{calibration['method']}, {calibration['sampling']} {calibration['size']} (seed {calibration['seed']})"


def served_rows(repository: Path, models: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per served model, from what is installed in `repository` (its config.pbtxt, parsed with
    Triton's schema, and its model file): what clients call, the fused text embedder and the tokenizer
    included, which have no variants of their own (the variant table above has no row for them).
    `models`: (name, what the build line says is served)."""
    from contracts.file_digest import sha256_file
    from contracts.model_config import read_model_config

    rows = []
    for name, served in models:
        try:
            config = read_model_config(Path(repository) / name)
        except (OSError, ValueError):
            continue  # not installed (a build that failed before installing it)
        files = sorted(p for p in (Path(repository) / name / "1").glob("*") if p.is_file() and p.suffix in (".onnx", ".plan", ".py"))
        rows.append({"model": name, "served": served, "backend": config.backend or config.platform,
                     "max_batch_size": config.max_batch_size,
                     "instances": sum(g.count or 1 for g in config.instance_group) or 1,
                     "file": files[0].name if files else "", "sha256": sha256_file(files[0])[:12] if files else ""})
    return rows


def write_build_report(
    records: Sequence[Mapping[str, Any]],
    out_dir: Path,
    skipped: Sequence[str] = (),
    extra_sections: Sequence[str] = (),
    served: Sequence[Mapping[str, Any]] = (),
) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    study = out_dir / "calibration_study.md"
    extra_sections = list(extra_sections) + ([study.read_text()] if study.exists() else [])
    report = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {read_cpu_info().describe()}",
        "models": list(records),
        "served": list(served),
        "skipped": list(skipped),
        "extra_sections": extra_sections,
    }
    (out_dir / "build_report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    md = out_dir / "build_report.md"
    md.write_text(render_build_report_markdown(report))
    return md
