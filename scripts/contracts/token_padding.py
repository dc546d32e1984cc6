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
    if len(rows) == 1:  # a lone text: nothing to pad
        return np.asarray(rows, dtype=np.int64).reshape(1, -1)
    longest = max(len(r) for r in rows)
    # padded as Python lists, then ONE numpy call (the backend stub tokenizes right after a
    # framework call, where each numpy call costs 10-20 us: serving/backend/batch_execution.py)
    return np.array([[*row, *(pad_value,) * (longest - len(row))] for row in rows], dtype=np.int64)


#: The token-type input's name (Hugging Face's): padded with 0, like the mask.
TOKEN_TYPES_INPUT = "token_type_ids"


def padded_token_tensors(encodings: Sequence, pad_id: int, names: Sequence[str] = ("input_ids", "attention_mask")) -> dict[str, np.ndarray]:
    """{name: int64 [rows, longest]} of `tokenizers` encodings for the requested tensor names, right-padded."""
    make = {"input_ids": lambda: pad_rows([e.ids for e in encodings], pad_id),
            "attention_mask": lambda: pad_rows([[1] * len(e.ids) for e in encodings], 0),
            TOKEN_TYPES_INPUT: lambda: pad_rows([e.type_ids for e in encodings], 0)}
    return {name: make[name]() for name in names}  # only the tensors asked for
