"""artifacts/<model>/rendered_from.json: which serving.toml a model's installed config.pbtxt was
rendered from, and the digest of the settings it was rendered with. Written by the build for each
model it installs, read by `serving serve`.

Why: serving.toml is the one source of truth, but Triton serves the config.pbtxt files that
`make build-engines` rendered from it, so an edit to serving.toml changes nothing served until they
are rendered again; `serve` started the old settings in silence (a review, 2026-12-07: realtime
`max_queue_size` 24 -> 20 in serving.toml, 24 served, while `contracts.starvation` reported 20).
`serve` now compares this record with the serving.toml it is given: configs rendered from an older
version of the same file are refused, naming the models and the command that renders them (cached:
seconds); configs rendered from another file with other settings are served with a warning (a
test's own serving.toml beside the built repository is such a file).

The digest covers what rendering reads: every table but `[server]`, of which only
`max_input_bytes` (checked against each config); ports, host and the other run-time settings of
`[server]` change nothing rendered, so editing them asks for no new build. Comments, blank lines and
key order do not count. The digest is of the text the build parsed, taken once at its start: an
edit during a build of several minutes is not recorded as rendered.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from contracts.layout import PROJECT_ROOT, write_text_atomically
from contracts.serving_spec import ServingSpec, read_serving_config, serving_spec_from_text

RENDERED_FROM_FILE = "rendered_from.json"
#: The one `[server]` setting that rendering reads (`check_request_inputs_fit`).
RENDERED_SERVER_KEYS = ("max_input_bytes",)


@dataclass(frozen=True)
class RenderedFrom:
    #: The serving.toml the config was rendered from: relative to the checkout when inside it (a
    #: moved or copied checkout still matches), else absolute.
    serving_config: str
    #: `settings_digest` of its text as the build parsed it.
    settings_sha256: str


@dataclass(frozen=True)
class ConfigCheck:
    """What `check_rendered_configs` found: `stale`, models rendered from an older version of this
    very file; `other_settings`, models rendered from another file whose settings differ (by file)."""

    stale: tuple[str, ...] = ()
    other_settings: tuple[tuple[str, str], ...] = ()


def settings_digest(text: str) -> str:
    """sha256 of what rendering reads from a serving.toml (module docstring), as canonical JSON; of
    the raw text where it does not parse (the build refuses it)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    server = data.pop("server", {})
    if isinstance(server, dict):
        data["server"] = {key: server[key] for key in RENDERED_SERVER_KEYS if key in server}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def load_serving_spec_and_digest(serving_config: str | Path) -> tuple[ServingSpec, str]:
    """The spec of a serving.toml and the `settings_digest` of the same text, from ONE read: the
    build records the digest of the settings it rendered, so the two must not come from two reads
    (an edit between them recorded settings that were never rendered). Read at the start of a
    build or size-batches run, not at the end of minutes of building."""
    text = read_serving_config(serving_config)
    return serving_spec_from_text(text, Path(serving_config)), settings_digest(text)


def config_name(serving_config: Path) -> str:
    """How a record names a serving.toml: relative to the checkout when inside it."""
    path = Path(serving_config).resolve()
    try:
        return str(path.relative_to(PROJECT_ROOT.resolve()))
    except ValueError:
        return str(path)


def write_rendered_from(workdir: Path, serving_config: Path, settings_sha256: str) -> Path:
    """Record, in the model's build folder, the serving.toml its installed config was rendered from
    and the digest of the text the build parsed (`settings_digest`, taken when it read the file)."""
    record = RenderedFrom(config_name(serving_config), settings_sha256)
    return write_text_atomically(Path(workdir) / RENDERED_FROM_FILE, json.dumps(record.__dict__, indent=2) + "\n")


def read_rendered_from(workdir: Path) -> RenderedFrom | None:
    """The record, or None where there is none of this form (a build from before it was written)."""
    try:
        data = json.loads((Path(workdir) / RENDERED_FROM_FILE).read_text())
        return RenderedFrom(str(data["serving_config"]), str(data["settings_sha256"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_rendered_configs(serving_config: Path, models: Iterable[str], artifacts: Path) -> ConfigCheck:
    """Compare the installed configs' records with `serving_config` (no record: not judged)."""
    name = config_name(serving_config)
    digest = settings_digest(Path(serving_config).read_text())
    stale, other = [], []
    for model in models:
        record = read_rendered_from(Path(artifacts) / model)
        if record is None or record.settings_sha256 == digest:
            continue
        if record.serving_config == name:
            stale.append(model)
        else:
            other.append((model, record.serving_config))
    return ConfigCheck(tuple(stale), tuple(other))
