"""Render Triton `config.pbtxt` files from the serving configuration and the ONNX model itself.

Input and output names, data types and shapes are read from the ONNX graph (the one source of
truth for a model's interface); batching, priorities and queue policies come from `ServingSpec`.
Configs are built as Triton's own schema, `tritonclient.grpc.model_config_pb2.ModelConfig`
messages (the proto Triton itself parses), and written with protobuf's `text_format`: no string
assembly, so a name with a quote is escaped and a misspelt field fails here, not in tritonserver.
Rendering is pure (messages out); only `write_model_config` touches the disk.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from contracts.errors import ConfigError, find_named
from contracts.sequence_buckets import (MAX_INPUT_DIMS_PARAMETER, MAX_LENGTH_PARAMETER, mask_input_names,
                                       parse_max_input_dims)
from contracts.serving_spec import Device, ModelSpec, ServingSpec, backend_parameter_strings

#: ONNX TensorProto element type name -> Triton data type.
ONNX_TO_TRITON_DTYPE = {
    "FLOAT": "TYPE_FP32",
    "FLOAT16": "TYPE_FP16",
    "DOUBLE": "TYPE_FP64",
    "INT64": "TYPE_INT64",
    "INT32": "TYPE_INT32",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "BOOL": "TYPE_BOOL",
    "STRING": "TYPE_STRING",
}

#: Triton data type -> numpy dtype name (for clients and warmup data).
TRITON_TO_NUMPY_DTYPE = {
    "TYPE_FP32": "float32",
    "TYPE_FP16": "float16",
    "TYPE_FP64": "float64",
    "TYPE_INT64": "int64",
    "TYPE_INT32": "int32",
    "TYPE_INT8": "int8",
    "TYPE_UINT8": "uint8",
    "TYPE_UINT32": "uint32",
    "TYPE_BOOL": "bool",
    "TYPE_STRING": "object",
}


INTEGER_TYPES = frozenset({"TYPE_INT64", "TYPE_INT32", "TYPE_INT8", "TYPE_UINT8", "TYPE_BOOL"})


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output as Triton sees it: dims exclude the batch axis; -1 is variable."""

    name: str
    data_type: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.data_type not in TRITON_TO_NUMPY_DTYPE:
            raise ConfigError(f"tensor `{self.name}` has data type {self.data_type!r}; allowed {sorted(TRITON_TO_NUMPY_DTYPE)}.")

    @property
    def numpy_dtype(self) -> str:
        """The numpy dtype of this tensor's arrays (data_type is checked against the table on creation)."""
        return TRITON_TO_NUMPY_DTYPE[self.data_type]


def tensor_specs_from_onnx(onnx_path: str | Path) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Read (inputs, outputs) from an ONNX file; the first axis of every tensor must be the batch."""
    import onnx  # lazy: rendering configs from known specs needs no onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    initializer_names = {init.name for init in model.graph.initializer}

    def convert(value_info) -> TensorSpec:
        tensor_type = value_info.type.tensor_type
        dtype_name = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        if dtype_name not in ONNX_TO_TRITON_DTYPE:
            raise ConfigError(f"{onnx_path}: tensor `{value_info.name}` has unsupported type {dtype_name}.")
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
        if not dims or dims[0] not in (-1, 0):
            raise ConfigError(
                f"{onnx_path}: tensor `{value_info.name}` has shape {dims}; expected a dynamic first (batch) axis."
            )
        return TensorSpec(value_info.name, ONNX_TO_TRITON_DTYPE[dtype_name], tuple(dims[1:]))

    inputs = tuple(convert(v) for v in model.graph.input if v.name not in initializer_names)
    outputs = tuple(convert(v) for v in model.graph.output)
    return inputs, outputs


ModelConfig = pb.ModelConfig


def tensor_specs_from_config(config: pb.ModelConfig) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(inputs, outputs) of a rendered config: what its clients send and get, which for a model that
    tokenizes in its backend (text_embedder: TEXT in) is not its ONNX graph's inputs."""
    def spec(tensor) -> TensorSpec:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims  # what the backend sees
        return TensorSpec(tensor.name, pb.DataType.Name(tensor.data_type), tuple(int(d) for d in dims))

    return tuple(spec(t) for t in config.input), tuple(spec(t) for t in config.output)


def data_type(name: str) -> int:
    """Triton's DataType enum value of a `TYPE_*` name."""
    return pb.DataType.Value(name)


