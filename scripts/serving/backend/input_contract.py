"""What one request to a served ONNX model must look like, derived from the model itself.

Why: Triton checks names, data types and the fixed dims of every input, but not the VALUES, and
not whether the variable-length inputs of one request agree. ONNX Runtime then fails the whole
dynamic batch on one bad request (a token id outside the vocabulary makes the embedding `Gather`
fail), or, worse, answers it: a request whose `input_ids` and `attention_mask` disagree in length
is padded to its batch-mates' length and gets an answer that depends on who it was batched with.
So the `onnxruntime_cpu` backend checks every request against this contract BEFORE the batch is
formed into one framework call, and answers a bad request alone with INVALID_ARG (HTTP 400 /
gRPC INVALID_ARGUMENT); its batch-mates are computed exactly as if it had not been sent.

Where each rule comes from (one source of truth: the graph, not a typed copy):
- integer id ranges: every integer graph input that reaches the indices of a `Gather` (directly or
  through Cast/Identity/Reshape/Squeeze/Unsqueeze/Flatten) whose data is a constant table accepts
  ids in [0, rows - 1] of the smallest such table (the word-embedding table for `input_ids`: 30,522
  rows for MiniLM). Negative ids, which ONNX Runtime would silently read from the end, are refused.
- 0/1 masks: the input named by the backend's `sequence_length_input` parameter and every integer
  input whose name ends in `mask` (the Hugging Face convention), or exactly those the config's
  `mask_inputs` parameter lists where it is set (a brought model), hold only 0 and 1, with at least
  one 1 per row (an all-zero mask has no token to pool: the "embedding" would be all zeros).
- variable-length agreement: where the backend pads (inputs with `allow_ragged_batch`: token
  sequences), all inputs with a variable (-1) axis must have the same shape within one request (one
  mask entry per token), and that axis must hold at least one element and at most
  `max_sequence_length` (the length the model was exported and validated with), when known.
- largest dims: an input of the config's `max_input_dims` (variable axes that Triton batches by equal
  shapes, an image's height and width) may not exceed them in any axis.
- named axes: where nothing is padded, the axes the graph names alike (`sequence` of `input_ids` and of
  `attention_mask`) must be as long in one request: ONNX Runtime would fail on it (a 500 naming its
  broadcast) or, worse, broadcast a length-1 axis.
- floating-point inputs must be finite (serving.backend.checks).

Pure: numpy and (lazily) onnx; nothing here touches Triton, so it is tested without a server.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from contracts.onnx_graph import IdRange, gather_id_ranges, input_axis_names, shared_axis_places
from contracts.sequence_buckets import is_mask_input
from serving.backend.checks import INVALID_INPUT_PREFIX, non_finite_error

@dataclass(frozen=True)
class InputRule:
    """One input as the backend receives it: dims exclude the batch axis, -1 is variable."""

    name: str
    dims: tuple[int, ...]
    ids: IdRange | None = None
    binary_mask: bool = False
    #: The largest dims (without the batch axis) a request may send (`max_input_dims`), or None.
    max_dims: tuple[int, ...] | None = None
    #: The graph's symbolic name of each axis after the batch axis ("" where fixed or unnamed).
    axis_names: tuple[str, ...] = ()

    @property
    def variable(self) -> bool:
        return any(d < 0 for d in self.dims)


@dataclass(frozen=True)
class InputContract:
    """Every rule one request must meet; `problem` names the first one it breaks."""

    inputs: tuple[InputRule, ...]
    max_sequence_length: int | None = None
    reject_non_finite: bool = True
    #: Whether the backend pads the variable axes of a batch's requests to the longest (ragged inputs:
    #: token sequences), so a request's variable-length inputs must agree; False where Triton batches
    #: equal shapes only and nothing is padded.
    padded: bool = True

    def __post_init__(self) -> None:
        if self.max_sequence_length is not None and self.max_sequence_length < 1:
            raise ValueError(f"max_sequence_length = {self.max_sequence_length}: allowed >= 1 or None.")

    @functools.cached_property
    def shared_axes(self) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
        """(axis name, its (input, array axis) places) for each name the graph gives axes of two or more inputs
        (contracts.onnx_graph.shared_axis_places): what `named_axes_problem` compares, derived once (none for a
        model without such names: nothing per request)."""
        named = {r.name: r.axis_names for r in self.inputs if len(r.axis_names) == len(r.dims)}
        return tuple((name, tuple((input_name, axis + 1) for input_name, axis in places))  # + 1: the batch axis
                     for name, places in shared_axis_places(named))

    def problem(self, arrays: Mapping[str, np.ndarray]) -> str | None:
        """None when the request may be batched; else a one-line message for the caller."""
        for check in (self._shape_problem, self._value_problem):
            message = check(arrays)
            if message:
                return message
        return None

    def _shape_problem(self, arrays: Mapping[str, np.ndarray]) -> str | None:
        for rule in self.inputs:
            shape = tuple(arrays[rule.name].shape)
            if not shape or shape[0] == 0:
                return f"{INVALID_INPUT_PREFIX} '{rule.name}': shape {list(shape)} carries no rows; expected at least one."
            if len(shape) != 1 + len(rule.dims):  # Triton 2.51 drops a batch dimension of 0 (or of 2**32) it misreads
                expected = ["rows", *("n" if d < 0 else d for d in rule.dims)]
                return (f"{INVALID_INPUT_PREFIX} '{rule.name}': the backend received {len(shape)} dimensions {list(shape)}; "
                        f"expected {len(expected)}: {expected} (a batch dimension of at least 1 row, and the shape of the data sent).")
            empty = [axis for axis, d in enumerate(rule.dims, start=1) if d < 0 and shape[axis] == 0]
            if empty:
                return (f"{INVALID_INPUT_PREFIX} '{rule.name}': shape {list(shape)} has an empty variable axis; "
                        f"expected at least 1 element (a token, a pixel) along it per row.")
            if rule.max_dims is not None and any(n > m for n, m in zip(shape[1:], rule.max_dims)):
                return (f"{INVALID_INPUT_PREFIX} '{rule.name}': shape {list(shape)} is over its largest dims "
                        f"{['rows', *rule.max_dims]}; expected at most those per row (the model's max_input_dims, "
                        f"which its memory and max_batch_size were sized for): resize or split the input.")
        if not self.padded:
            return named_axes_problem(self.shared_axes, arrays)
        variable = [r for r in self.inputs if r.variable]
        shapes = {r.name: tuple(arrays[r.name].shape) for r in variable}
        if len(set(shapes.values())) > 1:
            listed = ", ".join(f"'{n}' {list(s)}" for n, s in shapes.items())
            return (f"{INVALID_INPUT_PREFIX}: the variable-length inputs of one request disagree in shape ({listed}); "
                    f"expected the same shape for all of them (one entry per token in each).")
        if self.max_sequence_length is not None:
            for rule in variable:
                shape = shapes[rule.name]
                longest = max(shape[axis] for axis, d in enumerate(rule.dims, start=1) if d < 0)
                if longest > self.max_sequence_length:
                    return (f"{INVALID_INPUT_PREFIX} '{rule.name}': {longest} tokens per row; expected at most "
                            f"{self.max_sequence_length} (the model's maximum sequence length: truncate or split the input).")
        return None

    def _value_problem(self, arrays: Mapping[str, np.ndarray]) -> str | None:
        for rule in self.inputs:
            array = arrays[rule.name]
            message = (id_range_problem(rule.name, array, rule.ids) if rule.ids else None) \
                or (mask_problem(rule.name, array) if rule.binary_mask else None) \
                or (non_finite_error(rule.name, array) if self.reject_non_finite else None)
            if message:
                return message
        return None


def named_axes_problem(shared_axes: Sequence[tuple[str, Sequence[tuple[str, int]]]],
                       arrays: Mapping[str, np.ndarray]) -> str | None:
    """The first symbolic axis the graph gives several inputs (InputContract.shared_axes) that one request
    sends at different lengths."""
    for axis_name, places in shared_axes:
        if len({arrays[name].shape[axis] for name, axis in places}) > 1:
            listed = ", ".join(f"'{n}' {list(arrays[n].shape)}" for n, _ in places)
            return (f"{INVALID_INPUT_PREFIX}: the inputs sharing the model's axis '{axis_name}' disagree in its length "
                    f"({listed}); expected the same length for all of them.")
    return None


def id_range_problem(name: str, array: np.ndarray, ids: IdRange) -> str | None:
    if array.dtype.kind not in "iub" or array.size == 0:
        return None
    outside = (array < ids.low) | (array > ids.high)
    if not outside.any():
        return None
    first = tuple(int(i) for i in np.argwhere(outside)[0])
    return (f"{INVALID_INPUT_PREFIX} '{name}': {int(outside.sum())} of {array.size} values outside [{ids.low}, {ids.high}] "
            f"(first: {int(array[first])} at {list(first)}); expected ids in that range ({ids.source}).")


def mask_problem(name: str, array: np.ndarray) -> str | None:
    if array.size == 0:
        return None
    not_binary = (array != 0) & (array != 1)
    if not_binary.any():
        first = tuple(int(i) for i in np.argwhere(not_binary)[0])
        return (f"{INVALID_INPUT_PREFIX} '{name}': {int(not_binary.sum())} values are neither 0 nor 1 (first: "
                f"{array[first].item()} at {list(first)}); expected a 0/1 mask (1 = real token, 0 = padding).")
    rows = array.reshape(array.shape[0], -1)
    empty = np.flatnonzero(~rows.any(axis=1))
    if empty.size:
        return (f"{INVALID_INPUT_PREFIX} '{name}': row {int(empty[0])} has no 1; expected at least one real token "
                f"(mask value 1) per row.")
    return None


# ------------------------------------------------------------------ derivation from the ONNX graph
def contract_from_onnx(
    model, inputs: Sequence[tuple[str, Sequence[int]]], mask_inputs: Iterable[str] | None = None,
    max_sequence_length: int | None = None, reject_non_finite: bool = True,
    max_dims: Mapping[str, Sequence[int]] | None = None, padded: bool = True,
) -> InputContract:
    """The contract for a served ONNX model.

    `inputs` are the config's (name, dims) pairs (what Triton delivers); `mask_inputs` names the
    0/1 masks exactly (the backend passes contracts.sequence_buckets.mask_input_names of its config);
    None: the `*mask` naming rule. `max_dims`: the config's max_input_dims; `padded`: whether the
    config's inputs are ragged (the backend pads them), see InputContract.
    """
    ranges = gather_id_ranges(model)
    elem_types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    axis_names = input_axis_names(model)
    masks = None if mask_inputs is None else frozenset(mask_inputs)
    rules = []
    for name, dims in inputs:
        integer = _is_integer_onnx_type(elem_types.get(name))
        rules.append(InputRule(
            name=name, dims=tuple(int(d) for d in dims), ids=ranges.get(name),
            binary_mask=integer and (is_mask_input(name) if masks is None else name in masks),
            max_dims=tuple(int(d) for d in max_dims[name]) if max_dims and name in max_dims else None,
            axis_names=axis_names.get(name, ()),
        ))
    return InputContract(tuple(rules), max_sequence_length, reject_non_finite, padded)


def _is_integer_onnx_type(elem_type: int | None) -> bool:
    import onnx

    return elem_type in {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
                         onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
                         onnx.TensorProto.BOOL}
