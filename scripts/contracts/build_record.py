"""artifacts/<model>/build.json: what one model's build produced. Written by the build pipeline
(from the recipe's record), read by the installers, size-batches, the benchmark, the A/B block
and the padding report, all through `BuildRecord`.

The common fields are typed; what only one recipe records (a corpus, a GGUF's facts) stays in
`data`, the whole document, for that recipe's own code.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from contracts.errors import ServingError
from contracts.layout import write_text_atomically

BUILD_RECORD_FILE = "build.json"
REQUIRED_KEYS = ("model", "recipe", "fingerprint", "files")


class BuildRecordError(ServingError):
    """build.json is missing or lacks what every build writes."""


@dataclass(frozen=True)
class BuildRecord:
    model: str
    recipe: str
    fingerprint: str
    files: tuple[str, ...]
    build_seconds: float = 0.0
    #: The file installed into model_repository (None: the recipe installs no ONNX file of its own).
    served_file: str | None = None
    #: variant name -> {"file": ..., "metric": ..., "validation": ...} for the precision variants.
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "build.json") -> "BuildRecord":
        if not isinstance(data, Mapping):
            raise BuildRecordError(f"{source} is a JSON {type(data).__name__}, not an object with {list(REQUIRED_KEYS)} "
                                   "(rebuild with `make build-engines`).")
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise BuildRecordError(f"{source} lacks {missing}; every build writes {list(REQUIRED_KEYS)} (rebuild with `make build-engines`).")
        files, variants, seconds = data["files"], data.get("variants") or {}, data.get("build_seconds") or 0.0
        checks = (("files", isinstance(files, (list, tuple)) and all(isinstance(f, str) for f in files), "a list of file names"),
                  ("variants", isinstance(variants, Mapping) and all(isinstance(v, Mapping) for v in variants.values()),
                   'an object {variant: {"file": ...}}'),
                  ("build_seconds", isinstance(seconds, (int, float)) and not isinstance(seconds, bool), "a number"),
                  ("served_file", isinstance(data.get("served_file"), (str, type(None))), "a file name or null"))
        for key, ok, expected in checks:
            if not ok:
                raise BuildRecordError(f"{source}: `{key}` = {data.get(key)!r}; expected {expected} "
                                       "(rebuild with `make build-engines`).")
        return cls(str(data["model"]), str(data["recipe"]), str(data["fingerprint"]), tuple(files),
                   float(seconds), data.get("served_file"), dict(variants), dict(data))

    def variant_files(self, workdir: Path) -> dict[str, Path]:
        """Each variant's file in `workdir` that exists, by variant name."""
        return {name: Path(workdir) / v["file"] for name, v in self.variants.items()
                if v.get("file") and (Path(workdir) / v["file"]).exists()}


def build_record_path(workdir: Path) -> Path:
    return Path(workdir) / BUILD_RECORD_FILE


def read_build_record(workdir: Path) -> BuildRecord:
    path = build_record_path(workdir)
    try:
        return BuildRecord.from_dict(json.loads(path.read_text()), str(path))
    except FileNotFoundError:
        raise BuildRecordError(f"{path} is missing: build {Path(workdir).name} first (`make build-engines`).") from None
    except json.JSONDecodeError as exc:
        raise BuildRecordError(f"{path} is not JSON ({exc}): rebuild with `make build-engines FORCE=1`.") from None


def write_build_record(workdir: Path, data: Mapping[str, Any]) -> Path:
    """Check the document as a reader will, then write it atomically (sorted keys: stable diffs)."""
    BuildRecord.from_dict(data, "the build record being written")
    return write_text_atomically(build_record_path(workdir), json.dumps(data, indent=2, sort_keys=True))
