"""The serving configuration: one source of truth for what is served and how.

`model_repository/serving.toml` is parsed into frozen dataclasses that validate themselves, so a
bad setting fails before any process starts, with an error naming the field, the value and what is
allowed. Everything else (Triton `config.pbtxt` files, launcher flags, build targets) is derived
from these objects; nothing here touches the file system except `load_serving_spec`.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Mapping

from serving.errors import ConfigError

#: Model and partition names become directory names and URL path segments: keep them boring.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class Variant(str, Enum):
    """Which precision variant of a model is served."""

    FP32 = "fp32"
    INT8_MIXED = "int8_mixed"


class Protocol(str, Enum):
    HTTP = "http"
    GRPC = "grpc"


def check_name(field_name: str, value: str) -> str:
    """Reject names that could escape the model repository or break a URL."""
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise ConfigError(
            f"`{field_name}` = {value!r} is not a valid name: expected lowercase letters, digits and "
            f"underscores, starting with a letter, at most 64 characters (pattern {NAME_PATTERN.pattern})."
        )
    return value


def _check_int_range(field_name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"`{field_name}` = {value!r} must be an integer.")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise ConfigError(f"`{field_name}` = {value} is out of range: allowed {allowed}.")
    return value


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's per-priority-level queue policy.

    A full queue (`max_queue_size`) answers HTTP 503 / gRPC UNAVAILABLE at once; a request that
    waits longer than its timeout is rejected rather than served stale.
    """

    max_queue_size: int
    default_timeout_microseconds: int
    allow_timeout_override: bool = True

    def __post_init__(self) -> None:
        _check_int_range("max_queue_size", self.max_queue_size, 1)
        _check_int_range("default_timeout_microseconds", self.default_timeout_microseconds, 1)


@dataclass(frozen=True)
class PriorityLevel:
    name: str
    level: int
    queue: QueuePolicy

    def __post_init__(self) -> None:
        check_name("priorities.<name>", self.name)
        _check_int_range(f"priorities.{self.name}.level", self.level, 1, 16)


@dataclass(frozen=True)
class Batching:
    """Dynamic-batcher settings shared by every model unless a model overrides them."""

    #: 5-20 ms: long enough to gather a batch at moderate load, short enough to keep P99 low.
    max_queue_delay_microseconds: int = 10_000
    default_priority: str = "batch"

    def __post_init__(self) -> None:
        _check_int_range("batching.max_queue_delay_microseconds", self.max_queue_delay_microseconds, 0, 1_000_000)


@dataclass(frozen=True)
class ServerEndpoints:
    """Where a tritonserver listens. Loopback unless told otherwise."""

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002

    def __post_init__(self) -> None:
        for name in ("http_port", "grpc_port", "metrics_port"):
            _check_int_range(f"server.{name}", getattr(self, name), 1, 65535)
        if len({self.http_port, self.grpc_port, self.metrics_port}) != 3:
            raise ConfigError(
                f"`server` ports must differ: http {self.http_port}, grpc {self.grpc_port}, "
                f"metrics {self.metrics_port}."
            )

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


@dataclass(frozen=True)
class ModelSpec:
    """One served model: what builds it, which variant is served, how it is batched."""

    name: str
    #: Name of the recipe in `model_build` that produces this model (e.g. "digit_cnn").
    recipe: str
    variant: Variant = Variant.FP32
    max_batch_size: int = 64
    instance_count: int = 1
    #: ONNX Runtime intra-op threads inside the Python backend; 0 lets ONNX Runtime decide.
    intra_op_threads: int = 0
    max_queue_delay_microseconds: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name("models.<name>", self.name)
        check_name(f"models.{self.name}.recipe", self.recipe)
        if not isinstance(self.variant, Variant):
            try:
                object.__setattr__(self, "variant", Variant(self.variant))
            except ValueError:
                allowed = ", ".join(v.value for v in Variant)
                raise ConfigError(
                    f"`models.{self.name}.variant` = {self.variant!r} is not a known variant: allowed {allowed}."
                ) from None
        _check_int_range(f"models.{self.name}.max_batch_size", self.max_batch_size, 1, 4096)
        _check_int_range(f"models.{self.name}.instance_count", self.instance_count, 1, 64)
        _check_int_range(f"models.{self.name}.intra_op_threads", self.intra_op_threads, 0, 256)
        if self.max_queue_delay_microseconds is not None:
            _check_int_range(
                f"models.{self.name}.max_queue_delay_microseconds", self.max_queue_delay_microseconds, 0, 1_000_000
            )


