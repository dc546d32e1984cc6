"""Right-padding of token rows, one rule for the tokenizer models, the perf suite and the reports.

Rows are padded with the tokenizer's [PAD] id (not 0: an id that is a real token would change
what a model without an attention mask computes), the mask with 0, token types with 0.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def pad_rows(rows: Sequence[Sequence[int]], pad_value: int = 0) -> np.ndarray:
    """int64 [len(rows), longest], each row right-padded with `pad_value`."""
    if not len(rows):
        raise ValueError("pad_rows needs at least one row.")
    out = np.full((len(rows), max(len(r) for r in rows)), pad_value, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def padded_token_tensors(encodings: Sequence, pad_id: int, names: Sequence[str] = ("input_ids", "attention_mask")) -> dict[str, np.ndarray]:
    """{name: int64 [rows, longest]} of `tokenizers` encodings for the requested tensor names, right-padded."""
    ids = pad_rows([e.ids for e in encodings], pad_id)
    mask = pad_rows([[1] * len(e.ids) for e in encodings], 0)
    types = pad_rows([e.type_ids for e in encodings], 0)
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {name: tensors[name] for name in names}
