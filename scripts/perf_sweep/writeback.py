"""Write a recommended `max_queue_delay_microseconds` back into serving.toml, the source of truth.

Only on request (`perf_sweep run --write-back` or `perf_sweep write-back`): the edit is one line in
one `[models.<name>]` table, leaving comments and layout alone, and the result is re-validated by
`contracts.serving_spec` before it is written.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from perf_sweep.errors import SweepPlanError

_KEY = "max_queue_delay_microseconds"


def set_model_queue_delay(toml_text: str, model: str, delay_us: int) -> str:
    """`toml_text` with `[models.<model>] max_queue_delay_microseconds = delay_us` set or replaced."""
    if isinstance(delay_us, bool) or not isinstance(delay_us, int) or not 0 <= delay_us <= 1_000_000:
        raise SweepPlanError(f"`{_KEY}` = {delay_us!r} must be an integer between 0 and 1000000.")
    lines = toml_text.splitlines(keepends=True)
    header = re.compile(rf"^\s*\[\s*models\.{re.escape(model)}\s*\]\s*(#.*)?$")
    start = next((i for i, line in enumerate(lines) if header.match(line.rstrip("\n"))), None)
    if start is None:
        raise SweepPlanError(f"serving configuration has no [models.{model}] table to write `{_KEY}` into.")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\s*\[", lines[i])), len(lines))
    new_line = f"{_KEY} = {delay_us}  # chosen by perf_sweep's delay-window sweep\n"
    for i in range(start + 1, end):
        if re.match(rf"^\s*{_KEY}\s*=", lines[i]):
            lines[i] = new_line
            break
    else:
        insert_at = end
        # keep the blank lines and the comment block before the next table with that table (the line
        # went in under the next model's comment, as if it were that model's: a review, 2026-12-07)
        while insert_at > start + 1 and (not lines[insert_at - 1].strip() or lines[insert_at - 1].lstrip().startswith("#")):
            insert_at -= 1
        lines.insert(insert_at, new_line)
    text = "".join(lines)
    from contracts.serving_spec import serving_spec_from_dict

    spec = serving_spec_from_dict(tomllib.loads(text))  # raises ConfigError if the edit broke anything
    if spec.model(model).max_queue_delay_microseconds != delay_us:
        raise SweepPlanError(f"write-back of `{_KEY}` for {model} did not take effect; file left unchanged.")
    return text


def write_queue_delay(config_path: Path, model: str, delay_us: int) -> Path:
    path = Path(config_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SweepPlanError(f"serving configuration {path} does not exist.") from None
    from contracts.layout import write_text_atomically

    # serving.toml is what every later build and `make serve` reads: a write cut short (the run killed,
    # a full disk) must leave the old file, never half of one
    return write_text_atomically(path, set_model_queue_delay(text, model, delay_us))
