"""The serving configuration: one source of truth for what is served and how.

`model_repository/serving.toml` is parsed into frozen dataclasses that validate themselves, so a
bad setting fails before any process starts, with an error naming the field, the value and what is
allowed. Everything else (Triton `config.pbtxt` files, launcher flags, build targets) is derived
from these objects; nothing here touches the file system except `load_serving_spec`.
"""
from __future__ import annotations

import dataclasses

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Mapping, Sequence

from contracts.errors import ConfigError, find_named
from contracts.scale_out_spec import Autoscaling, KubernetesSettings, autoscaling_from_table, kubernetes_from_table

#: Model and partition names become directory names and URL path segments: keep them boring.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class Variant(str, Enum):
    """Which precision variant of a model is served."""

    FP32 = "fp32"
    INT8_MIXED = "int8_mixed"


class Device(str, Enum):
    """Where a model's instances run: Triton's KIND_CPU or KIND_GPU (ONNX Runtime's CUDA provider)."""

    CPU = "cpu"
    GPU = "gpu"


class Protocol(str, Enum):
    HTTP = "http"
    GRPC = "grpc"


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`: the only addresses servers bind to unless told otherwise."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_name(field_name: str, value: str) -> str:
    """Reject names that could escape the model repository or break a URL."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ConfigError(
            f"`{field_name}` = {value!r} is not a valid name: expected lowercase letters, digits and "
            f"underscores, starting with a letter, at most 64 characters (pattern {NAME_PATTERN.pattern})."
        )
    return value


#: Option keys that name a file or folder; their values must stay inside the model's directory.
PATH_OPTION_SUFFIXES = ("_file", "_path", "_dir")


def check_relative_path(field_name: str, value: Any) -> str:
    """Reject a configured path that could leave the folder it is relative to (path traversal)."""
    parts = value.split("/") if isinstance(value, str) else []
    if (not isinstance(value, str) or not value or "\x00" in value or "\\" in value or value.startswith(("/", "~"))
            or any(part in ("", ".", "..") for part in parts)):
        raise ConfigError(
            f"`{field_name}` = {value!r} is not a safe relative path: expected a non-empty path like "
            f"'tokenizer/vocab.txt' without a leading '/' or '~', '.' or '..' components, backslashes or NUL."
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
        # the upper bounds are the types of Triton's ModelQueuePolicy fields (uint32, uint64)
        _check_int_range("max_queue_size", self.max_queue_size, 1, 2**32 - 1)
        _check_int_range("default_timeout_microseconds", self.default_timeout_microseconds, 1, 2**64 - 1)
        if not isinstance(self.allow_timeout_override, bool):
            raise ConfigError(f"`allow_timeout_override` = {self.allow_timeout_override!r} must be true or false "
                              f"(a TOML boolean, not a string).")


@dataclass(frozen=True)
class PriorityLevel:
    name: str
    level: int
    queue: QueuePolicy
    #: Items (batch size) one request at this level may carry. Triton does not enforce it; it is the
    #: callers' side of the starvation guarantee (docs/priorities.md), which `model_client` keeps
    #: (it splits lowest-level work into requests of this size and refuses larger ones above it).
    max_request_batch_size: int = 1

    @property
    def queued_items(self) -> int:
        """Items this level can hold queued at once (max_queue_size x max_request_batch_size): what it
        can take of one batch in the starvation invariant (docs/priorities.md)."""
        return self.queue.max_queue_size * self.max_request_batch_size

    def __post_init__(self) -> None:
        check_name("priorities.<name>", self.name)
        _check_int_range(f"priorities.{self.name}.level", self.level, 1, 16)
        _check_int_range(f"priorities.{self.name}.max_request_batch_size", self.max_request_batch_size, 1, 4096)


@dataclass(frozen=True)
class Batching:
    """Dynamic-batcher settings shared by every model unless a model overrides them."""

    #: 0, no fixed window, as served: an idle instance takes what is queued at once, and batches grow
    #: by themselves behind busy instances (docs/performance.md). It was 10 ms, so a serving.toml
    #: without the key silently put a 10 ms wait on every lone request (a review, 2026-12-07).
    max_queue_delay_microseconds: int = 0
    default_priority: str = "batch"

    def __post_init__(self) -> None:
        _check_int_range("batching.max_queue_delay_microseconds", self.max_queue_delay_microseconds, 0, 1_000_000)


#: `[server] http_gzip_level` = this: Triton answers HTTP uncompressed whatever the request accepts.
GZIP_OFF = "off"
#: `[server] latency_summary_quantiles`: the (quantile, rank error) pairs of Triton's latency
#: summaries (`nv_inference_*_summary_us{quantile}`, a sliding 60-s window), which the P99 alert and
#: the dashboard's percentile panels read (operations.alert_rules, operations.dashboard). Not Triton's
#: own set (0.5, 0.9, 0.95, 0.99, 0.999; the last three at error 0.001): every 500th request folds
#: the summaries' buffers on its thread, at a cost that grows with the window and with tight errors;
#: a served digits model's P99 rose from 0.8 to 1.3-1.7 ms within 60 s of sequential load with
#: Triton's set, to 1.1-1.2 ms with this one (docs/operations.md, "What the latency summaries
#: cost"). () = no summaries.
DEFAULT_LATENCY_SUMMARY_QUANTILES: tuple[tuple[float, float], ...] = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.005), (0.99, 0.001))


def latency_summary_quantiles(value: Any, where: str = "server.latency_summary_quantiles") -> tuple[tuple[float, float], ...]:
    """`value` (a list of [quantile, error] pairs) as a tuple of float pairs, or a ConfigError that
    names the pair and the expected form. An error must be smaller than the quantile's distance to
    0 and to 1 (a wider one lets the estimate stand for another part of the distribution)."""
    expected = "a list of [quantile, error] pairs, e.g. [[0.5, 0.05], [0.99, 0.001]] ([] = no summaries)"
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"`{where}` = {value!r}: expected {expected}.")
    pairs = []
    for pair in value:
        numbers = isinstance(pair, (list, tuple)) and len(pair) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in pair)
        if not numbers:
            raise ConfigError(f"`{where}` has {pair!r}: expected {expected}.")
        quantile, error = float(pair[0]), float(pair[1])
        if not (0 < quantile < 1 and 0 < error < min(quantile, 1 - quantile)):
            raise ConfigError(f"`{where}` has [{pair[0]}, {pair[1]}]: a quantile must lie between 0 and 1 and its error "
                              f"between 0 and the quantile's distance to 0 and to 1.")
        pairs.append((quantile, error))
    if len({q for q, _ in pairs}) != len(pairs):
        raise ConfigError(f"`{where}` names a quantile twice: {[q for q, _ in pairs]}.")
    return tuple(pairs)


#: `[server] rate_limit`: Triton's `--rate-limit` values; the first is the served default.
RATE_LIMIT_MODES = ("execution_count", "off")
DEFAULT_RATE_LIMIT = RATE_LIMIT_MODES[0]

#: `[server] max_input_bytes` when serving.toml does not set it: 1 MiB, 32x what the largest served
#: request needs (the text encoder: 32 x 128 INT64 = 32 KiB; digits 64 x [1,8,8] FP32 = 16 KiB).
#: The request guard's own default (SERVING_REQUEST_GUARD_MAX_INPUT_BYTES unset) is 256 MiB.
DEFAULT_MAX_INPUT_BYTES = 1 << 20
#: The largest `[server] max_input_bytes` accepted (numpy's and Triton's byte sizes are 63-bit).
MAX_INPUT_BYTES_CEILING = 1 << 40


@dataclass(frozen=True)
class ServerEndpoints:
    """Where a tritonserver listens. Loopback unless told otherwise."""

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    #: Partition i listens on the base ports above + i * this stride (unless it names its ports).
    partition_port_stride: int = 10
    #: The supervisor's own Prometheus endpoint (restarts, crash loops: serving.runtime.supervisor_metrics).
    supervisor_metrics_port: int = 8090
    #: Longest a lost wake-up of Triton 2.51's dynamic batcher may hold queued requests, in
    #: microseconds (serving/runtime/native/cond_wait_cap.c; docs/triton-batcher-stall.md). 0 = off (then
    #: up to 500 ms with priority levels or queue policies).
    cond_wait_cap_us: int = 10000
    #: What Triton does with the HTTP responses of clients that send `Accept-Encoding: gzip` (most
    #: HTTP clients do by default): Triton compresses them at zlib's level 6 and has no flag for it, so
    #: serving/runtime/native/gzip_level.c sets it. GZIP_OFF ("off") = answer uncompressed, as any
    #: server may (identity is always acceptable): on a loopback or in-cluster link compression costs
    #: both ends CPU and saves nothing (measured: docs/performance.md, "Compressed responses");
    #: 0-9 = a zlib level (0 = gzip framing without compression, 1 = nginx's default) for clients
    #: behind slow links.
    http_gzip_level: int | str = GZIP_OFF
    #: Triton's `--rate-limit`: "execution_count" schedules each model's instances by the rate-limiter
    #: priorities of its config (contracts.model_config.render_instance_groups: a request that finds
    #: the first instance free goes to it, so at low load one process serves with warm caches);
    #: "off" = Triton's default (instances take turns). No resources are declared, so nothing waits.
    rate_limit: str = DEFAULT_RATE_LIMIT
    #: Triton's latency summaries: DEFAULT_LATENCY_SUMMARY_QUANTILES says why these and what they cost.
    latency_summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_LATENCY_SUMMARY_QUANTILES
    #: The request guard's per-input limit (serving/runtime/native/request_guard.c): an input whose
    #: declared shape needs more bytes is refused (400 / INVALID_ARGUMENT) before Triton allocates them.
    #: Why: Triton 2.51's HTTP frontend allocates a JSON input's shape before it reads the data, so a
    #: 90-byte request with shape [1048576,1,8,8] made it allocate 256 MiB (80 of them, 16 at a time:
    #: 1.97 GB peak). Each model's largest valid request (max_batch_size rows, a variable axis at its
    #: max_sequence_length) must fit: rendering its config checks (contracts.model_config). 0 = no limit.
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES

    #: Binding anywhere but loopback is an explicit choice (here or `serve --allow-non-loopback`);
    #: the launcher logs a warning when it is made. Admin APIs stay locked by the key either way.
    allow_non_loopback: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not re.fullmatch(r"[A-Za-z0-9.:_-]{1,253}", self.host):
            raise ConfigError(f"`server.host` = {self.host!r} is not a host name or IP address.")
        if not isinstance(self.allow_non_loopback, bool):
            raise ConfigError(f"`server.allow_non_loopback` = {self.allow_non_loopback!r} must be true or false.")
        if not is_loopback_host(self.host) and not self.allow_non_loopback:
            raise ConfigError(
                f"`server.host` = {self.host!r} is not a loopback address: servers listen on 127.0.0.1 unless told "
                f"otherwise; set `server.allow_non_loopback = true` (or pass --allow-non-loopback) to bind there."
            )
        for name in ("http_port", "grpc_port", "metrics_port", "supervisor_metrics_port"):
            _check_int_range(f"server.{name}", getattr(self, name), 1, 65535)
        _check_int_range("server.partition_port_stride", self.partition_port_stride, 3, 1000)
        _check_int_range("server.cond_wait_cap_us", self.cond_wait_cap_us, 0, 100_000)
        _check_int_range("server.max_input_bytes", self.max_input_bytes, 0, MAX_INPUT_BYTES_CEILING)
        if 0 < self.max_input_bytes < 1024:
            raise ConfigError(f"`server.max_input_bytes` = {self.max_input_bytes}: allowed 0 (no limit) or 1024 to "
                              f"{MAX_INPUT_BYTES_CEILING} bytes (a limit in bytes per input, not in KiB or MiB).")
        object.__setattr__(self, "latency_summary_quantiles", latency_summary_quantiles(self.latency_summary_quantiles))
        if self.rate_limit not in RATE_LIMIT_MODES:
            raise ConfigError(f"`server.rate_limit` = {self.rate_limit!r}: allowed {list(RATE_LIMIT_MODES)}.")
        if self.http_gzip_level != GZIP_OFF:
            if isinstance(self.http_gzip_level, str):
                raise ConfigError(f"`server.http_gzip_level` = {self.http_gzip_level!r}: allowed {GZIP_OFF!r} or a zlib level 0-9.")
            _check_int_range("server.http_gzip_level", self.http_gzip_level, 0, 9)
        if len({self.http_port, self.grpc_port, self.metrics_port, self.supervisor_metrics_port}) != 4:
            raise ConfigError(
                f"`server` ports must differ: http {self.http_port}, grpc {self.grpc_port}, "
                f"metrics {self.metrics_port}, supervisor_metrics {self.supervisor_metrics_port}."
            )

    http_url = property(lambda self: f"{self.host}:{self.http_port}", doc="`host:port` of the HTTP endpoint")
    grpc_url = property(lambda self: f"{self.host}:{self.grpc_port}", doc="`host:port` of the gRPC endpoint")
    metrics_url = property(lambda self: f"http://{self.host}:{self.metrics_port}/metrics", doc="Triton's Prometheus URL")
    supervisor_metrics_url = property(lambda self: f"http://{self.host}:{self.supervisor_metrics_port}/metrics",
                                      doc="the supervisor's own Prometheus URL")


class CpuPlacement(str, Enum):
    """How partitions share the CPU cores (docs/partitions.md).

    ELASTIC (default): each partition is pinned to its own whole cores and lends them to the busy
    partitions while it is idle (serving.runtime.elastic_cpus). CPU_SETS: pinned, never lent (idle cores
    stay idle). SHARES: every partition may use every core; `compute_share` is its weight when
    partitions compete (cgroup cpu weight, or niceness where cgroups are not writable)."""

    ELASTIC = "elastic"
    CPU_SETS = "cpu_sets"
    SHARES = "shares"


@dataclass(frozen=True)
class Placement:
    """`[placement]`: how partitions are laid out on the host."""

    cpu: CpuPlacement = CpuPlacement.ELASTIC

    def __post_init__(self) -> None:
        if not isinstance(self.cpu, CpuPlacement):
            try:
                object.__setattr__(self, "cpu", CpuPlacement(self.cpu))
            except ValueError:
                allowed = ", ".join(repr(v.value) for v in CpuPlacement)
                raise ConfigError(f"`placement.cpu` = {self.cpu!r} is not a CPU placement: allowed {allowed}.") from None


#: The `onnxruntime_cpu` backend's switches a serving.toml may set per model (`backend_parameters`):
#: name -> (kind, what it does). The backend (serving/backend/triton_backends/onnxruntime_cpu/model.py)
#: documents each; "flag" values are true/false.
TUNABLE_BACKEND_PARAMETERS: Mapping[str, tuple[str, str]] = {
    "adaptive_threads": ("flag", "a 1-thread session beside the wide one, chosen per call (default true)"),
    "pinned_threads": ("flag", "main thread on a home core, wide-session workers on the others (default true)"),
    "reject_non_finite": ("flag", "answer NaN/Inf inputs or answers with INVALID_ARG (default true)"),
    "metrics_flush_interval_s": ("seconds", "how often the batch metrics go to the server (default 1)"),
}


def _backend_parameters(model: str, parameters: Any) -> dict[str, bool | int | float]:
    """`backend_parameters`, each key and value checked (kept as given, so that `dataclasses.replace`,
    which checks them again, accepts them again; `backend_parameter_strings` renders them)."""
    if not isinstance(parameters, Mapping):
        raise ConfigError(f"`models.{model}.backend_parameters` = {parameters!r}: expected a table of name = value.")
    for key, value in parameters.items():
        where = f"`models.{model}.backend_parameters.{key}`"
        if key not in TUNABLE_BACKEND_PARAMETERS:
            raise ConfigError(f"{where} is not a backend parameter this project sets; allowed: {sorted(TUNABLE_BACKEND_PARAMETERS)}.")
        if TUNABLE_BACKEND_PARAMETERS[key][0] == "flag":
            if not isinstance(value, bool):
                raise ConfigError(f"{where} = {value!r}: expected true or false.")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
            raise ConfigError(f"{where} = {value!r}: expected a number of seconds in (0, 3600].")
    return dict(parameters)


def backend_parameter_strings(model: "ModelSpec") -> dict[str, str]:
    """A model's `backend_parameters` as its config's string parameters ("true"/"false", seconds)."""
    return {key: ("true" if value else "false") if isinstance(value, bool) else f"{value:g}"
            for key, value in model.backend_parameters.items()}


@dataclass(frozen=True)
class ModelSpec:
    """One served model: what builds it, which variant is served, how it is batched."""

    name: str
    #: Name of the recipe in `model_build` that produces this model (e.g. "digit_cnn").
    recipe: str
    variant: Variant = Variant.FP32
    #: "gpu": KIND_GPU instances running the served ONNX file with ONNX Runtime's CUDA provider
    #: (requirements/gpu.txt); its partition gets CUDA MPS. "cpu" (default): CPU sets as always.
    device: Device = Device.CPU
    max_batch_size: int = 64
    instance_count: int = 1
    #: ONNX Runtime intra-op threads inside the Python backend; 0 lets ONNX Runtime decide.
    intra_op_threads: int = 0
    max_queue_delay_microseconds: int | None = None
    #: Triton's `preferred_batch_size`: batch sizes the batcher tries to form (with a delay window
    #: it holds requests until one is reached). Empty: none (the default; measured in docs/triton-batcher-stall.md).
    preferred_batch_sizes: tuple[int, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Run-time switches of the `onnxruntime_cpu` backend, written into the model's config
    #: `parameters` (e.g. `{ pinned_threads = false }`); TUNABLE_BACKEND_PARAMETERS lists them. The
    #: rest of the backend's parameters (files, buckets, lengths) are derived by the build.
    backend_parameters: Mapping[str, Any] = field(default_factory=dict)
    #: Which `[partitions.<name>]` serves this model; None: the first partition declared.
    partition: str | None = None
    #: This model's own `max_queue_size` for some priority levels, by level name (e.g. `{ realtime = 6 }`);
    #: the other levels keep `[priorities.<name>]`'s. Why: the starvation invariant (docs/priorities.md)
    #: asks max_batch_size >= the higher levels' queued items + one lowest-level request, which the
    #: shared queue sizes (24 realtime + 8 batch) make 32; a model whose memory allows batches of 16 (a
    #: large image model) keeps its priorities with shorter queues of its own (realtime 8).
    max_queue_size: Mapping[str, int] = field(default_factory=dict)
    #: This model's own `max_request_batch_size` for some levels, by level name (e.g. `{ batch = 2 }`):
    #: the items one request to this model may carry there (`model_client` splits and refuses by it).
    #: Why: one lowest-level request must fit in a batch beside the higher levels' queued items, so the
    #: shared 8 leaves a model whose memory allows batches of 8 or fewer no bound at all, whatever its
    #: queues; smaller batch requests of its own give it one.
    max_request_batch_size: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name("models.<name>", self.name)
        check_name(f"models.{self.name}.recipe", self.recipe)
        for table, upper, example in (("max_queue_size", 2**32 - 1, "queue size, e.g. { realtime = 6 }"),
                                      ("max_request_batch_size", 4096, "items per request, e.g. { batch = 2 }")):
            sizes = getattr(self, table)
            if not isinstance(sizes, Mapping):
                raise ConfigError(f"`models.{self.name}.{table}` = {sizes!r}: expected a table of "
                                  f"priority level name = {example}.")
            for level, size in dict(sizes).items():
                _check_int_range(f"models.{self.name}.{table}.{level}", size, 1, upper)
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"`models.{self.name}.options` = {self.options!r}: allowed a table of option = value.")
        for key, value in dict(self.options).items():
            if str(key).endswith(PATH_OPTION_SUFFIXES):
                check_relative_path(f"models.{self.name}.options.{key}", value)
        object.__setattr__(self, "backend_parameters", _backend_parameters(self.name, self.backend_parameters))
        if self.partition is not None:
            check_name(f"models.{self.name}.partition", self.partition)
        if not isinstance(self.variant, Variant):
            try:
                object.__setattr__(self, "variant", Variant(self.variant))
            except ValueError:
                allowed = ", ".join(v.value for v in Variant)
                raise ConfigError(
                    f"`models.{self.name}.variant` = {self.variant!r} is not a known variant: allowed {allowed}."
                ) from None
        if not isinstance(self.device, Device):
            try:
                object.__setattr__(self, "device", Device(self.device))
            except ValueError:
                raise ConfigError(f"`models.{self.name}.device` = {self.device!r}: allowed 'cpu' or 'gpu'.") from None
        _check_int_range(f"models.{self.name}.max_batch_size", self.max_batch_size, 1, 4096)
        _check_int_range(f"models.{self.name}.instance_count", self.instance_count, 1, 64)
        _check_int_range(f"models.{self.name}.intra_op_threads", self.intra_op_threads, 0, 256)
        if self.max_queue_delay_microseconds is not None:
            _check_int_range(
                f"models.{self.name}.max_queue_delay_microseconds", self.max_queue_delay_microseconds, 0, 1_000_000
            )
        if not isinstance(self.preferred_batch_sizes, (list, tuple)):
            raise ConfigError(f"`models.{self.name}.preferred_batch_sizes` = {self.preferred_batch_sizes!r}: expected a list of integers.")
        object.__setattr__(self, "preferred_batch_sizes", tuple(self.preferred_batch_sizes))
        for size in self.preferred_batch_sizes:
            _check_int_range(f"models.{self.name}.preferred_batch_sizes[]", size, 1, self.max_batch_size)


def _queues_that_fit(room: int, higher: Sequence[PriorityLevel], higher_items: int) -> dict[str, int] | None:
    """Queue sizes for the higher levels whose items fit in `room`: `higher_items` scaled down alike
    (each queue at least 1, none longer than today), or None if not even one request of each fits."""
    if room < sum(p.max_request_batch_size for p in higher) or higher_items <= 0:
        return None
    sizes = {p.name: max(1, min(p.queue.max_queue_size, p.queue.max_queue_size * room // higher_items)) for p in higher}
    size_of = {p.name: p.max_request_batch_size for p in higher}
    while sum(sizes[name] * size_of[name] for name in sizes) > room:  # raising a queue to 1 overshot: shorten the longest
        name = max((n for n in sizes if sizes[n] > 1), key=lambda n: sizes[n] * size_of[n])
        sizes[name] -= 1
    return sizes


def _inline_table(sizes: Mapping[str, int]) -> str:
    """The inside of a TOML inline table of sizes by level name (`realtime = 4, batch = 2`)."""
    return ", ".join(f"{name} = {size}" for name, size in sizes.items())


def _sizes_that_fit(model: ModelSpec, higher: Sequence[PriorityLevel], lowest: PriorityLevel, higher_items: int) -> str:
    """Advice for the invariant's error: this model's own `[models.<name>]` sizes that satisfy it at
    its max_batch_size. Shorter queues of its own where a lowest-level request of today's size still
    fits beside one request of each higher level; else also smaller lowest-level requests (half the
    batch at most, the rest for the higher levels' queues); '' when not even that fits."""
    def table(sizes: Mapping[str, int]) -> str:  # with the model's own sizes for the levels not changed (pasted whole)
        kept = {p.name: sizes.get(p.name, model.max_queue_size.get(p.name)) for p in (*higher, lowest)}
        return _inline_table({name: size for name, size in kept.items() if size is not None})

    queues = _queues_that_fit(model.max_batch_size - lowest.max_request_batch_size, higher, higher_items)
    if queues is not None:
        return f", or give this model shorter queues of its own: `[models.{model.name}] max_queue_size = {{ {table(queues)} }}`"
    one_each = sum(p.max_request_batch_size for p in higher)
    request = min(lowest.max_request_batch_size - 1, max(1, model.max_batch_size // 2), model.max_batch_size - one_each)
    queues = _queues_that_fit(model.max_batch_size - request, higher, higher_items) if request >= 1 else None
    if queues is None:
        return ""
    requests = _inline_table({**dict(model.max_request_batch_size), lowest.name: request})
    split = f"(model_client splits {lowest.name} work for it into requests of {request})"
    if queues == {p.name: p.queue.max_queue_size for p in higher}:  # today's queues fit beside the smaller requests
        return (f", or give this model smaller {lowest.name} requests of its own: `[models.{model.name}] "
                f"max_request_batch_size = {{ {requests} }}` {split}")
    return (f", or give this model shorter queues and smaller {lowest.name} requests of its own: `[models.{model.name}] "
            f"max_queue_size = {{ {table(queues)} }}` and `max_request_batch_size = {{ {requests} }}` {split}")


