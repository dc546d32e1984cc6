"""How many KV blocks a served model gets: the 70% rule of `model_build.sizing.batch_sizing`, applied to KV.

The model's budget is 70% of its even share of its partition's `memory_mb` (the same rule that
sizes every other model's max_batch_size). From it come the engine's own resident memory
(weights and ONNX Runtime's buffers, measured by the build) and then the blocks. Each block is
counted with the working copy a step makes of it: the runtime gathers a sequence's blocks into
the graph's dense FP32 `past_key`/`past_value` inputs, so a block costs its stored bytes plus its
FP32 bytes again. The count is capped at what `max_running` full-context sequences can use, twice
over (the second half keeps released prefix blocks for later hits).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from serving.generation.errors import GenerationError
from serving.generation.kv_blocks import blocks_for_tokens

MEMORY_BUDGET_FRACTION = 0.70  # the same rule as model_build.sizing.batch_sizing.MEMORY_BUDGET_FRACTION


class KvDtype(str, Enum):
    FP32 = "fp32"
    INT8 = "int8"

    @property
    def itemsize(self) -> int:
        return 4 if self is KvDtype.FP32 else 1


@dataclass(frozen=True)
class KvLayout:
    layers: int
    kv_heads: int
    head_dim: int
    block_size: int = 16
    dtype: KvDtype = KvDtype.FP32

    def __post_init__(self) -> None:
        for name in ("layers", "kv_heads", "head_dim", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GenerationError(f"KV layout `{name}` = {value!r}: expected an integer >= 1.")
        object.__setattr__(self, "dtype", KvDtype(self.dtype))

    @property
    def values_per_block(self) -> int:
        """K and V values of one block: 2 x layers x heads x block_size x head_dim."""
        return 2 * self.layers * self.kv_heads * self.block_size * self.head_dim

    @property
    def stored_bytes_per_block(self) -> int:
        """FP32: 4 bytes a value. INT8: 1 byte a value plus an FP32 scale per head and token (kv_store)."""
        scales = 0 if self.dtype is KvDtype.FP32 else 2 * self.layers * self.kv_heads * self.block_size * 4
        return self.values_per_block * self.dtype.itemsize + scales

    @property
    def working_bytes_per_block(self) -> int:
        """Stored bytes plus the FP32 dense copy a step gathers (see the module docstring)."""
        return self.stored_bytes_per_block + self.values_per_block * 4


@dataclass(frozen=True)
class KvSizing:
    num_blocks: int
    budget_bytes: int
    engine_bytes: int
    kv_bytes: int
    #: "memory" when the budget set the count, "cap" when max_running x context did.
    bound_by: str
    layout: KvLayout

    @property
    def token_capacity(self) -> int:
        return self.num_blocks * self.layout.block_size


def plan_kv_blocks(memory_mb: int, models_in_partition: int, engine_bytes: int, layout: KvLayout,
                   max_running: int, max_context: int) -> KvSizing:
    if models_in_partition < 1 or max_running < 1 or max_context < 1 or engine_bytes < 0:
        raise GenerationError(f"plan_kv_blocks: expected models_in_partition, max_running, max_context >= 1 and "
                              f"engine_bytes >= 0, got {models_in_partition}, {max_running}, {max_context}, {engine_bytes}.")
    budget = int(memory_mb * 1024 * 1024 * MEMORY_BUDGET_FRACTION / models_in_partition)
    kv_bytes = budget - engine_bytes
    per_sequence = blocks_for_tokens(max_context, layout.block_size)
    by_memory = max(0, kv_bytes) // layout.working_bytes_per_block
    if by_memory < per_sequence:
        raise GenerationError(
            f"the KV cache gets {max(0, kv_bytes) / 2**20:.0f} MiB ({MEMORY_BUDGET_FRACTION:.0%} of "
            f"{memory_mb} MiB / {models_in_partition} model(s), less the engine's {engine_bytes / 2**20:.0f} MiB): "
            f"{by_memory} blocks, fewer than one {max_context}-token sequence needs ({per_sequence}). Raise the "
            f"partition's memory_mb, lower options.max_context, or use options.kv_dtype = \"int8\".")
    cap = 2 * max_running * per_sequence
    return KvSizing(min(by_memory, cap), budget, engine_bytes, kv_bytes, "memory" if by_memory < cap else "cap", layout)
