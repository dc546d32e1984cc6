"""TensorRT engines from the GPU graphs: strongly typed FP16 and INT8-mixed, where a GPU exists.

TensorRT 10 deprecated implicit INT8 calibration and per-layer precision flags, so precision lives
in the ONNX graphs (`fp16_gpu.onnx`: all FP16; `int8_mixed_gpu.onnx`: Q/DQ on the plan's INT8
layers, FP16 elsewhere) and the engines are built STRONGLY TYPED from them: TensorRT keeps every
tensor's type as written. Each engine gets one optimization profile (batch 1..max_batch_size,
sequence 1..max length) and the model's timing cache is loaded and saved, so rebuilds are fast.

Planning is pure (`plan_engine_builds`, `trtexec_command`, `polygraphy_command`,
`render_tensorrt_config`) and runs everywhere; the commands go into the build report so users of
NVIDIA's container can reproduce the engines. `detect_tensorrt` looks for a real GPU (nvidia-smi,
libcuda) and a TensorRT that can create a builder; without one `run_tensorrt_step` prints ONE line
saying what was skipped and why, and writes no file of any kind.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from contracts.devices import TensorRTAvailability, detect_tensorrt  # noqa: F401 (the one device probe, re-exported)
from contracts.layout import ENGINE_REPLAY_ATOL as REPLAY_ATOL
from contracts.layout import ENGINE_REPLAY_INPUTS as REPLAY_INPUTS
from contracts.layout import ENGINE_REPLAY_OUTPUTS as REPLAY_OUTPUTS
from model_build.errors import BuildError

GPU_GRAPHS = {"fp16": "fp16_gpu.onnx", "int8_mixed": "int8_mixed_gpu.onnx"}
TIMING_CACHE = "tensorrt_timing.cache"
ENGINE_DIR = "tensorrt"


@dataclass(frozen=True)
class InputProfile:
    name: str
    minimum: tuple[int, ...]
    optimum: tuple[int, ...]
    maximum: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (len(self.minimum) == len(self.optimum) == len(self.maximum)):
            raise BuildError(f"profile for `{self.name}`: min/opt/max shapes must have the same rank.")
        if any(not (a <= b <= c) for a, b, c in zip(self.minimum, self.optimum, self.maximum)):
            raise BuildError(f"profile for `{self.name}`: need min <= opt <= max per axis, got {self.minimum}/{self.optimum}/{self.maximum}.")


@dataclass(frozen=True)
class EngineBuild:
    """One strongly typed engine to build from one GPU graph."""

    model: str
    precision: str  # "fp16" | "int8_mixed"
    onnx_path: Path
    engine_path: Path
    timing_cache: Path
    profiles: tuple[InputProfile, ...]

    def __post_init__(self) -> None:
        if self.precision not in GPU_GRAPHS:
            raise BuildError(f"engine precision {self.precision!r}: allowed {sorted(GPU_GRAPHS)}.")


def plan_engine_builds(model: str, workdir: Path, inputs: Sequence[Any], max_batch_size: int, max_length: int | None) -> tuple[EngineBuild, ...]:
    """An EngineBuild per GPU graph present in `workdir`. `inputs` are serving TensorSpecs (dims
    without the batch axis, -1 = the sequence axis, which runs 1..max_length)."""
    profiles = []
    for spec in inputs:
        if any(d < 0 for d in spec.dims) and not max_length:
            raise BuildError(f"{model}: input `{spec.name}` has a dynamic axis but no max length is known.")
        lo = [1] + [1 if d < 0 else d for d in spec.dims]
        hi = [max_batch_size] + [max_length if d < 0 else d for d in spec.dims]
        opt = [max(1, max_batch_size // 2)] + [max(1, (max_length or 2) // 2) if d < 0 else d for d in spec.dims]
        profiles.append(InputProfile(spec.name, tuple(lo), tuple(opt), tuple(hi)))
    workdir = Path(workdir)
    return tuple(
        EngineBuild(model, precision, workdir / graph, workdir / ENGINE_DIR / f"{model}_{precision}" / "1" / "model.plan",
                    workdir / ENGINE_DIR / TIMING_CACHE, tuple(profiles))
        for precision, graph in GPU_GRAPHS.items() if (workdir / graph).exists()
    )


def _shapes(build: EngineBuild, which: str, sep: str = "x", brackets: bool = False) -> str:
    parts = []
    for p in build.profiles:
        dims = getattr(p, which)
        parts.append(f"{p.name}:[{','.join(map(str, dims))}]" if brackets else f"{p.name}:{sep.join(map(str, dims))}")
    return ("," if not brackets else " ").join(parts)


def _relative(path: Path) -> str:
    """Paths in commands are relative to the repository root (where the user runs them)."""
    from contracts.layout import display_path

    return display_path(path)




def replay_files(build: EngineBuild) -> tuple[Path, Path]:
    folder = build.engine_path.parent.parent
    return folder / REPLAY_INPUTS, folder / REPLAY_OUTPUTS


def trtexec_command(build: EngineBuild) -> str:
    """The engine build as trtexec runs it from the repository root (the engine folder created first)."""
    return (f"mkdir -p {_relative(build.engine_path.parent)} && "
            f"trtexec --onnx={_relative(build.onnx_path)} --saveEngine={_relative(build.engine_path)} --stronglyTyped "
            f"--minShapes={_shapes(build, 'minimum')} --optShapes={_shapes(build, 'optimum')} "
            f"--maxShapes={_shapes(build, 'maximum')} --timingCacheFile={_relative(build.timing_cache)}")


def polygraphy_command(build: EngineBuild) -> str:
    cache = _relative(build.timing_cache)
    return (f"mkdir -p {_relative(build.engine_path.parent)} && "
            f"polygraphy convert {_relative(build.onnx_path)} --convert-to trt -o {_relative(build.engine_path)} --strongly-typed "
            f"--trt-min-shapes {_shapes(build, 'minimum', brackets=True)} --trt-opt-shapes {_shapes(build, 'optimum', brackets=True)} "
            f"--trt-max-shapes {_shapes(build, 'maximum', brackets=True)} "
            f"--load-timing-cache {cache} --save-timing-cache {cache}")


def replay_command(build: EngineBuild, atol: float) -> str:
    """The engine against the FP32 reference outputs, batches within the engine's profile."""
    inputs, outputs = replay_files(build)
    return (f"polygraphy run {_relative(build.engine_path)} --model-type engine --trt --load-inputs {_relative(inputs)} "
            f"--load-outputs {_relative(outputs)} --atol {atol:g} --rtol 0 --check-error-stat median")


