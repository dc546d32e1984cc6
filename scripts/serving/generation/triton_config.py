"""Render the decoupled Triton config of a generation model, with the vLLM backend's tensor names.

Why those names: existing Triton LLM clients (the vLLM backend's samples, `generate` /
`generate_stream` callers, genai-perf) send `text_input`, `stream`, `sampling_parameters` and
`exclude_input_in_output` and read `text_output`; they work unchanged. Extra outputs carry the
finish reason, token counts and the token ids; the extra inputs `apply_chat_template` and
`system_prompt` are optional, so a plain vLLM-style request never needs them.

`max_batch_size: 0` and `decoupled: true`: Triton hands each request over as it arrives and the
model's own scheduler batches (continuous batching); a request gets any number of responses.
One instance: the instance owns the KV cache and runs the scheduler loop.
"""
from __future__ import annotations

from typing import Mapping

from contracts.model_config import ModelConfig, TensorSpec, model_input, model_output, refuse_backend_parameters, set_parameters
from contracts.errors import ConfigError
from contracts.serving_spec import ModelSpec

#: (name, Triton type, dims, optional)
GENERATION_INPUTS = (
    ("text_input", "TYPE_STRING", (1,), False),
    ("stream", "TYPE_BOOL", (1,), True),
    ("sampling_parameters", "TYPE_STRING", (1,), True),
    ("exclude_input_in_output", "TYPE_BOOL", (1,), True),
    ("apply_chat_template", "TYPE_BOOL", (1,), True),
    ("system_prompt", "TYPE_STRING", (1,), True),
)
GENERATION_OUTPUTS = (
    ("text_output", "TYPE_STRING", (-1,)),
    ("finish_reason", "TYPE_STRING", (-1,)),
    ("num_input_tokens", "TYPE_UINT32", (1,)),
    ("num_output_tokens", "TYPE_UINT32", (-1,)),
    ("output_token_ids", "TYPE_INT64", (-1,)),
)


def refuse_unserved_settings(model: ModelSpec) -> None:
    """serving.toml settings this model cannot honour, refused instead of ignored in silence: its one
    instance owns the KV cache (sized for one), it runs on the CPU (a `device = "gpu"` would still give
    its partition CUDA MPS), its decoder graph has one precision, and it has no Triton batcher."""
    where = f"models.{model.name}"
    unserved = [(model.instance_count != 1, f"`{where}.instance_count` = {model.instance_count}", "1 (one instance owns the KV cache; "
                 "more concurrent sequences: options.max_running)"),
                (model.device.value != "cpu", f"`{where}.device` = {model.device.value!r}", "'cpu'"),
                (model.variant.value != "fp32", f"`{where}.variant` = {model.variant.value!r}", "'fp32' (options.kv_dtype sets the "
                 "KV cache's precision)"),
                (model.max_queue_delay_microseconds is not None, f"`{where}.max_queue_delay_microseconds`",
                 "none (no Triton batcher: the model's own scheduler batches)"),
                (bool(model.preferred_batch_sizes), f"`{where}.preferred_batch_sizes`", "none (no Triton batcher)"),
                (bool(model.max_request_batch_size), f"`{where}.max_request_batch_size`",
                 "none (a generation request carries one prompt; its own `max_queue_size` sizes its wait queues; if the "
                 "starvation check proposed the table, raise the model's max_batch_size instead: it only has to pass that "
                 "check, the model's own scheduler batches)")]
    for bad, setting, allowed in unserved:
        if bad:
            raise ConfigError(f"{setting} is not served by the generation model (serving/generation); allowed {allowed}.")


def render_generation_config(model: ModelSpec, parameters: Mapping[str, str]) -> ModelConfig:
    refuse_backend_parameters(model, "the generation model's own model.py (serving/generation)")
    refuse_unserved_settings(model)
    config = ModelConfig(
        name=model.name, backend="python", max_batch_size=0,
        input=[model_input(TensorSpec(name, dtype, dims), optional=optional) for name, dtype, dims, optional in GENERATION_INPUTS],
        output=[model_output(TensorSpec(name, dtype, dims)) for name, dtype, dims in GENERATION_OUTPUTS],
        instance_group=[{"count": 1, "kind": "KIND_CPU"}],
    )
    config.model_transaction_policy.decoupled = True
    set_parameters(config, parameters)
    return config