#: Memory budget of the implicit `default` partition when serving.toml declares none.
DEFAULT_PARTITION_MEMORY_MB = 4096


@dataclass(frozen=True)
class PartitionSpec:
    """One tritonserver process with a share of the machine (see docs/partitions.md).

    `compute_share` is a percentage: of the CPU cores (a pinned CPU set) on CPU, of the GPU's
    SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) under MPS. `memory_mb` caps the partition's model
    memory: pinned device memory under MPS, and the budget of the max_batch_size rule everywhere.
    Ports left unset are derived from `[server]`'s base ports (see `contracts.partition_plan`).
    """

    name: str
    compute_share: int
    memory_mb: int
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    #: Replicas on Kubernetes (`[partitions.<name>.autoscaling]`); None: the defaults.
    autoscaling: Autoscaling | None = None

    def __post_init__(self) -> None:
        check_name("partitions.<name>", self.name)
        if self.autoscaling is None:
            object.__setattr__(self, "autoscaling", Autoscaling(partition=self.name))
        _check_int_range(f"partitions.{self.name}.compute_share", self.compute_share, 1, 100)
        _check_int_range(f"partitions.{self.name}.memory_mb", self.memory_mb, 16, 1 << 24)
        for port in ("http_port", "grpc_port", "metrics_port"):
            if getattr(self, port) is not None:
                _check_int_range(f"partitions.{self.name}.{port}", getattr(self, port), 1, 65535)


