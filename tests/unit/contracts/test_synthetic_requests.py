"""contracts.synthetic_requests: valid rows for a model nothing else describes (the build's batching
check of a brought ONNX file, and `make perf`'s inputs for it)."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.model_config import TensorSpec
from contracts.onnx_graph import IdRange
from contracts.synthetic_requests import synthetic_rows

INPUTS = (TensorSpec("input_ids", "TYPE_INT64", (-1,)), TensorSpec("attention_mask", "TYPE_INT64", (-1,)),
          TensorSpec("flags", "TYPE_BOOL", (2,)), TensorSpec("x", "TYPE_FP32", (3, -1, -1)),
          TensorSpec("level", "TYPE_INT32", ()))


def test_ids_fall_in_their_table_masks_are_ones_and_other_integers_are_0_or_1():
    rows = synthetic_rows(INPUTS, 64, 0, {"input_ids": IdRange(0, 29, "a table of 30 rows")}, masks={"attention_mask"},
                          sample_dims={"x": [3, 5, 7]}, variable_dim=6)
    assert {name: a.shape for name, a in rows.items()} == {
        "input_ids": (64, 6), "attention_mask": (64, 6), "flags": (64, 2), "x": (64, 3, 5, 7), "level": (64,)}
    ids = rows["input_ids"]
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() <= 29 and len(np.unique(ids)) > 20  # rows differ
    assert (rows["attention_mask"] == 1).all()
    assert rows["flags"].dtype == np.bool_ and set(np.unique(rows["flags"])) == {False, True}
    assert set(np.unique(rows["level"])) == {0, 1}
    assert rows["x"].dtype == np.float32 and 0.8 < rows["x"].std() < 1.2
    again = synthetic_rows(INPUTS, 64, 0, {"input_ids": IdRange(0, 29, "t")}, masks={"attention_mask"},
                           sample_dims={"x": [3, 5, 7]}, variable_dim=6)
    assert all(np.array_equal(rows[k], again[k]) for k in rows)  # seeded


def test_a_string_input_has_no_synthetic_rule():
    with pytest.raises(ValueError, match="input 'TEXT' is a string tensor"):
        synthetic_rows((TensorSpec("TEXT", "TYPE_STRING", (1,)),), 2, 0, {})
