"""Right-padding of token rows, one rule for the tokenizer models, the serving backend's batches, the
build's padding check of a brought model, the perf suite and the reports.

Rows are padded with the tokenizer's [PAD] id (not 0: an id that is a real token would change
what a model without an attention mask computes), the mask with 0, token types with 0.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from contracts.sequence_buckets import is_mask_input


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


#: A BERT-style encoder's token inputs, by Hugging Face's names (what its tokenizer emits): the ids,
#: padded with the [PAD] id; the 0/1 mask of real tokens and the token types, padded with 0.
INPUT_IDS_INPUT, ATTENTION_MASK_INPUT, TOKEN_TYPES_INPUT = "input_ids", "attention_mask", "token_type_ids"


def sequence_pad_value(name: str, pad_value: int, length_input: str | None) -> int:
    """What pads input `name` across the requests of a batch: token ids the [PAD] id (`pad_value`), the
    0/1 mask (`length_input`, the model's sequence_length_input, or an input named `*mask`) and token
    types 0 (a mask padded with a [PAD] id of 1 would let every row attend to its padding)."""
    masks = [length_input] if length_input else []
    return 0 if is_mask_input(name, masks) or name == TOKEN_TYPES_INPUT else pad_value


def concat_padded(arrays: Sequence[np.ndarray], pad_value: int = 0) -> np.ndarray:
    """Concatenate along axis 0, right-padding every other axis to the largest size seen: one
    array filled with `pad_value` and each request's rows copied in (one numpy call per request,
    not a padded copy of each and then a concatenation)."""
    if len(arrays) == 1:
        return arrays[0]
    target = tuple(max(a.shape[axis] for a in arrays) for axis in range(1, arrays[0].ndim))
    if all(a.shape[1:] == target for a in arrays):
        return np.concatenate(arrays, axis=0)
    out = np.full((sum(a.shape[0] for a in arrays), *target), pad_value, dtype=arrays[0].dtype)
    start = 0
    for a in arrays:
        out[(slice(start, start + a.shape[0]), *(slice(0, n) for n in a.shape[1:]))] = a
        start += a.shape[0]
    return out


def padded_token_tensors(encodings: Sequence, pad_id: int, names: Sequence[str] = (INPUT_IDS_INPUT, ATTENTION_MASK_INPUT)) -> dict[str, np.ndarray]:
    """{name: int64 [rows, longest]} of `tokenizers` encodings for the requested tensor names, right-padded."""
    make = {INPUT_IDS_INPUT: lambda: pad_rows([e.ids for e in encodings], pad_id),
            ATTENTION_MASK_INPUT: lambda: pad_rows([[1] * len(e.ids) for e in encodings], 0),
            TOKEN_TYPES_INPUT: lambda: pad_rows([e.type_ids for e in encodings], 0)}
    return {name: make[name]() for name in names}  # only the tensors asked for