@dataclass(frozen=True)
class ServingSpec:
    models: tuple[ModelSpec, ...]
    priorities: tuple[PriorityLevel, ...]
    batching: Batching = Batching()
    server: ServerEndpoints = ServerEndpoints()
    #: Declared partitions; empty means one implicit `default` partition with every model.
    partitions: tuple[PartitionSpec, ...] = ()
    placement: Placement = Placement()
    #: The cluster `k8s_deploy` renders manifests for (`[kubernetes]`); `make serve` ignores it.
    kubernetes: KubernetesSettings = KubernetesSettings()

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("`models` is empty: at least one [models.<name>] table is required.")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigError(f"`models` names must be unique, got {names}.")
        self._check_partitions()
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
        names = {p.name for p in self.priorities}
        for model in self.models:
            for table in ("max_queue_size", "max_request_batch_size"):
                unknown = sorted(set(getattr(model, table)) - names)
                if unknown:
                    raise ConfigError(
                        f"`models.{model.name}.{table}` names {unknown}, not among the priority levels: allowed "
                        f"{sorted(names) if names else 'none (serving.toml declares no [priorities.<name>])'}.")
            self.check_lowest_priority_progress(model)

    def check_autoscaling_targets(self) -> None:
        """For a cluster deployment (deploy/, `make k8s-validate`): a queue-time target at or below
        the batching window would scale out an idle-ish partition, since a lightly loaded server
        already holds each request up to `max_queue_delay_microseconds`. Not checked when the spec
        is loaded: a local run (a test holding a window open) never autoscales."""
        for part in self.effective_partitions:
            windows = {m.name: m.max_queue_delay_microseconds if m.max_queue_delay_microseconds is not None
                       else self.batching.max_queue_delay_microseconds for m in self.models_in_partition(part.name)}
            widest = max(windows.values(), default=0)
            if part.autoscaling.target_queue_us <= widest:
                raise ConfigError(
                    f"`partitions.{part.name}.autoscaling.target_queue_us` = {part.autoscaling.target_queue_us} is not "
                    f"above the batching window of its models ({widest} us, {windows}): a lightly loaded server already "
                    f"queues each request up to that window, so the autoscaler would never scale in; allowed > {widest}."
                )

    def check_lowest_priority_progress(self, model: ModelSpec) -> None:
        """The starvation invariant (docs/priorities.md), for `model` as configured or as served.

        With queue policies Triton forms each batch when an instance is idle, from the queue in
        priority order. The levels above the lowest can then hold at most
        sum(max_queue_size * max_request_batch_size) items, so if that plus one lowest-level
        request fits in `max_batch_size`, every batch formed under any higher-priority load still
        takes at least one lowest-level request: the lowest level keeps making progress.
        """
        priorities = self.priorities_for(model)
        if len(priorities) < 2:
            return
        *higher, lowest = sorted(priorities, key=lambda p: p.level)
        higher_items = sum(p.queued_items for p in higher)
        needed = higher_items + lowest.max_request_batch_size
        if needed > model.max_batch_size:
            def own(level: PriorityLevel) -> str:  # a size the model sets itself is named where it is set
                tables = [t for t in ("max_queue_size", "max_request_batch_size") if level.name in getattr(model, t)]
                return "".join(f", models.{model.name}.{t}" for t in tables)

            terms = " + ".join(f"{p.queue.max_queue_size} x {p.max_request_batch_size} ({p.name}{own(p)})" for p in higher)
            raise ConfigError(
                f"`models.{model.name}.max_batch_size` = {model.max_batch_size} cannot guarantee progress for "
                f"`priorities.{lowest.name}`: the higher levels may queue {terms} = {higher_items} items "
                f"(max_queue_size x max_request_batch_size) and a {lowest.name} request carries up to "
                f"{lowest.max_request_batch_size}{f' (models.{model.name}.max_request_batch_size)' if lowest.name in model.max_request_batch_size else ''}; "
                f"allowed: {higher_items} + {lowest.max_request_batch_size} = "
                f"{needed} <= max_batch_size. Lower those queue or request sizes, or raise max_batch_size"
                f"{_sizes_that_fit(model, higher, lowest, higher_items)} (see docs/priorities.md)."
            )

    def priorities_for(self, model: ModelSpec) -> tuple[PriorityLevel, ...]:
        """The priority levels as `model` is served: `[priorities.<name>]` with the model's own
        `max_queue_size` and `max_request_batch_size` where it sets them (names, levels and timeouts
        are shared; `model_client` reads each model's request sizes from here)."""
        def served(p: PriorityLevel) -> PriorityLevel:
            queue = replace(p.queue, max_queue_size=model.max_queue_size[p.name]) if p.name in model.max_queue_size else p.queue
            return replace(p, queue=queue, max_request_batch_size=model.max_request_batch_size.get(p.name, p.max_request_batch_size))

        return tuple(served(p) for p in self.priorities)

    def _check_partitions(self) -> None:
        names = [p.name for p in self.partitions]
        if len(set(names)) != len(names):
            raise ConfigError(f"`partitions` names must be unique, got {names}.")
        total = sum(p.compute_share for p in self.partitions)
        if total > 100:
            shares = {p.name: p.compute_share for p in self.partitions}
            raise ConfigError(
                f"`partitions.*.compute_share` = {shares} sums to {total}%: allowed at most 100% in total."
            )
        declared = set(names)
        for model in self.models:
            if model.partition is not None and self.partitions and model.partition not in declared:
                raise ConfigError(
                    f"`models.{model.name}.partition` = {model.partition!r} is not a declared partition: "
                    f"allowed {sorted(declared)}."
                )
            if model.partition not in (None, "default") and not self.partitions:
                raise ConfigError(
                    f"`models.{model.name}.partition` = {model.partition!r} but serving.toml declares no "
                    f"[partitions.<name>] tables: allowed only 'default' (or declare the partition)."
                )
        empty = [p.name for p in self.partitions if not self.models_in_partition(p.name)]
        if empty:
            raise ConfigError(f"partitions {empty} serve no model: every [partitions.<name>] needs a model naming it.")

    @property
    def effective_partitions(self) -> tuple[PartitionSpec, ...]:
        """The declared partitions, or the implicit `default` one (all cores, every model)."""
        if self.partitions:
            return self.partitions
        return (PartitionSpec(name="default", compute_share=100, memory_mb=DEFAULT_PARTITION_MEMORY_MB),)

    def partition_of(self, model: ModelSpec) -> str:
        return model.partition or self.effective_partitions[0].name

    def models_in_partition(self, partition: str) -> tuple[ModelSpec, ...]:
        return tuple(m for m in self.models if self.partition_of(m) == partition)

    def gpu_partitions(self) -> tuple[str, ...]:
        """Partitions that hold a GPU model: only these get CUDA MPS on a GPU host."""
        return tuple(p.name for p in self.effective_partitions
                     if any(m.device is Device.GPU for m in self.models_in_partition(p.name)))

    def model(self, name: str) -> ModelSpec:
        return find_named(self.models, name, "model")

    def served_variant(self, name: str) -> Variant:
        """The precision model `name` serves: its own `variant`, or, for a model that follows an
        encoder (`options.encoder`: the fused embedder, the tokenizer), that encoder's; its own
        `variant` field is then unused. Why one place: the perf report called the fused embedder
        "fp32" while it served the INT8-mixed encoder's graph (a review, 2026-12-07)."""
        model, seen = self.model(name), {name}
        while model.options.get("encoder") and model.options["encoder"] not in seen:  # a loop is the build's error to name
            seen.add(model.options["encoder"])
            model = self.model(model.options["encoder"])
        return model.variant

    def priority(self, name: str) -> PriorityLevel:
        return find_named(self.priorities, name, "priority")

    @property
    def default_priority_level(self) -> int:
        return self.priority(self.batching.default_priority).level if self.priorities else 0