def split_feeds(feeds: Sequence[Mapping[str, Any]], max_batch: int) -> list[dict[str, Any]]:
    """Feed dicts cut along the batch axis into pieces of at most `max_batch` rows (order kept):
    replay inputs saved at the validation batch size must fit an engine profiled for fewer rows."""
    if max_batch < 1:
        raise BuildError(f"max_batch = {max_batch}: allowed >= 1.")
    pieces = []
    for feed in feeds:
        rows = len(next(iter(feed.values())))
        for start in range(0, rows, max_batch):
            pieces.append({name: value[start:start + max_batch] for name, value in feed.items()})
    return pieces


def write_replay_data(build: EngineBuild, fp32_path: Path, reference_inputs: Path) -> tuple[Path, Path]:
    """Replay inputs cut to the profile's maximum batch and the FP32 outputs for exactly those
    (ONNX Runtime on CPU, through Polygraphy's Comparator so the files are Polygraphy's formats)."""
    from polygraphy.backend.onnxrt import OnnxrtRunner
    from polygraphy.comparator import Comparator, RunResults
    from polygraphy.json import load_json

    from contracts.onnx_sessions import served_session

    max_batch = build.profiles[0].maximum[0]
    feeds = split_feeds(load_json(str(reference_inputs)), max_batch)
    inputs_path, outputs_path = replay_files(build)
    inputs_path.parent.mkdir(parents=True, exist_ok=True)
    results = Comparator.run([OnnxrtRunner(served_session(fp32_path), name="fp32")], data_loader=feeds,
                             save_inputs_path=str(inputs_path))
    RunResults([("fp32", results["fp32"])]).save(str(outputs_path))
    return inputs_path, outputs_path


def render_tensorrt_config(name: str, max_batch_size: int, inputs, outputs, dynamic_batching=None):
    """Triton config for a TensorRT plan on the GPU (`platform: "tensorrt_plan"`, KIND_GPU)."""
    from contracts.model_config import ModelConfig, model_input, model_output

    config = ModelConfig(name=name, platform="tensorrt_plan", max_batch_size=max_batch_size,
                         input=[model_input(t) for t in inputs], output=[model_output(t) for t in outputs],
                         instance_group=[{"count": 1, "kind": "KIND_GPU"}], default_model_filename="model.plan")
    if dynamic_batching is not None:
        config.dynamic_batching.CopyFrom(dynamic_batching)
    return config


