"""A/B variants that need a different server configuration (the in-process limit is in `limits`).

Variants (no batching, a static batch size, each batching delay of the delay sweep, INT8) are
served side by side by ONE temporary tritonserver on free ports, each under its own model name,
from a temporary model repository whose configs are rendered by `contracts.model_config` from the
served model's `ModelSpec` with one setting changed. The shared serving.toml is never touched.

"No batching" is `max_batch_size: 1`: every request runs alone, through the same queue and
priority levels as the served model, so only batching differs. The `*_no_queue_policy` pair
(dynamic and none, both without priority levels or queue policies) repeats the comparison without
Triton 2.51's batcher stall, which hits the one-request-per-execution variant hardest. "Static" is `max_batch_size: B`
with no delay: the server runs exactly the client's batch of B and cannot merge two of them.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Sequence

from perf_sweep.errors import SweepPlanError, SweepRunError
from contracts.layout import place_model_file
from contracts.serving_spec import DEFAULT_MAX_INPUT_BYTES, ModelSpec, ServingSpec, check_name


class VariantRole(Enum):
    """What a variant is for: `ab.py` chooses every measurement from this, never from a label."""

    #: The served configuration as serving.toml renders it.
    SERVED = "served"
    #: The served delay without priority levels or queue policies (isolates their cost).
    NO_POLICY = "no_policy"
    #: max_batch_size 1: every request alone, through the same queue and policies.
    NO_BATCHING = "no_batching"
    NO_BATCHING_NO_POLICY = "no_batching_no_policy"
    #: No window, no policies: the plain Triton batcher, the baseline of the 0.9x target.
    PLAIN = "plain"
    #: The client's batch of B exactly (max_batch_size B, no delay).
    STATIC = "static"
    #: One point of the batching-delay sweep (open loop at the operating rate).
    DELAY = "delay"
    #: Another ONNX file of the model (e.g. INT8-mixed), served alike.
    PRECISION = "precision"
    #: A batcher configuration WITH priorities and queue policies (docs/triton-batcher-stall.md):
    #: instances, delay window, preferred sizes, measured against PLAIN with its stall count.
    CANDIDATE = "candidate"

    @property
    def closed_loop(self) -> bool:
        """Measured by perf_analyzer's closed loop at concurrency 1 and 16."""
        return self not in (VariantRole.STATIC, VariantRole.DELAY)


@dataclass(frozen=True)
class BatcherCandidate:
    """One batcher configuration to try with priorities and queue policies kept."""

    instance_count: int
    max_queue_delay_microseconds: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        preferred = f"_pref{'_'.join(map(str, self.preferred_batch_sizes))}" if self.preferred_batch_sizes else ""
        return f"candidate_i{self.instance_count}_d{self.max_queue_delay_microseconds}us{preferred}"


#: The candidates `make perf` measures (each with Triton's priority levels and queue policies on).
DEFAULT_CANDIDATES = (
    BatcherCandidate(1), BatcherCandidate(2), BatcherCandidate(4),
    BatcherCandidate(2, 500), BatcherCandidate(2, 2000, (4, 8, 16)),
)


@dataclass(frozen=True)
class ServedVariant:
    """One model of the temporary repository: a label for reports, its role, and what differs."""

    label: str
    served_name: str
    onnx_path: Path
    max_batch_size: int
    max_queue_delay_microseconds: int
    #: False: without priority levels or queue policies.
    queue_policies: bool = True
    role: VariantRole = VariantRole.SERVED
    #: None: the served model's instance_count.
    instance_count: int | None = None
    preferred_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_name("served_name", self.served_name)


