"""run/manifest.json: which server (endpoints) serves each model. Written by `serving serve`,
read by the clients, the perf sweeps and the monitoring stack, all through `Manifest`.

Why a typed reader: four packages read this file; each used to pick keys out of raw dicts with
its own idea of what is optional. `Manifest.from_dict` says once what a manifest holds and what
is wrong with a broken one (missing keys named, the expected form given).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from contracts.errors import ServingError
from contracts.layout import MANIFEST as MANIFEST_PATH, RUN_DIR, write_text_atomically  # noqa: F401 (RUN_DIR re-exported)

ENDPOINT_KEYS = ("http", "grpc", "metrics")


class ManifestError(ServingError):
    """run/manifest.json is missing or not of the form `serving serve` writes."""


@dataclass(frozen=True)
class ModelEndpoints:
    """One model's entry: its partition's HTTP and gRPC `host:port` and metrics URL."""

    model: str
    http: str
    grpc: str | None = None
    metrics: str | None = None
    partition: str | None = None

    def url(self, protocol: str) -> str:
        """`host:port` for protocol "http" or "grpc" (a `Protocol` enum's value works too)."""
        return self.http if str(getattr(protocol, "value", protocol)) == "http" else self.grpc


@dataclass(frozen=True)
class PartitionEntry:
    """One partition's server: endpoints, process, CPU set and thread count (the plan's entry)."""

    name: str
    http: str | None = None
    grpc: str | None = None
    metrics: str | None = None
    pid: int | None = None
    state: str = "unknown"
    restarts: int = 0
    cpus: tuple[int, ...] = ()
    intra_op_threads: int = 0
    models: tuple[str, ...] = ()
    #: Every core the partition may run on: its home cores, or every partition's home cores when
    #: elastic CPU sets lend it the idle ones (what an in-process comparison must be pinned to); () in
    #: older manifests.
    reachable_cpus: tuple[int, ...] = ()
    compute_share: int = 0
    memory_mb: int = 0
    #: Its CUDA MPS variables (a partition with GPU models on a GPU host), else empty.
    mps: Mapping[str, str] = field(default_factory=dict)
    #: Its server's log file.
    log: str | None = None

    @property
    def runs_on(self) -> tuple[int, ...]:
        """The cores the partition's server may compute on (its home cores where nothing more is known)."""
        return self.reachable_cpus or self.cpus


@dataclass(frozen=True)
class Manifest:
    mechanism: str = "unknown"
    models: Mapping[str, ModelEndpoints] = field(default_factory=dict)
    partitions: Mapping[str, PartitionEntry] = field(default_factory=dict)
    #: The supervisor's own metrics URL (restarts, crash loops), when it serves one.
    supervisor_metrics: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "the manifest") -> "Manifest":
        if not isinstance(data, Mapping):
            raise ManifestError(f"{source} is not a JSON object; expected {{\"models\": {{...}}, \"partitions\": {{...}}}}.")
        models = {}
        for name, entry in _objects(data, "models", source).items():
            missing = [k for k in ("http",) if not isinstance(entry, Mapping) or not isinstance(entry.get(k), str)]
            if missing:
                raise ManifestError(f"{source}: model {name!r} lacks {missing}; expected keys {list(ENDPOINT_KEYS)} and `partition`.")
            models[name] = ModelEndpoints(name, str(entry["http"]), entry.get("grpc"), entry.get("metrics"), entry.get("partition"))
        partitions = {}
        for name, entry in _objects(data, "partitions", source).items():
            if not isinstance(entry, Mapping):
                raise ManifestError(f"{source}: partition {name!r} is {entry!r}; expected an object with {list(ENDPOINT_KEYS)}, "
                                    "`pid`, `cpus`, `models`.")
            where = f"{source}: partition {name!r}"
            mps = entry.get("mps") or {}
            if not isinstance(mps, Mapping):
                raise ManifestError(f"{where}: `mps` is {mps!r}; expected an object of CUDA MPS variables.")
            partitions[name] = PartitionEntry(
                name, entry.get("http"), entry.get("grpc"), entry.get("metrics"), entry.get("pid"), str(entry.get("state", "unknown")),
                _integer(entry.get("restarts"), where, "restarts"), _integers(entry.get("cpus"), where, "cpus"),
                _integer(entry.get("intra_op_threads"), where, "intra_op_threads"),
                tuple(entry.get("models") or ()), _integers(entry.get("reachable_cpus"), where, "reachable_cpus"),
                _integer(entry.get("compute_share"), where, "compute_share"), _integer(entry.get("memory_mb"), where, "memory_mb"),
                {str(k): str(v) for k, v in mps.items()}, entry.get("log"))
        supervisor = data.get("supervisor") or {}
        if not isinstance(supervisor, Mapping):
            raise ManifestError(f"{source}: `supervisor` is {supervisor!r}; expected an object {{\"metrics\": URL}}.")
        return cls(str(data.get("mechanism", "unknown")), models, partitions, supervisor.get("metrics"))

    def model(self, name: str) -> ModelEndpoints:
        try:
            return self.models[name]
        except KeyError:
            raise ManifestError(f"model {name!r} is not in the manifest; served models: {sorted(self.models)}.") from None

    def partition_of(self, model: str) -> PartitionEntry:
        """The partition serving `model` (an empty entry when the manifest names none)."""
        name = self.model(model).partition or "default"
        return self.partitions.get(name, PartitionEntry(name))


def _objects(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{source}: `{key}` is {value!r}; expected an object {{name: {{...}}}}.")
    return value


def _integer(value: Any, where: str, key: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{where}: `{key}` is {value!r}; expected an integer.")
    return value


def _integers(value: Any, where: str, key: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or any(isinstance(c, bool) or not isinstance(c, int) for c in value):
        raise ManifestError(f"{where}: `{key}` is {value!r}; expected a list of core numbers, e.g. [0, 1].")
    return tuple(value)


def as_manifest(manifest: "Manifest | Mapping[str, Any]") -> Manifest:
    """A `Manifest` from either a parsed document or a `Manifest` (readers accept both)."""
    return manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)


def write_manifest(manifest: Mapping[str, Any], path: Path = MANIFEST_PATH) -> Path:
    """Write atomically (readers never see half a file); the document is checked by the reader first."""
    Manifest.from_dict(manifest, "the manifest being written")
    return write_text_atomically(path, json.dumps(manifest, indent=2, sort_keys=True))


def _read_manifest_dict(path: Path = MANIFEST_PATH) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ManifestError(f"no server manifest at {path}: start the servers with `make serve`.") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path} is not JSON ({exc}); `make serve` rewrites it.") from None


def read_manifest(path: Path = MANIFEST_PATH) -> Manifest:
    return Manifest.from_dict(_read_manifest_dict(path), str(path))