#: The keys a [models.<name>] table may hold: ModelSpec's fields (one source of truth), less its name.
_MODEL_KEYS = {f.name for f in dataclasses.fields(ModelSpec)} - {"name"}
_PARTITION_KEYS = {"compute_share", "memory_mb", "http_port", "grpc_port", "metrics_port", "autoscaling"}


#: The keys a [models.<name>] table must hold: ModelSpec's fields without a default.
_MODEL_REQUIRED = {f.name for f in dataclasses.fields(ModelSpec)
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - {"name"}
_PRIORITY_KEYS = {"level", "max_queue_size", "default_timeout_microseconds", "allow_timeout_override", "max_request_batch_size"}


def _table(table_name: str, value: Any, form: str = "key = value lines") -> Mapping[str, Any]:
    """`value` if it is a TOML table, else a ConfigError naming the key, what it holds and the form expected
    (a string or a list where a table belongs otherwise fails later with a Python error, or worse: a
    string's letters read as its keys)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"`{table_name}` = {value!r} is a {type(value).__name__}: allowed a table "
                          f"([{table_name}] followed by {form}).")
    return value


def _only_keys(table_name: str, table: Mapping[str, Any], allowed: set[str], required: set[str] = frozenset()) -> None:
    unknown = set(_table(table_name, table)) - allowed
    if unknown:
        raise ConfigError(f"`{table_name}` has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}.")
    missing = required - set(table)
    if missing:
        raise ConfigError(f"`{table_name}` is missing {sorted(missing)}; required: {sorted(required)}.")


def _tables(section: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The named tables of a section ([models.<name>], [partitions.<name>], ...), each checked to be a table."""
    tables = _table(section, data.get(section, {}), f"one [{section}.<name>] table per entry")
    for name, table in tables.items():
        _table(f"{section}.{name}", table)
    return tables


def serving_spec_from_dict(data: Mapping[str, Any]) -> ServingSpec:
    """Build a validated `ServingSpec` from the parsed TOML document."""
    _only_keys("<top level>", data, {"models", "priorities", "batching", "server", "partitions", "placement", "kubernetes"})
    models = []
    for name, table in _tables("models", data).items():
        _only_keys(f"models.{name}", table, _MODEL_KEYS, _MODEL_REQUIRED)
        models.append(ModelSpec(name=name, **table))
    priorities = []
    for name, table in _tables("priorities", data).items():
        _only_keys(f"priorities.{name}", table, _PRIORITY_KEYS, {"level", "max_queue_size", "default_timeout_microseconds"})
        level = table.get("level")
        try:
            queue = QueuePolicy(**{k: v for k, v in table.items() if k not in ("level", "max_request_batch_size")})
        except ConfigError as exc:
            raise ConfigError(f"`priorities.{name}`: {exc}") from None
        priorities.append(PriorityLevel(name=name, level=level, queue=queue, max_request_batch_size=table.get("max_request_batch_size", 1)))
    batching_table = data.get("batching", {})
    _only_keys("batching", batching_table, {"max_queue_delay_microseconds", "default_priority"})
    server_table = data.get("server", {})
    _only_keys("server", server_table, {"host", "http_port", "grpc_port", "metrics_port", "partition_port_stride",
                                        "allow_non_loopback", "supervisor_metrics_port", "cond_wait_cap_us",
                                        "http_gzip_level", "rate_limit", "latency_summary_quantiles", "max_input_bytes"})
    partitions = []
    for name, table in _tables("partitions", data).items():
        _only_keys(f"partitions.{name}", table, _PARTITION_KEYS)
        missing = {"compute_share", "memory_mb"} - set(table)
        if missing:
            raise ConfigError(f"`partitions.{name}` is missing {sorted(missing)}: each partition needs a compute share (%) and a memory cap (MB).")
        if "autoscaling" in table:
            table = {**table, "autoscaling": autoscaling_from_table(name, table["autoscaling"])}
        partitions.append(PartitionSpec(name=name, **table))
    try:
        return ServingSpec(
            models=tuple(models),
            priorities=tuple(sorted(priorities, key=lambda p: p.level)),
            batching=Batching(**batching_table),
            server=ServerEndpoints(**server_table),
            partitions=tuple(partitions),
            kubernetes=kubernetes_from_table(data.get("kubernetes", {})),
            placement=Placement(**_placement_table(data)),
        )
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"incomplete serving configuration: {exc}") from None