def declared_dims(t: TensorSpec) -> list[int]:
    """The config's dims of a tensor: its own, or [1] for a tensor of the batch axis only (shape
    [batch]), which Triton 2.51 refuses to declare without dims; `reshape { shape: [] }` beside them
    (`batch_only_reshape`) hands the backend [batch] and clients [batch, 1]."""
    return list(t.dims) or [1]


def batch_only_reshape(t: TensorSpec) -> pb.ModelTensorReshape | None:
    return pb.ModelTensorReshape(shape=[]) if not t.dims else None


def model_input(t: TensorSpec, ragged: bool = False, optional: bool = False) -> pb.ModelInput:
    return pb.ModelInput(name=t.name, data_type=data_type(t.data_type), dims=declared_dims(t),
                         allow_ragged_batch=ragged and any(d < 0 for d in t.dims), optional=optional,
                         reshape=batch_only_reshape(t))


def model_output(t: TensorSpec) -> pb.ModelOutput:
    return pb.ModelOutput(name=t.name, data_type=data_type(t.data_type), dims=declared_dims(t),
                          reshape=batch_only_reshape(t))


def _queue_policy(policy) -> pb.ModelQueuePolicy:
    return pb.ModelQueuePolicy(timeout_action=pb.ModelQueuePolicy.REJECT,
                               default_timeout_microseconds=policy.default_timeout_microseconds,
                               allow_timeout_override=policy.allow_timeout_override, max_queue_size=policy.max_queue_size)


def render_dynamic_batching(model: ModelSpec, serving: ServingSpec) -> pb.ModelDynamicBatching:
    """The dynamic batcher with the priority levels and per-level queue policies of serving.toml."""
    delay = model.max_queue_delay_microseconds
    if delay is None:
        delay = serving.batching.max_queue_delay_microseconds
    batching = pb.ModelDynamicBatching(max_queue_delay_microseconds=delay,
                                       # sizes above a measured (lowered) max_batch_size are dropped: Triton refuses them
                                       preferred_batch_size=[b for b in model.preferred_batch_sizes if b <= model.max_batch_size])
    priorities = serving.priorities_for(model)  # the model's own queue sizes where it sets them
    if priorities:
        batching.priority_levels = len(priorities)
        batching.default_priority_level = serving.default_priority_level
        batching.default_queue_policy.CopyFrom(_queue_policy(find_named(priorities, serving.batching.default_priority,
                                                                         "priority").queue))
        for level in priorities:
            batching.priority_queue_policy[level.level].CopyFrom(_queue_policy(level.queue))
    return batching


#: Warmup data files (in `<model>/warmup/`, where Triton looks for `input_data_file`) holding ones:
#: `ones_<TYPE>_<count>`. `write_model_config` writes every such file a config names.
ONES_PREFIX = "ones_"


#: How long a warm-up sample's variable (token) axis is, unless the model's maximum is shorter.
WARMUP_SEQUENCE_LENGTH = 16


def configured_max_sequence_length(parameters: Mapping[str, str]) -> int | None:
    """The config's `max_sequence_length` parameter (the longest variable axis a request may send), or None."""
    text = str(parameters.get(MAX_LENGTH_PARAMETER, "")).strip()
    return int(text) if text.isdigit() else None


def warmup_sequence_length(max_sequence_length: int | None) -> int:
    """A warm-up sample's token axis: WARMUP_SEQUENCE_LENGTH, or the model's `max_sequence_length` where
    that is shorter (a longer sample would be refused by the backend, and the load with it)."""
    return min(WARMUP_SEQUENCE_LENGTH, max_sequence_length) if max_sequence_length else WARMUP_SEQUENCE_LENGTH


