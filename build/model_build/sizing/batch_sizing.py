"""The max_batch_size memory rule: the largest batch whose *measured* memory fits 70% of the budget.

A model's budget is its partition's memory cap (`memory_mb`) split evenly between the partition's
models; 70% of it may be used by one batch's working set, the other 30% is headroom (allocator
fragmentation, concurrent requests' inputs, the server's own buffers). The model's `max_batch_size`
in serving.toml is the *cap* (an upper bound chosen for latency); the served value is

    max { b in candidates(cap) : measured_memory(b') <= 0.70 * budget for every candidate b' <= b }

where candidates are the powers of two up to the cap, plus the cap. Memory is measured, one fresh
process per batch size (`model_build.sizing.memory_probe`): ONNX Runtime's resident-set growth on CPU, device
memory on a GPU. Measurements and the choice are written to artifacts/<model>/batch_sizing.json,
which the build reads when it renders config.pbtxt; they are reused while the ONNX file, thread
count and probe settings are unchanged.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from model_build.errors import BuildError
from contracts.errors import ConfigError, ServingError
from contracts.file_digest import sha256_file
from contracts.partition_plan import PartitionPlan
from contracts.sequence_buckets import max_input_dims_value
from contracts.serving_spec import ModelSpec, ServingSpec

#: Share of a model's memory budget one batch may use; the rest is headroom.
MEMORY_BUDGET_FRACTION = 0.70
SIZING_FILE = "batch_sizing.json"
#: Length used for variable (sequence) axes while measuring, unless the model's options give
#: `max_sequence_length` or `max_length`: memory is sized for the longest input the model accepts.
DEFAULT_MEASURE_SEQUENCE_LENGTH = 128
PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class BatchMeasurement:
    batch_size: int
    memory_bytes: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.memory_bytes < 0:
            raise ConfigError(f"measurement {self}: batch_size must be >= 1 and memory_bytes >= 0.")


@dataclass(frozen=True)
class BatchSizingDecision:
    model: str
    partition: str
    budget_bytes: int
    cap: int
    measurements: tuple[BatchMeasurement, ...]
    chosen: int
    #: "memory" when the budget stopped the choice below the cap, else "cap".
    bound_by: str


def candidate_batch_sizes(cap: int) -> tuple[int, ...]:
    """Powers of two up to the cap, and the cap itself."""
    if cap < 1:
        raise ConfigError(f"max_batch_size cap = {cap}: allowed >= 1.")
    sizes = {1 << i for i in range(cap.bit_length()) if 1 << i <= cap}
    return tuple(sorted(sizes | {cap}))


def model_memory_budget_bytes(partition_bytes: int, models_in_partition: int, instances: int = 1) -> int:
    """70% of the model's even share of its partition's memory cap in bytes (`PlannedPartition.
    memory_budget_bytes`, which converts serving.toml's MiB), split over its instances (each Triton
    model instance holds its own ONNX Runtime session and buffers)."""
    if models_in_partition < 1:
        raise ConfigError(f"models_in_partition = {models_in_partition}: allowed >= 1.")
    if instances < 1:
        raise ConfigError(f"instances = {instances}: allowed >= 1.")
    return int(partition_bytes * MEMORY_BUDGET_FRACTION / models_in_partition / instances)


def budget_split_text(memory_mb: int, models_in_partition: int, partition: str, instances: int) -> str:
    """How a model's budget was split, as the build's lines say it (`model_memory_budget_bytes`)."""
    return (f"{MEMORY_BUDGET_FRACTION:.0%} of {memory_mb} MiB / {models_in_partition} model(s) in {partition} / "
            f"{instances} instance(s)")


def choose_max_batch_size(model: str, partition: str, measurements: Sequence[BatchMeasurement],
                          budget_bytes: int, cap: int, split: str = "") -> BatchSizingDecision:
    """Apply the rule to measurements (any order); every candidate up to the choice must fit. `split`
    says how the budget was made (`budget_split_text`), for the message when nothing fits."""
    ordered = sorted(measurements, key=lambda m: m.batch_size)
    if not ordered or ordered[0].batch_size != 1:
        raise ConfigError(f"{model}: the measurements must include batch size 1, got {[m.batch_size for m in ordered]}.")
    if ordered[0].memory_bytes > budget_bytes:
        raise ConfigError(
            f"model {model!r} needs {ordered[0].memory_bytes / 2**20:.1f} MiB at batch size 1 but its budget in "
            f"partition {partition!r} is {budget_bytes / 2**20:.1f} MiB "
            f"({split or f'{MEMORY_BUDGET_FRACTION:.0%} of its share of `partitions.{partition}.memory_mb`'}): raise "
            f"`partitions.{partition}.memory_mb`, run fewer instances (`instance_count`) or move the model to "
            f"another partition."
        )
    chosen = 1
    for m in ordered:
        if m.batch_size > cap or m.memory_bytes > budget_bytes:
            break
        chosen = m.batch_size
    return BatchSizingDecision(model, partition, budget_bytes, cap, tuple(ordered), chosen,
                               "cap" if chosen == cap else "memory")


def served_model_spec(model: ModelSpec, decision: BatchSizingDecision) -> ModelSpec:
    """The model as rendered into config.pbtxt: max_batch_size is the measured choice."""
    if decision.model != model.name:
        raise ConfigError(f"batch sizing for {decision.model!r} applied to model {model.name!r}.")
    return replace(model, max_batch_size=decision.chosen)


def sizing_path(artifacts: Path, model: str) -> Path:
    return Path(artifacts) / model / SIZING_FILE


@dataclass(frozen=True)
class SizingRecord:
    """batch_sizing.json as read back: the decision, and what reusing its measurements needs (the
    probe settings they were taken with, and each measurement as written, probe details included,
    so a build that reuses them writes them back unchanged)."""

    decision: BatchSizingDecision
    probe: Mapping[str, Any]
    measurements: tuple[Mapping[str, Any], ...]

    def reusable(self, probe_key: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
        """The measurements by batch size when they were taken as `probe_key` says (the same ONNX
        file, threads, lengths and device), else none: anything else measured another thing."""
        if self.probe != probe_key:
            return {}
        return {int(m["batch_size"]): dict(m) for m in self.measurements}


def read_sizing_record(path: Path) -> SizingRecord | None:
    """The record `size_model_batches` wrote at `path`; None when there is none yet."""
    try:
        data = json.loads(Path(path).read_text())
        measurements = tuple(data["measurements"])
        decision = BatchSizingDecision(
            model=data["model"], partition=data["partition"], budget_bytes=data["budget_bytes"], cap=data["cap"],
            measurements=tuple(BatchMeasurement(m["batch_size"], m["memory_bytes"]) for m in measurements),
            chosen=data["chosen_max_batch_size"], bound_by=data["bound_by"],
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise BuildError(f"{path} is not a batch sizing record ({type(exc).__name__}: {exc}); expected what "
                         "`model_build size-batches` writes: measure again with `size-batches --force`.") from None
    return SizingRecord(decision, data.get("probe") or {}, measurements)


def probe_batch_memory(onnx_path: Path, batch: int, threads: int, variable_dim: int, device: str,
                       input_dims: Mapping[str, Sequence[int]] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (see model_build.sizing.memory_probe); `input_dims`:
    whole rows of the inputs with variable axes that are not token sequences (a brought model's max_dims)."""
    command = [sys.executable, "-m", "model_build.sizing.memory_probe", "--onnx", str(onnx_path), "--batch", str(batch),
               "--threads", str(threads), "--variable-dim", str(variable_dim), "--device", device]
    if input_dims:
        command += ["--input-dims", max_input_dims_value(input_dims)]
    zero = _zero_only_inputs(str(onnx_path))
    if zero:  # ids of a one-row table: the probe's default 1 is out of range there
        command += ["--zero-inputs", ",".join(zero)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0:
        raise ServingError(f"memory probe failed for {onnx_path} at batch {batch}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=8)
def _zero_only_inputs(onnx_path: str) -> tuple[str, ...]:
    import onnx

    from contracts.onnx_graph import gather_id_ranges, zero_only_inputs

    return zero_only_inputs(gather_id_ranges(onnx.load(onnx_path, load_external_data=False)))


def _probes_any(sizes, cached: dict[int, dict[str, Any]], budget: int) -> bool:
    """Whether the sizing loop will measure a batch size: one it reaches (it stops after the first
    size over the budget) is not in the cache."""
    for batch in sizes:
        if batch not in cached:
            return True
        if cached[batch]["memory_bytes"] > budget:
            return False
    return False


def _probe_plan(model: ModelSpec, onnx_path: Path, threads: int, device: str, probe: Callable[..., dict[str, Any]]):
    """(variable axis length, the key that says cached measurements still hold, the probe to call): token
    models at their maximum length; recipe onnx_file's inputs with variable axes (an image's height and
    width) at their `max_dims`, the largest request rows."""
    variable_dim = int(model.options.get("max_sequence_length", model.options.get("max_length", DEFAULT_MEASURE_SEQUENCE_LENGTH)))
    input_dims = {name: list(dims) for name, dims in (model.options.get("max_dims") or {}).items()}
    probe_key = {"onnx_sha256": sha256_file(onnx_path), "threads": threads, "variable_dim": variable_dim, "device": device,
                 **({"input_dims": input_dims} if input_dims else {})}
    return variable_dim, probe_key, functools.partial(probe, input_dims=input_dims) if input_dims else probe


def size_model_batches(
    model: ModelSpec, spec: ServingSpec, plan: PartitionPlan, onnx_path: Path, out_path: Path,
    force: bool = False, log: Callable[[str], None] = print,
    probe: Callable[..., dict[str, Any]] = probe_batch_memory,
) -> BatchSizingDecision:
    """Measure (or reuse) memory per candidate batch size, choose, and write `out_path`."""
    partition = plan.partition_of(model.name)
    budget = model_memory_budget_bytes(partition.memory_budget_bytes, len(partition.models), model.instance_count)
    # What is SERVED decides: a GPU model's instances hold CUDA memory, a CPU model's RSS, on any host.
    device = "cuda" if getattr(model.device, "value", "cpu") == "gpu" and partition.gpu else "cpu"
    variable_dim, probe_key, measure = _probe_plan(model, onnx_path, partition.intra_op_threads, device, probe)
    try:
        previous = None if force else read_sizing_record(out_path)
    except BuildError as exc:  # a record of an older build (a key it did not write yet) or a broken one: measure again
        log(f"[size-batches] {model.name}: not reusing {out_path} ({exc}); measuring again")
        previous = None
    cached = previous.reusable(probe_key) if previous else {}
    measurements, raw, measured_now = [], [], 0
    from contracts.progress import progress

    sizes = candidate_batch_sizes(model.max_batch_size)
    # progress only where something is measured: an up-to-date build printed 1/7 .. 7/7 "measuring"
    # lines before saying it reused the cached measurements
    shown = progress(sizes, f"size-batches {model.name}") if _probes_any(sizes, cached, budget) else sizes
    for batch in shown:
        result = cached.get(batch)
        if result is None:
            result = measure(onnx_path, batch, partition.intra_op_threads, variable_dim, device)
            if "skipped" in result and device == "cuda":  # the key keeps "cuda": the next build tries again, then matches
                log(f"[size-batches] {model.name}: device memory not measured ({result['skipped']}); using CPU memory")
                result = {**measure(onnx_path, batch, partition.intra_op_threads, variable_dim, "cpu"), "fell_back_to": "cpu"}
            measured_now += 1
            result = {"batch_size": batch,
                      "memory_bytes": result.get("device_memory_bytes", result.get("peak_rss_growth_bytes")),
                      "probe": result}
        raw.append(result)
        measurements.append(BatchMeasurement(batch, result["memory_bytes"]))
        if result["memory_bytes"] > budget:
            break  # larger batches need at least as much: no need to measure them
    split = budget_split_text(partition.memory_mb, len(partition.models), partition.name, model.instance_count)
    decision = choose_max_batch_size(model.name, partition.name, measurements, budget, model.max_batch_size, split)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "model": model.name, "partition": partition.name, "memory_mb": partition.memory_mb,
        "models_in_partition": len(partition.models), "instances": model.instance_count, "budget_fraction": MEMORY_BUDGET_FRACTION,
        "budget_bytes": budget, "cap": model.max_batch_size, "onnx": str(onnx_path), "probe": probe_key,
        "measurement": "peak resident-set growth of a fresh process running one ONNX Runtime session" if device == "cpu"
        else "device memory of a fresh process running one ONNX Runtime CUDA session",
        "measurements": raw, "chosen_max_batch_size": decision.chosen, "bound_by": decision.bound_by,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True))
    tmp.replace(out_path)
    reused = "measured " + str(measured_now) if measured_now else "reused cached measurements"
    log(f"[size-batches] {model.name}: max_batch_size {decision.chosen} (cap {decision.cap}, bound by {decision.bound_by}; "
        f"budget {budget / 2**20:.1f} MiB = {split}; {reused})")
    return decision