def _placement_table(data: Mapping[str, Any]) -> dict[str, Any]:
    table = data.get("placement", {})
    _only_keys("placement", table, {"cpu"})
    return dict(table)


def read_serving_config(path: str | Path) -> str:
    """The text of a serving.toml (ConfigError when there is none): read once by a caller that also
    digests it (contracts.rendered_configs.load_serving_spec_and_digest)."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(f"serving configuration {path} does not exist.") from None


def serving_spec_from_text(text: str, path: str | Path, allow_non_loopback: bool = False) -> ServingSpec:
    """The validated spec of serving.toml text read from `path` (named in the errors); see
    `load_serving_spec` for `allow_non_loopback`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"serving configuration {path} is not valid TOML: {exc}") from None
    if allow_non_loopback and isinstance(data.get("server", {}), Mapping):
        data = {**data, "server": {**data.get("server", {}), "allow_non_loopback": True}}
    return serving_spec_from_dict(data)


def load_serving_spec(path: str | Path, allow_non_loopback: bool = False) -> ServingSpec:
    """The validated spec of a serving.toml. `allow_non_loopback`: the command line's
    `--allow-non-loopback`, applied before `[server] host` is checked (the refusal of a
    non-loopback host names that flag as the way to bind there)."""
    path = Path(path)
    return serving_spec_from_text(read_serving_config(path), path, allow_non_loopback)