def plan_variants(spec: ServingSpec, model: str, onnx_path: Path, static_batch: int = 8,
                  delays_ms: Sequence[float] = (0, 2, 5, 10, 20),
                  extra_onnx: dict[str, Path] | None = None,
                  candidates: Sequence[BatcherCandidate] = (),
                  served_max_batch_size: int | None = None) -> tuple[ServedVariant, ...]:
    """The variants of `model` one A/B run needs (labels: dynamic, no_batching, static_b<B>,
    delay_<ms>ms, <variant> for each extra ONNX file such as an INT8 build, candidate_*).
    `served_max_batch_size`: the served config's, where the build lowered serving.toml's to what it
    measured (text_encoder: 32 of 64), so the `dynamic` variant is the served configuration."""
    base = spec.model(model)
    if served_max_batch_size is not None:
        base = dataclasses.replace(base, max_batch_size=served_max_batch_size)
    served_delay = base.max_queue_delay_microseconds
    if served_delay is None:
        served_delay = spec.batching.max_queue_delay_microseconds
    if not 1 <= static_batch <= base.max_batch_size:
        raise SweepPlanError(f"`static_batch` = {static_batch} must be between 1 and {model}'s max_batch_size {base.max_batch_size}.")
    R = VariantRole
    variants = [
        ServedVariant("dynamic", f"{model}_ab_dynamic", onnx_path, base.max_batch_size, served_delay, role=R.SERVED),
        ServedVariant("dynamic_no_queue_policy", f"{model}_ab_nopolicy", onnx_path, base.max_batch_size, served_delay,
                      queue_policies=False, role=R.NO_POLICY),
        ServedVariant("no_batching", f"{model}_ab_nobatch", onnx_path, 1, 0, role=R.NO_BATCHING),
        # Triton 2.51's batcher loses wake-ups with priority levels/queue policies
        # (docs/triton-batcher-stall.md), most often with one request per execution: this pair
        # (with dynamic_no_queue_policy) gives the batching ratio without that defect on either side.
        ServedVariant("no_batching_no_queue_policy", f"{model}_ab_nobatch_nopolicy", onnx_path, 1, 0,
                      queue_policies=False, role=R.NO_BATCHING_NO_POLICY),
        ServedVariant("dynamic_0ms_no_queue_policy", f"{model}_ab_0us_nopolicy", onnx_path, base.max_batch_size, 0,
                      queue_policies=False, role=R.PLAIN),
        ServedVariant(f"static_b{static_batch}", f"{model}_ab_static", onnx_path, static_batch, 0, role=R.STATIC),
    ]
    for ms in delays_ms:
        if ms < 0:
            raise SweepPlanError(f"delay {ms} ms must be >= 0.")
        us = int(round(ms * 1000))
        variants.append(ServedVariant(f"delay_{ms:g}ms", f"{model}_ab_delay_{us}us", onnx_path, base.max_batch_size, us, role=R.DELAY))
    for label, path in sorted((extra_onnx or {}).items()):
        variants.append(ServedVariant(label, f"{model}_ab_{label}", Path(path), base.max_batch_size, served_delay, role=R.PRECISION))
    for candidate in candidates:
        sizes = tuple(b for b in candidate.preferred_batch_sizes if b <= base.max_batch_size)
        variants.append(ServedVariant(candidate.label, f"{model}_ab_{candidate.label}", onnx_path, base.max_batch_size,
                                      candidate.max_queue_delay_microseconds, role=R.CANDIDATE,
                                      instance_count=candidate.instance_count, preferred_batch_sizes=sizes))
    return tuple(variants)


def variants_by_role(variants: Sequence[ServedVariant], role: VariantRole) -> tuple[ServedVariant, ...]:
    return tuple(v for v in variants if v.role is role)


def variant_model_spec(base: ModelSpec, variant: ServedVariant) -> ModelSpec:
    return dataclasses.replace(base, name=variant.served_name, max_batch_size=variant.max_batch_size,
                               max_queue_delay_microseconds=variant.max_queue_delay_microseconds,
                               instance_count=variant.instance_count or base.instance_count,
                               preferred_batch_sizes=variant.preferred_batch_sizes)