@dataclass(frozen=True)
class ServingSpec:
    models: tuple[ModelSpec, ...]
    priorities: tuple[PriorityLevel, ...]
    batching: Batching = Batching()
    server: ServerEndpoints = ServerEndpoints()

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("`models` is empty: at least one [models.<name>] table is required.")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigError(f"`models` names must be unique, got {names}.")
        levels = sorted(p.level for p in self.priorities)
        if levels != list(range(1, len(levels) + 1)):
            raise ConfigError(
                f"`priorities.*.level` must be 1..N without gaps (1 is served first), got {levels}."
            )
        if self.priorities and self.batching.default_priority not in {p.name for p in self.priorities}:
            raise ConfigError(
                f"`batching.default_priority` = {self.batching.default_priority!r} is not one of the "
                f"priorities {[p.name for p in self.priorities]}."
            )

    def model(self, name: str) -> ModelSpec:
        for spec in self.models:
            if spec.name == name:
                return spec
        raise ConfigError(f"no model named {name!r} in the serving configuration; known: {[m.name for m in self.models]}.")

    def priority(self, name: str) -> PriorityLevel:
        for level in self.priorities:
            if level.name == name:
                return level
        raise ConfigError(f"no priority named {name!r}; known: {[p.name for p in self.priorities]}.")

    @property
    def default_priority_level(self) -> int:
        return self.priority(self.batching.default_priority).level if self.priorities else 0


_MODEL_KEYS = {"recipe", "variant", "max_batch_size", "instance_count", "intra_op_threads", "max_queue_delay_microseconds", "options"}


def _only_keys(table_name: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"`{table_name}` has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}.")


def serving_spec_from_dict(data: Mapping[str, Any]) -> ServingSpec:
    """Build a validated `ServingSpec` from the parsed TOML document."""
    _only_keys("<top level>", data, {"models", "priorities", "batching", "server"})
    models = []
    for name, table in data.get("models", {}).items():
        _only_keys(f"models.{name}", table, _MODEL_KEYS)
        models.append(ModelSpec(name=name, **table))
    priorities = []
    for name, table in data.get("priorities", {}).items():
        _only_keys(f"priorities.{name}", table, {"level", "max_queue_size", "default_timeout_microseconds", "allow_timeout_override"})
        level = table.get("level")
        queue = QueuePolicy(**{k: v for k, v in table.items() if k != "level"})
        priorities.append(PriorityLevel(name=name, level=level, queue=queue))
    batching_table = data.get("batching", {})
    _only_keys("batching", batching_table, {"max_queue_delay_microseconds", "default_priority"})
    server_table = data.get("server", {})
    _only_keys("server", server_table, {"host", "http_port", "grpc_port", "metrics_port"})
    try:
        return ServingSpec(
            models=tuple(models),
            priorities=tuple(sorted(priorities, key=lambda p: p.level)),
            batching=Batching(**batching_table),
            server=ServerEndpoints(**server_table),
        )
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"incomplete serving configuration: {exc}") from None


def load_serving_spec(path: str | Path) -> ServingSpec:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"serving configuration {path} does not exist.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"serving configuration {path} is not valid TOML: {exc}") from None
    return serving_spec_from_dict(data)
