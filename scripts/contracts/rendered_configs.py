"""artifacts/<model>/rendered_from.json: which serving.toml a model's installed config.pbtxt was
rendered from. Written by the build for each model it installs, read by `serving serve`.

Why: serving.toml is the one source of truth, but Triton serves the config.pbtxt files that
`make build-engines` rendered from it, so an edit to serving.toml changes nothing served until they
are rendered again; `serve` started the old settings in silence (a review, 2026-12-07: realtime
`max_queue_size` 24 -> 20 in serving.toml, 24 served, while `contracts.starvation` reported 20).
`serve` now compares this record with the serving.toml it is given and refuses stale configs,
naming the models and the command that renders them (cached: seconds).

The digest is of the parsed TOML (comments, blank lines and key order do not count), of the whole
file: the partitions' memory budgets size the KV cache and max_batch_size, and `[server]
max_input_bytes` is checked against each config, so no table is safely left out.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from contracts.layout import write_text_atomically

RENDERED_FROM_FILE = "rendered_from.json"


@dataclass(frozen=True)
class RenderedFrom:
    #: The serving.toml the config was rendered from, resolved.
    serving_config: str
    #: `settings_digest` of its text then.
    settings_sha256: str


def settings_digest(text: str) -> str:
    """sha256 of a serving.toml's settings: its parsed tables as canonical JSON (comments, layout and
    key order do not change it); of the raw text where it does not parse (the build refuses it)."""
    try:
        canonical = json.dumps(tomllib.loads(text), sort_keys=True, default=str)
    except tomllib.TOMLDecodeError:
        canonical = text
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def write_rendered_from(workdir: Path, serving_config: Path) -> Path:
    """Record, in the model's build folder, the serving.toml its installed config was rendered from."""
    serving_config = Path(serving_config).resolve()
    record = RenderedFrom(str(serving_config), settings_digest(serving_config.read_text()))
    return write_text_atomically(Path(workdir) / RENDERED_FROM_FILE, json.dumps(record.__dict__, indent=2) + "\n")


def read_rendered_from(workdir: Path) -> RenderedFrom | None:
    """The record, or None where there is none of this form (a build from before it was written)."""
    try:
        data = json.loads((Path(workdir) / RENDERED_FROM_FILE).read_text())
        return RenderedFrom(str(data["serving_config"]), str(data["settings_sha256"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stale_rendered_models(serving_config: Path, models: Iterable[str], artifacts: Path) -> tuple[str, ...]:
    """The models whose installed config was rendered from this very serving.toml, before its settings
    last changed. A config rendered from another file (a test's own serving.toml beside the built
    repository) or with no record is not judged: nothing says what it should hold."""
    serving_config = Path(serving_config).resolve()
    digest = settings_digest(serving_config.read_text())
    stale = []
    for model in models:
        record = read_rendered_from(Path(artifacts) / model)
        if record is not None and record.serving_config == str(serving_config) and record.settings_sha256 != digest:
            stale.append(model)
    return tuple(stale)