def render_warmup(inputs: Sequence[TensorSpec], batch_sizes: Sequence[int], variable_dim: int = WARMUP_SEQUENCE_LENGTH,
                  ones_inputs: Collection[str] = (), sample_dims: Mapping[str, Sequence[int]] | None = None
                  ) -> list[pb.ModelWarmup]:
    """`model_warmup` entries, so the first real request is not the slow one: zero data, except
    ones for 0/1 masks (`ones_inputs`). Why: warmup samples must be VALID requests; an all-zero
    mask is refused by the backend's input contract, and Triton 2.51 crashes (SIGSEGV) when a
    warmup sample is answered with an error (docs/operations.md). An input with `sample_dims`
    (its max_input_dims) is warmed up at them, the largest request it takes."""
    samples = []
    for batch in batch_sizes:
        sample = pb.ModelWarmup(name=f"warmup_batch_{batch}", batch_size=batch)
        for t in inputs:
            dims = _warmup_dims(t, variable_dim, sample_dims or {})
            entry = sample.inputs[t.name]
            entry.data_type = data_type(t.data_type)
            entry.dims.extend(dims)
            if t.name in ones_inputs:
                entry.input_data_file = f"{ONES_PREFIX}{t.data_type}_{int(np.prod(dims))}"
            elif t.data_type == "TYPE_STRING":
                entry.random_data = True
            else:
                entry.zero_data = True
        samples.append(sample)
    return samples


def _sample_dims(dims: Sequence[int], variable_dim: int) -> list[int]:
    """A warm-up sample's `dims`, a variable axis `variable_dim` long."""
    return [variable_dim if d < 0 else d for d in dims]


def row_dims(tensor: TensorSpec, variable_dim: int, sample_dims: Mapping[str, Sequence[int]] | None = None) -> list[int]:
    """One sample row's dims as the backend receives it (after any reshape): the input's `sample_dims`
    (its max_input_dims) where given, else its own with each variable axis `variable_dim` long."""
    if sample_dims and tensor.name in sample_dims:
        return [int(d) for d in sample_dims[tensor.name]]
    return _sample_dims(tensor.dims, variable_dim)


def _warmup_dims(tensor: TensorSpec, variable_dim: int, sample_dims: Mapping[str, Sequence[int]]) -> list[int]:
    """A warm-up sample's dims as the config declares them (declared_dims; an input with variable axes
    has no reshape, so its sample dims are declared as they are received)."""
    if tensor.name in sample_dims:
        return row_dims(tensor, variable_dim, sample_dims)
    return _sample_dims(declared_dims(tensor), variable_dim)


def warmup_ones_inputs(inputs: Sequence[TensorSpec], parameters: Mapping[str, str]) -> list[str]:
    """The inputs a warm-up sample fills with ones: the integer 0/1 masks (contracts.sequence_buckets.
    mask_input_names, what the backend's contract checks); every other input gets zeros."""
    masks = mask_input_names([t.name for t in inputs], parameters)
    return [t.name for t in inputs if t.data_type in INTEGER_TYPES and t.name in masks]


def warmup_feeds(inputs: Sequence[TensorSpec], batch: int, ones_inputs: Collection[str],
                 variable_dim: int = WARMUP_SEQUENCE_LENGTH, sample_dims: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """What `render_warmup`'s sample of `batch` rows sends, as arrays (TYPE_STRING inputs, sent as
    random data, are left out): for a build to run in process before Triton does at load, since a
    warm-up answered with an error fails the load (and can crash Triton 2.51)."""
    return {t.name: (np.ones if t.name in ones_inputs else np.zeros)([batch, *row_dims(t, variable_dim, sample_dims)],
                                                                     dtype=t.numpy_dtype)
            for t in inputs if t.data_type != "TYPE_STRING"}  # as the backend receives them: after any reshape


def set_parameters(config: pb.ModelConfig, parameters: Mapping[str, str]) -> None:
    """String parameters (what a Python-based backend reads from `model_config["parameters"]`)."""
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)


def render_onnx_cpu_config(
    model: ModelSpec,
    serving: ServingSpec,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    onnx_file: str = "model.onnx",
    extra_parameters: Mapping[str, str] | None = None,
    ragged_inputs: bool = False,
) -> pb.ModelConfig:
    """Config for a model run by the `onnxruntime_cpu` Python-based backend (see triton_backends/).

    `ragged_inputs`: `allow_ragged_batch: true` on every input with a variable axis (token ids).
    Why: Triton's dynamic batcher only merges requests whose variable-sized inputs have EQUAL
    shapes unless the input allows ragged batches, so texts of different lengths would each run
    alone. The `onnxruntime_cpu` backend receives requests separately and pads (or buckets) them
    itself, so ragged batches are safe for it.
    """
    parameters = {"onnx_file": onnx_file, "intra_op_num_threads": str(model.intra_op_threads)}
    parameters.update(backend_parameter_strings(model))
    parameters.update(extra_parameters or {})
    return _render_batched_model("onnxruntime_cpu", model, serving, inputs, outputs, parameters, ragged_inputs)


