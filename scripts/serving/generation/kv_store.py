"""The KV block pool's tensors: write new K/V into blocks, gather blocks into the graph's inputs.

Layout [layers, kv_heads, num_blocks, block_size, head_dim] per K and V, so gathering a sequence's
blocks (`pool[:, :, table]`) yields [layers, heads, blocks, block_size, head_dim], which is already
its [layers, heads, positions, head_dim] past with no transpose.

INT8 option: values are stored as int8 with one static scale per layer and KV head (per-head
scales, calibrated by the build on reference prompts: absmax / 127 with a margin); gathering
dequantizes to FP32. It stores a quarter of the bytes; its fidelity is measured in the build report.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from serving.generation.errors import GenerationError
from serving.generation.sizing import KvDtype, KvLayout


class KvStore:
    def __init__(self, layout: KvLayout, num_blocks: int, scales: np.ndarray | None = None) -> None:
        self.layout = layout
        shape = (layout.layers, layout.kv_heads, num_blocks, layout.block_size, layout.head_dim)
        dtype = np.float32 if layout.dtype is KvDtype.FP32 else np.int8
        self.keys = np.zeros(shape, dtype=dtype)
        self.values = np.zeros(shape, dtype=dtype)
        if layout.dtype is KvDtype.INT8:
            if scales is None or scales.shape != (2, layout.layers, layout.kv_heads):
                raise GenerationError(f"INT8 KV needs scales of shape (2, {layout.layers}, {layout.kv_heads}) "
                                      f"(K and V, per layer and head), got {None if scales is None else scales.shape}.")
            self._scales = scales.astype(np.float32)[:, :, :, None, None]  # [2, L, H, 1, 1]
        else:
            self._scales = None

    def write(self, blocks: Sequence[int], start: int, new_keys: np.ndarray, new_values: np.ndarray) -> None:
        """Write positions start.. of one sequence; new_* are [layers, heads, tokens, head_dim]."""
        size = self.layout.block_size
        position, offset = start, 0
        count = new_keys.shape[2]
        while offset < count:
            block, within = blocks[position // size], position % size
            run = min(size - within, count - offset)
            self.keys[:, :, block, within:within + run] = self._encode(new_keys[:, :, offset:offset + run], 0)
            self.values[:, :, block, within:within + run] = self._encode(new_values[:, :, offset:offset + run], 1)
            position += run
            offset += run

    def _encode(self, values: np.ndarray, which: int) -> np.ndarray:
        if self._scales is None:
            return values
        return np.clip(np.rint(values / self._scales[which]), -127, 127).astype(np.int8)

    def gather(self, tables: Sequence[Sequence[int]], lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int]:
        """Dense FP32 (past_key, past_value) [layers, batch, heads, P, head_dim] and P, for sequences
        with these block tables and computed lengths; P >= 1 (an all-masked column when empty)."""
        lay = self.layout
        past = max(1, max(lengths, default=0))
        out_k = np.zeros((lay.layers, len(tables), lay.kv_heads, past, lay.head_dim), dtype=np.float32)
        out_v = np.zeros_like(out_k)
        for row, (table, length) in enumerate(zip(tables, lengths)):
            if length == 0:
                continue
            used = list(table[: -(-length // lay.block_size)])
            for source, out, which in ((self.keys, out_k, 0), (self.values, out_v, 1)):
                taken = source[:, :, used].reshape(lay.layers, lay.kv_heads, -1, lay.head_dim)[:, :, :length]
                if self._scales is not None:
                    out[:, row, :, :length] = taken * self._scales[which]
                else:
                    out[:, row, :, :length] = taken
        return out_k, out_v, past