def write_variant_repository(spec: ServingSpec, model: str, variants: Sequence[ServedVariant], dest: Path,
                             served_dir: Path | None = None) -> Path:
    """dest/<served_name>/{config.pbtxt, 1/model.onnx (hard link or copy)} for every variant.

    `served_dir`: the served model's folder in the model repository. Its config's backend parameters
    (a text model's tokenizer file, sequence buckets, pad id, maximum length), its inputs and outputs
    (text_embedder takes TEXT, not its ONNX graph's token ids) and ragged inputs go into every
    variant's config, and the other files of its version folder (the tokenizer) beside each variant's
    ONNX file: without them a text model's variants padded differently from the served model, batched
    only requests of equal length, or did not load at all."""
    from contracts.model_config import (config_parameters, read_model_config, render_onnx_cpu_config,
                                        tensor_specs_from_config, tensor_specs_from_onnx, write_model_config)

    base = spec.model(model)
    served = read_model_config(served_dir) if served_dir is not None else None
    parameters = {k: v for k, v in config_parameters(served).items() if k != "onnx_file"} if served else {}
    ragged = bool(served) and any(tensor.allow_ragged_batch for tensor in served.input)
    companions = [] if served_dir is None else sorted(
        f for f in (Path(served_dir) / "1").iterdir() if f.is_file() and f.suffix != ".onnx")
    for variant in variants:
        if not variant.onnx_path.exists():
            raise SweepPlanError(f"variant `{variant.label}`: ONNX file {variant.onnx_path} does not exist.")
        model_dir = Path(dest) / variant.served_name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        for source, target in [(variant.onnx_path, model_dir / "1" / "model.onnx"),
                               *((f, model_dir / "1" / f.name) for f in companions)]:
            if target.is_symlink() or target.exists():
                target.unlink()
            place_model_file(source, target)
        # a hand-written served config without inputs or outputs: the graph's (the backend does not fill them in)
        inputs, outputs = (tensor_specs_from_config(served) if served and served.input and served.output
                           else tensor_specs_from_onnx(variant.onnx_path))
        serving = spec if variant.queue_policies else dataclasses.replace(spec, priorities=())
        write_model_config(model_dir, render_onnx_cpu_config(variant_model_spec(base, variant), serving, inputs, outputs,
                                                             extra_parameters=parameters, ragged_inputs=ragged))
    return Path(dest)


def start_variant_server(repository: Path, workdir: Path, models: Sequence[str], cpus: Sequence[int] = (),
                         intra_op_threads: int = 0, timeout: float = 180.0,
                         max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES):
    """Start our own tritonserver on free loopback ports, pinned to `cpus` (the served model's
    partition) with the same ONNX Runtime thread count and the request guard's per-input limit
    (`[server] max_input_bytes`); returns (process, http, grpc, metrics URL)."""
    from contracts.partition_plan import INTRA_OP_THREADS_ENV
    from contracts.processes import free_loopback_ports
    from serving.runtime.server import ServerSettings, TritonServerProcess, find_tritonserver, prepare_backend_dir

    installation = find_tritonserver()
    backend_dir = prepare_backend_dir(installation, Path(workdir) / "backends")
    http, grpc, metrics = free_loopback_ports(3)
    settings = ServerSettings(model_repository=Path(repository), backend_dir=backend_dir, http_port=http,
                              grpc_port=grpc, metrics_port=metrics, models=tuple(models), max_input_bytes=max_input_bytes)
    env = {INTRA_OP_THREADS_ENV: str(intra_op_threads)} if intra_op_threads else {}
    process = TritonServerProcess(installation, settings, Path(workdir) / "tritonserver-ab.log", extra_env=env,
                                  preexec_cpus=tuple(cpus) or None).start()
    try:
        process.wait_ready(timeout=timeout)
        wait_models_ready(f"127.0.0.1:{http}", models, timeout=30.0)
    except Exception as exc:
        from contracts.processes import log_tail

        process.stop()
        raise SweepRunError(f"the A/B server did not serve every variant: {exc}\n{log_tail(process.log_path, 15)}") from None
    except BaseException:  # Ctrl-C while it loads: it runs in a session of its own and outlived the sweep (a review)
        process.stop()
        raise
    return process, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}/metrics"


def wait_models_ready(http_url: str, models: Sequence[str], timeout: float = 60.0) -> None:
    """Poll each model's /ready (the runtime's own probe) until all are ready or `timeout` passes."""
    from serving.runtime.model_readiness import model_ready

    host, _, port = http_url.rpartition(":")
    deadline = time.monotonic() + timeout
    for model in models:
        while not model_ready(host, int(port), model, timeout_s=2.0):
            if time.monotonic() > deadline:
                raise SweepRunError(f"model {model} on {http_url} not ready after {timeout:.0f} s.")
            time.sleep(0.25)