def instance_kind(model: ModelSpec) -> int:
    """KIND_GPU for `device = "gpu"` (the backend then runs ONNX Runtime's CUDA provider), else KIND_CPU."""
    return pb.ModelInstanceGroup.KIND_GPU if model.device is Device.GPU else pb.ModelInstanceGroup.KIND_CPU


#: Rate-limiter priorities of a model's instances (Triton schedules among the instances free at that
#: moment the one with the fewest executions x priority, with `--rate-limit=execution_count`,
#: `[server] rate_limit`): the first instance 1, every other one this. So a request that finds the
#: first instance free goes to it, and the others take work while it is busy.
#: Why: at low load Triton 2.51 hands consecutive requests to the instances in turn, and each
#: instance is a separate process with its own copy of the weights, so every call found its caches
#: cold after the other instance had run (a lone text's ONNX Runtime call took ~17% longer: docs/performance.md,
#: "The first instance first").
OTHER_INSTANCE_PRIORITY = 1000


def render_instance_groups(model: ModelSpec) -> list[pb.ModelInstanceGroup]:
    """The model's instances, one group per instance (a priority is set per group), the first with
    rate-limiter priority 1 and the others OTHER_INSTANCE_PRIORITY; one instance: one plain group.
    Triton names them `<model>_<group>_0` (serving.backend.instance_activity.instance_index)."""
    kind = instance_kind(model)
    if model.instance_count == 1:
        return [pb.ModelInstanceGroup(count=1, kind=kind)]
    return [pb.ModelInstanceGroup(count=1, kind=kind, rate_limiter=pb.ModelRateLimiter(
        priority=1 if i == 0 else OTHER_INSTANCE_PRIORITY)) for i in range(model.instance_count)]


def _render_batched_model(backend: str, model: ModelSpec, serving: ServingSpec, inputs: Sequence[TensorSpec],
                          outputs: Sequence[TensorSpec], parameters: Mapping[str, str], ragged_inputs: bool = False) -> pb.ModelConfig:
    """What every batched model's config holds: the dynamic batcher with the priority levels and
    queue policies, the instances, the backend's parameters and warmup at batch 1 and the max."""
    masks = warmup_ones_inputs(inputs, parameters)
    sample_dims = parse_max_input_dims(parameters.get(MAX_INPUT_DIMS_PARAMETER, ""))
    config = pb.ModelConfig(
        name=model.name, backend=backend, max_batch_size=model.max_batch_size,
        input=[model_input(t, ragged=ragged_inputs) for t in inputs], output=[model_output(t) for t in outputs],
        dynamic_batching=render_dynamic_batching(model, serving),
        instance_group=render_instance_groups(model),
        model_warmup=render_warmup(inputs, sorted({1, model.max_batch_size}),
                                   warmup_sequence_length(configured_max_sequence_length(parameters)),
                                   ones_inputs=masks, sample_dims=sample_dims),
    )
    set_parameters(config, parameters)
    check_request_inputs_fit(config, serving.server.max_input_bytes)
    return config


@dataclass(frozen=True)
class RequestInputBound:
    """The most bytes one input of a valid request can declare: `rows` batch rows (max_batch_size; 0
    for a model without batching, whose requests have `dims` alone) of `dims`: the input's
    max_input_dims where the config gives them, else a variable axis at the config's
    max_sequence_length; `bytes` None when a variable axis has no such bound. Bytes as the
    request guard counts them (request_guard.c `element_size`): a BYTES element as 8, the pointer
    its backend stub holds."""

    model: str
    input: str
    data_type: str
    rows: int
    dims: tuple[int, ...]
    bytes: int | None

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, *self.dims) if self.rows else self.dims

    @property
    def described(self) -> str:
        shape = ",".join(str(d) for d in self.shape)
        return f"model '{self.model}' input '{self.input}': [{shape}] of {self.data_type.removeprefix('TYPE_')}"


def element_bytes(data_type: str) -> int:
    """Bytes per element of a Triton `TYPE_*`, as the request guard counts them (8 for a type this
    project does not serve: the guard's own fallback)."""
    dtype = TRITON_TO_NUMPY_DTYPE.get(data_type)
    return np.dtype(dtype).itemsize if dtype else 8


