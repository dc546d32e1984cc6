"""The build report: what each model and variant cost and how good it is (JSON + Markdown)."""
from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence


def render_build_report_markdown(report: Mapping[str, Any]) -> str:
    lines = [
        "# Build report",
        "",
        f"Generated {report['generated_at']} on {report['machine']}.",
        "",
        "| model | recipe | variant | served | file size | metric | value | build s |",
        "|---|---|---|---|---:|---|---:|---:|",
    ]
    for model in report["models"]:
        for name, variant in sorted(model.get("variants", {}).items()):
            served = "yes" if variant.get("file") == model.get("served_file") else ""
            lines.append(
                f"| {model['model']} | {model['recipe']} | {name} | {served} | "
                f"{variant.get('size_bytes', 0) / 1e6:.2f} MB | {variant.get('metric', '')} | "
                f"{variant.get('value', float('nan')):.4f} | {model.get('build_seconds', '')} |"
            )
    for model in report["models"]:
        for section in model.get("report_sections", []):
            lines += ["", section]
    for line in report.get("skipped", []):
        lines += ["", f"SKIPPED: {line}"]
    return "\n".join(lines) + "\n"


def write_build_report(records: Sequence[Mapping[str, Any]], out_dir: Path, skipped: Sequence[str] = ()) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip(),
        "models": list(records),
        "skipped": list(skipped),
    }
    (out_dir / "build_report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    md = out_dir / "build_report.md"
    md.write_text(render_build_report_markdown(report))
    return md