def run_engine_build(build: EngineBuild) -> Path:
    """Build one strongly typed engine with the TensorRT Python API (GPU hosts only)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(build.onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"TensorRT could not parse {build.onnx_path}: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for p in build.profiles:
        profile.set_shape(p.name, p.minimum, p.optimum, p.maximum)
    config.add_optimization_profile(profile)
    cache_bytes = build.timing_cache.read_bytes() if build.timing_cache.exists() else b""
    config.set_timing_cache(config.create_timing_cache(cache_bytes), ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BuildError(f"TensorRT failed to build {build.engine_path.name} from {build.onnx_path}; see the log above.")
    build.engine_path.parent.mkdir(parents=True, exist_ok=True)
    build.engine_path.write_bytes(bytes(serialized))
    build.timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))
    return build.engine_path


def engine_plans(records: Sequence[Mapping[str, Any]], specs: Mapping[str, Any], artifacts: Path) -> dict[str, tuple[EngineBuild, ...]]:
    """Engine builds for every built model that has GPU graphs (pure apart from reading ONNX headers)."""
    from contracts.model_config import tensor_specs_from_onnx

    plans = {}
    for record in records:
        workdir = Path(artifacts) / record["model"]
        built = {v.get("file") for v in record.get("variants", {}).values()}  # not stale files of an older build
        graphs = [workdir / g for g in GPU_GRAPHS.values() if g in built and (workdir / g).exists()]
        if not graphs:
            continue
        inputs, _ = tensor_specs_from_onnx(graphs[0])
        plans[record["model"]] = plan_engine_builds(record["model"], workdir, inputs, specs[record["model"]].max_batch_size,
                                                    record.get("max_length"))
    return plans


def engine_report_section(plans: Mapping[str, Sequence[EngineBuild]], availability: TensorRTAvailability,
                          outcomes: Mapping[str, str] | None = None) -> str:
    """The engines' commands (run from the repository root) and, on a GPU host, what each build did."""
    lines = ["## TensorRT engines", "",
             ("Built here: " + availability.reason) if availability.available else
             f"Not built here: {availability.reason}. On a GPU host (e.g. NVIDIA's Triton container), from the repository "
             f"root; `make build-engines` there also writes each engine's replay data (batches cut to its profile):",
             ""]
    for model, builds in plans.items():
        for b in builds:
            key = f"{model} {b.precision}"
            lines += [f"- {key}" + (f": {outcomes[key]}" if outcomes and key in outcomes else ":"),
                      f"  - `{trtexec_command(b)}`", f"  - `{polygraphy_command(b)}`",
                      f"  - replay against FP32: `{replay_command(b, REPLAY_ATOL)}`"]
    return "\n".join(lines)


def run_tensorrt_step(records, serving, artifacts: Path) -> tuple[str, list[str]]:
    """Build the engines where possible. Returns (report section, skipped lines for the report)."""
    plans = engine_plans(records, {m.name: m for m in serving.models}, artifacts)
    availability = detect_tensorrt()
    if not plans:
        return "", []
    if not availability.available:
        line = (f"TensorRT engines (FP16, INT8-mixed) for {', '.join(plans)} skipped: {availability.reason}; "
                "their trtexec/polygraphy commands are in the build report")
        print(f"[tensorrt] {line}")
        return engine_report_section(plans, availability), [line]
    specs = {m.name: m for m in serving.models}
    outcomes, failed = {}, []
    for model, builds in plans.items():
        for build in builds:
            key = f"{model} {build.precision}"
            try:  # an optional GPU step: a failure is reported, the CPU build it follows stands
                _build_one_engine(build, specs[model], serving, Path(artifacts) / model)
                outcomes[key] = f"built {_relative(build.engine_path)}"
            except Exception as exc:  # TensorRT raises plain exceptions; every one is reported with its reason
                outcomes[key] = f"FAILED ({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''})"
                failed.append(f"TensorRT engine {key}: {outcomes[key]}")
            print(f"[tensorrt] {key}: {outcomes[key]}")
    return engine_report_section(plans, availability, outcomes), failed


def _build_one_engine(build: EngineBuild, spec, serving, workdir: Path) -> None:
    """Engine, its Triton config (NVIDIA's container: the native tensorrt_plan backend) and its replay data."""
    from contracts.model_config import render_dynamic_batching, tensor_specs_from_onnx, write_model_config

    run_engine_build(build)
    inputs, outputs = tensor_specs_from_onnx(build.onnx_path)
    write_model_config(build.engine_path.parent.parent, render_tensorrt_config(
        build.engine_path.parent.parent.name, spec.max_batch_size, inputs, outputs, render_dynamic_batching(spec, serving)))
    reference = workdir / "validation" / "reference_inputs.json"
    if reference.exists():
        write_replay_data(build, workdir / "fp32.onnx", reference)
