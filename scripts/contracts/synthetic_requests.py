"""Valid synthetic rows for a model that nothing else describes: a brought ONNX file (recipe `onnx_file`).

The project's own models are measured with their own data (held-out digit images, long-tailed texts).
A brought model has none here, yet two places need rows it will accept: the build's batching check
(rows run alone and as one batch must agree, model_build.recipes.onnx_file) and `make perf`'s sweeps
(perf_analyzer's own random data fills integer inputs with values the backend refuses: a token id past
the vocabulary answers INVALID_ARG, and the sweep would measure error answers). One rule for both:
- floating-point inputs: standard-normal values;
- integer inputs a lookup table bounds (contracts.onnx_graph.gather_id_ranges): ids drawn per element
  over the table's rows, so rows differ in every input and a graph whose rows interact only through
  its ids shows it; other integers and booleans: 0 or 1;
- the 0/1 masks (the config's `mask_inputs`): all ones, every position a real one;
- a variable axis: `sample_dims` where given (the largest dims a request may send), else `variable_dim`.

Pure: numpy only.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

import numpy as np

from contracts.model_config import TensorSpec, row_dims
from contracts.onnx_graph import IdRange


def synthetic_rows(inputs: Sequence[TensorSpec], rows: int, seed: int, id_ranges: Mapping[str, IdRange],
                   masks: Collection[str] = (), sample_dims: Mapping[str, Sequence[int]] | None = None,
                   variable_dim: int = 16) -> dict[str, np.ndarray]:
    """{input: [rows, *dims] array} by the rule of this module's docstring. Raises ValueError for a
    string input (no rule makes a valid text for a graph nothing describes)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for tensor in inputs:
        if tensor.data_type == "TYPE_STRING":
            raise ValueError(f"input '{tensor.name}' is a string tensor; synthetic rows are numeric only.")
        shape = (rows, *row_dims(tensor, variable_dim, sample_dims))
        dtype = np.dtype(tensor.numpy_dtype)
        if dtype.kind == "f":
            feeds[tensor.name] = rng.standard_normal(shape).astype(dtype)
        elif tensor.name in masks:
            feeds[tensor.name] = np.ones(shape, dtype=dtype)
        else:
            ids = id_ranges.get(tensor.name) if dtype.kind != "b" else None
            low, high = (ids.low, ids.high) if ids else (0, 1)
            feeds[tensor.name] = rng.integers(low, high + 1, size=shape).astype(dtype)
    return feeds