def request_input_bounds(config: pb.ModelConfig) -> tuple[RequestInputBound, ...]:
    """Each input's largest valid request (RequestInputBound), from the config alone."""
    rows = config.max_batch_size
    parameters = config_parameters(config)
    bound = configured_max_sequence_length(parameters)
    largest = parse_max_input_dims(parameters.get(MAX_INPUT_DIMS_PARAMETER, ""))
    bounds = []
    for tensor in config.input:
        type_name = pb.DataType.Name(tensor.data_type)
        dims = tuple(bound if d < 0 and bound is not None else int(d) for d in tensor.dims)
        dims = tuple(largest[tensor.name]) if tensor.name in largest else dims
        size = None if any(d < 0 for d in dims) else max(1, rows) * element_bytes(type_name) * int(np.prod(dims, dtype=np.int64))
        bounds.append(RequestInputBound(config.name, tensor.name, type_name, rows, dims, size))
    return tuple(bounds)


def check_request_inputs_fit(config: pb.ModelConfig, max_input_bytes: int) -> None:
    """Refuse a config whose valid requests the server's request guard would refuse: an input's
    largest request (request_input_bounds) over `[server] max_input_bytes` (0 = no limit). An input
    with an unbounded variable axis cannot be checked here; the limit then bounds its requests."""
    if max_input_bytes == 0:
        return
    for bound in request_input_bounds(config):
        if bound.bytes is not None and bound.bytes > max_input_bytes:
            raise ConfigError(
                f"{bound.described} needs {bound.bytes:,} bytes in its largest valid request, more than `server."
                f"max_input_bytes` = {max_input_bytes:,} (the request guard would refuse it): raise `max_input_bytes` "
                f"in serving.toml's [server] to at least {bound.bytes}, or lower the model's max_batch_size.")


def config_text(config: pb.ModelConfig) -> str:
    """The config.pbtxt text of a message (protobuf's text format, map keys sorted: stable diffs)."""
    return text_format.MessageToString(config)


def parse_config(text: str) -> pb.ModelConfig:
    """Parse config.pbtxt text with Triton's schema (raises on an unknown field or bad value)."""
    return text_format.Parse(text, pb.ModelConfig())


