"""Facts read from an ONNX graph itself that the build and the serving backend both need.

Integer id ranges: every integer graph input that reaches the indices of a `Gather` (directly or
through Cast/Identity/Reshape/Squeeze/Unsqueeze/Flatten) whose data is a constant table accepts ids in
[0, rows - 1] of the smallest such table (the word-embedding table for `input_ids`: 30,522 rows for
MiniLM; RoBERTa's `token_type_ids`: 1 row). The backend refuses a request outside them
(serving.backend.input_contract); the build draws its synthetic inputs inside them
(model_build.sizing.memory_probe, recipe onnx_file), or a valid model failed its own build.

Axis names: the symbolic name (`dim_param`) of each axis after the batch axis of every graph input
("" where fixed or unnamed). Inputs whose axes the graph names alike must be as long within one request
where nothing is padded: the backend checks requests by them, the build checks `max_dims` by them.

Pure: reads an `onnx.ModelProto`'s fields; imports nothing of onnx itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

#: Ops that carry an index tensor on unchanged (values kept; shape or type may change).
INDEX_PASSTHROUGH_OPS = frozenset({"Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})


@dataclass(frozen=True)
class IdRange:
    """Inclusive range of ids an integer input may hold, and the graph fact it was derived from."""

    low: int
    high: int
    source: str

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"empty id range [{self.low}, {self.high}] from {self.source}.")


def gather_id_ranges(model) -> dict[str, IdRange]:
    """{graph input: the ids its Gather tables allow}, for inputs that index a constant table.

    `model` is an `onnx.ModelProto` (loaded without external data: only initializer dims are read).
    """
    graph = model.graph
    tables = {init.name: tuple(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            tables[node.output[0]] = tuple(node.attribute[0].t.dims)
    consumers: dict[str, list] = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, slot))
    ranges = {}
    for graph_input in graph.input:
        if graph_input.name in tables:
            continue
        rows = [(count, table) for count, table in _gathered_tables(graph_input.name, consumers, tables)]
        if rows:
            count, table = min(rows)
            ranges[graph_input.name] = IdRange(0, count - 1, f"the model's lookup table '{table}' has {count} rows")
    return ranges


def _gathered_tables(start: str, consumers, tables) -> Iterable[tuple[int, str]]:
    """(rows, table name) of every constant table that `start` indexes, following pass-through ops."""
    frontier, seen = [start], {start}
    while frontier:
        name = frontier.pop()
        for node, slot in consumers.get(name, ()):
            if node.op_type == "Gather" and slot == 1 and node.input[0] in tables:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                shape = tables[node.input[0]]
                if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                    yield shape[axis], node.input[0]
            elif node.op_type in INDEX_PASSTHROUGH_OPS and slot == 0:
                for out in node.output:
                    if out not in seen:
                        seen.add(out)
                        frontier.append(out)


def input_axis_names(model) -> dict[str, tuple[str, ...]]:
    """{graph input: the symbolic name of each axis after the batch axis, "" where fixed or unnamed}."""
    return {v.name: tuple(d.dim_param for d in v.type.tensor_type.shape.dim[1:]) for v in model.graph.input}


def shared_axis_places(axis_names: Mapping[str, Sequence[str]]) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """(axis name, its (input, axis index after the batch axis) places) for each name that `axis_names`
    (as `input_axis_names` gives them) holds for two or more inputs: the axes one request must send
    equally long. One place per input, its last axis so named."""
    places: dict[str, dict[str, int]] = {}
    for name, names in axis_names.items():
        for axis, axis_name in enumerate(names):
            if axis_name:
                places.setdefault(axis_name, {})[name] = axis
    return tuple((axis_name, tuple(where.items())) for axis_name, where in places.items() if len(where) > 1)


def zero_only_inputs(ranges: Mapping[str, IdRange]) -> tuple[str, ...]:
    """Of `gather_id_ranges`' inputs, those whose only valid id is 0 (they index a one-row table):
    synthetic inputs must not hold 1 there."""
    return tuple(sorted(name for name, ids in ranges.items() if ids.high < 1))