def read_model_config(model_dir: str | Path) -> pb.ModelConfig:
    """`<model_dir>/config.pbtxt` as Triton's ModelConfig message: the one reader every package uses."""
    path = Path(model_dir) / "config.pbtxt"
    try:
        return parse_config(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: run `make build-engines` first.") from None
    except text_format.ParseError as exc:
        raise ConfigError(f"{path} is not a Triton model config (model_config.proto): {exc}") from None


def config_parameters(config: pb.ModelConfig) -> dict[str, str]:
    """The string parameters of a config (what a Python-based backend reads)."""
    return {key: value.string_value for key, value in config.parameters.items()}


def write_model_config(model_dir: str | Path, config: pb.ModelConfig) -> Path:
    """Write config.pbtxt (only if it changed) and the warmup data files it names."""
    text = config_text(config)
    path = Path(model_dir) / "config.pbtxt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    for sample in config.model_warmup:
        for entry in sample.inputs.values():
            if not entry.input_data_file.startswith(ONES_PREFIX):
                continue
            type_name, count = entry.input_data_file[len(ONES_PREFIX):].rsplit("_", 1)
            data = np.ones(int(count), dtype=TRITON_TO_NUMPY_DTYPE[type_name]).tobytes()
            warmup = Path(model_dir) / "warmup" / entry.input_data_file
            if not warmup.exists() or warmup.read_bytes() != data:
                warmup.parent.mkdir(exist_ok=True)
                warmup.write_bytes(data)
    return path


# ------------------------------------------------------------------ Python models, ragged inputs, ensembles
#: A text model's string input: one UTF-8 text per batch row (clients send shape [N, 1]).
TEXT_INPUT = TensorSpec("TEXT", "TYPE_STRING", (1,))


def tokenizer_tensor_specs(
    encoder_inputs: Sequence[TensorSpec], text_input: TensorSpec = TEXT_INPUT
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(inputs, outputs) of a tokenizer model that feeds `encoder_inputs`: its outputs ARE the
    encoder's inputs (names, types, dims read from the encoder's ONNX graph), so they cannot drift."""
    for tensor in encoder_inputs:
        if tensor.data_type not in ("TYPE_INT64", "TYPE_INT32") or tensor.dims != (-1,):
            raise ConfigError(
                f"encoder input `{tensor.name}` is {tensor.data_type} {list(tensor.dims)}; a tokenizer can only "
                "feed integer token inputs of dims [-1] (one variable sequence axis)."
            )
    if not encoder_inputs:
        raise ConfigError("the encoder has no inputs for the tokenizer to feed.")
    return (text_input,), tuple(encoder_inputs)


def render_python_model_config(
    model: ModelSpec,
    serving: ServingSpec,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    parameters: Mapping[str, str] | None = None,
) -> pb.ModelConfig:
    """Config for a model whose own model.py runs in Triton's Python backend (e.g. a tokenizer),
    with the same dynamic batcher, priority levels and queue policies as every other model."""
    refuse_backend_parameters(model, "Triton's Python backend (its own model.py)")
    return _render_batched_model("python", model, serving, inputs, outputs, parameters or {})


def refuse_backend_parameters(model: ModelSpec, served_by: str) -> None:
    """`backend_parameters` are the onnxruntime_cpu backend's switches: set on a model that another
    backend serves, they would be ignored in silence, so they are refused."""
    if model.backend_parameters:
        raise ConfigError(f"`models.{model.name}.backend_parameters` = {dict(model.backend_parameters)}: this model is "
                          f"served by {served_by}, not the onnxruntime_cpu backend they configure; remove them.")


@dataclass(frozen=True)
class EnsembleStep:
    """One step of a Triton ensemble: which model, and how its tensors map to ensemble tensors.

    `input_map`/`output_map` pairs are (the step model's tensor name, the ensemble tensor name).
    """

    model_name: str
    input_map: tuple[tuple[str, str], ...]
    output_map: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not self.input_map or not self.output_map:
            raise ConfigError(f"ensemble step `{self.model_name}` needs at least one input and one output mapping.")


def text_ensemble_steps(
    tokenizer: str, encoder: str, encoder_inputs: Sequence[TensorSpec], encoder_outputs: Sequence[TensorSpec],
    text_input: TensorSpec = TEXT_INPUT,
) -> tuple[EnsembleStep, EnsembleStep]:
    """TEXT -> tokenizer -> (the encoder's inputs) -> encoder -> (the encoder's outputs)."""
    token_names = tuple((t.name, t.name) for t in encoder_inputs)
    return (
        EnsembleStep(tokenizer, ((text_input.name, text_input.name),), token_names),
        EnsembleStep(encoder, token_names, tuple((t.name, t.name) for t in encoder_outputs)),
    )


def render_ensemble_config(
    model: ModelSpec,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    steps: Sequence[EnsembleStep],
    step_max_batch_sizes: Mapping[str, int],
) -> pb.ModelConfig:
    """Config for `platform: "ensemble"`. An ensemble has no dynamic batcher of its own: each step
    batches and applies its priority levels and queue policies; the request's priority and timeout
    are passed to every step by Triton's ensemble scheduler."""
    refuse_backend_parameters(model, "Triton's ensemble scheduler")
    available = {t.name for t in inputs}
    for step in steps:
        if step.model_name not in step_max_batch_sizes:
            raise ConfigError(f"ensemble `{model.name}`: step model `{step.model_name}` is not a served model.")
        if model.max_batch_size > step_max_batch_sizes[step.model_name]:
            raise ConfigError(
                f"`models.{model.name}.max_batch_size` = {model.max_batch_size} exceeds its step "
                f"`{step.model_name}`'s max_batch_size {step_max_batch_sizes[step.model_name]}: allowed <= that."
            )
        missing = [ensemble_name for _, ensemble_name in step.input_map if ensemble_name not in available]
        if missing:
            raise ConfigError(f"ensemble `{model.name}`: step `{step.model_name}` reads {missing}, which no earlier step produces.")
        available |= {ensemble_name for _, ensemble_name in step.output_map}
    unproduced = [t.name for t in outputs if t.name not in available]
    if unproduced:
        raise ConfigError(f"ensemble `{model.name}`: outputs {unproduced} are produced by no step.")
    config = pb.ModelConfig(name=model.name, platform="ensemble", max_batch_size=model.max_batch_size,
                            input=[model_input(t) for t in inputs], output=[model_output(t) for t in outputs])
    for step in steps:
        config.ensemble_scheduling.step.append(pb.ModelEnsembling.Step(
            model_name=step.model_name, model_version=-1, input_map=dict(step.input_map), output_map=dict(step.output_map)))
    return config
