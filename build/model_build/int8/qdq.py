"""Graph surgery for explicit quantization: Q/DQ around chosen layers, INT8 weights, FP16 elsewhere.

Pure functions from `onnx.ModelProto` to a new `onnx.ModelProto` (the input is never changed), so
every rewrite is unit-tested on tiny graphs without running anything.

Why our own Q/DQ insertion rather than ONNX Runtime's quantizer for the GPU graph: TensorRT's
explicit-quantization scheme wants Q/DQ ONLY on the inputs of the layers that run in INT8
(activations: per-tensor, symmetric, zero point 0; weights: per output channel, symmetric, stored
as INT8 with a DequantizeLinear), biases left in floating point, and nothing else touched; the rest
of the graph then goes to FP16 and TensorRT builds it strongly typed. The same insertion, with the
weights fake-quantized in place (`fake_weights=True`), is the cheap simulation the sensitivity
search runs on CPU.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from model_build.errors import BuildError
from model_build.int8.quant_types import ActivationScheme, LayerKind, QuantizableLayer

#: Q/DQ with FP16 scales (needed once everything around them is FP16) exist from opset 19 on.
GPU_GRAPH_OPSET = 19
INT8_MAX = 127


def quantize_symmetric_per_channel(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """INT8 values in [-127, 127] and one FP32 scale per slice along `axis` (zero point 0)."""
    weight = np.asarray(weight, dtype=np.float32)
    axis = axis % weight.ndim
    reduce_axes = tuple(a for a in range(weight.ndim) if a != axis)
    amax = np.abs(weight).max(axis=reduce_axes) if reduce_axes else np.abs(weight)
    scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.rint(weight / scale.reshape(shape)), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


def dequantize_per_channel(q: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * q.ndim
    shape[axis % q.ndim] = -1
    return (q.astype(np.float32) * scale.reshape(shape)).astype(np.float32)


def activation_qparams(low: float, high: float, scheme: ActivationScheme) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero point) of a per-tensor activation quantizer for a calibrated range.

    Symmetric INT8 (TensorRT): scale = max(|low|, |high|) / 127, zero point 0. Unsigned (ONNX
    Runtime U8S8): the range is widened to include 0 and mapped onto 0..255.
    """
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    if scheme is ActivationScheme.STATIC_INT8_SYMMETRIC:
        amax = max(abs(low), abs(high))
        scale = amax / INT8_MAX if amax > 0 else 1.0
        return np.array(scale, dtype=np.float32), np.array(0, dtype=np.int8)
    if scheme is ActivationScheme.STATIC_UINT8:
        scale = (high - low) / 255.0 if high > low else 1.0
        zero_point = int(np.clip(np.rint(-low / scale), 0, 255))
        return np.array(scale, dtype=np.float32), np.array(zero_point, dtype=np.uint8)
    raise BuildError(f"activation scheme {scheme.value!r} has no calibrated parameters (it quantizes at run time).")


def copy_model(model):
    """A deep copy of an `onnx.ModelProto`: every rewrite here returns a new graph and leaves its input alone."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def graph_names(graph) -> set[str]:
    """Every name a graph already uses (tensors read or written, nodes, initializers, inputs): what
    `unique_name` must avoid when a rewrite adds nodes and tensors."""
    return ({t for n in graph.node for t in (*n.input, *n.output)} | {n.name for n in graph.node}
            | {i.name for i in graph.initializer} | {i.name for i in graph.input})


def unique_name(name: str, taken: set[str]) -> str:
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    taken.add(candidate)
    return candidate


def _weight_rewrite(layer: QuantizableLayer, q, scale, ndim: int, fake_weights: bool, before: list, new_inits: list,
                   taken: set) -> str:
    """The weight input of a compute layer in INT8: per-channel INT8 + DequantizeLinear (a node
    appended to `before`), or with `fake_weights` an FP32 initializer of the dequantized values.
    Returns the tensor name the layer now reads."""
    from onnx import helper, numpy_helper

    if fake_weights:
        name = unique_name(f"{layer.weight}_fakequant", taken)
        new_inits.append(numpy_helper.from_array(dequantize_per_channel(q, scale, layer.channel_axis), name))
        return name
    q_name, s_name, z_name, dq_name = (unique_name(f"{layer.weight}_{s}", taken) for s in ("int8", "scale", "zero_point", "dequantized"))
    new_inits += [numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale, s_name),
                  numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), z_name)]
    before.append(helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [dq_name],
                                   name=unique_name(f"{layer.name}/weight_DequantizeLinear", taken), axis=layer.channel_axis % ndim))
    return dq_name


def insert_qdq(
    model,
    layers: Sequence[QuantizableLayer],
    scheme: ActivationScheme,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    fake_weights: bool = False,
):
    """Return a copy of `model` in which each of `layers` runs in INT8.

    Compute layers: the activation input gets Q -> DQ (static schemes, from `ranges`) or
    DynamicQuantizeLinear -> DQ (dynamic), shared by every INT8 consumer of that tensor; the weight
    becomes INT8 per output channel + DequantizeLinear, or with `fake_weights` an FP32 initializer
    holding the dequantized values (same numbers, no extra node). Embedding tables: INT8 rows with
    one scale per row (`Gather` on INT8, then scale), or fake-quantized rows. Layers not listed are
    left exactly as they were.
    """
    from onnx import helper, numpy_helper

    model = copy_model(model)
    graph = model.graph
    nodes_by_name = {n.name: n for n in graph.node}
    initializers = {i.name: i for i in graph.initializer}
    taken = graph_names(graph)
    before: dict[str, list] = defaultdict(list)
    new_inits: list = []
    dq_of: dict[str, str] = {}
    replaced_nodes: dict[str, list] = {}
    wanted = {layer.name for layer in layers}
    missing = wanted - set(nodes_by_name)
    if missing:
        raise BuildError(f"layers {sorted(missing)} are not nodes of the graph.")
    order = {n.name: i for i, n in enumerate(graph.node)}
    for layer in sorted(layers, key=lambda l: order[l.name]):
        node = nodes_by_name[layer.name]
        weight = numpy_helper.to_array(initializers[layer.weight])
        q, scale = quantize_symmetric_per_channel(weight, layer.channel_axis)
        if layer.kind is LayerKind.EMBEDDING:
            replaced_nodes[node.name] = _embedding_rewrite(layer, node, q, scale, fake_weights, new_inits, taken)
            continue
        act = layer.activation_input
        if act not in dq_of:
            dq_of[act] = _activation_qdq(act, scheme, ranges, before[node.name], new_inits, taken)
        node.input[list(node.input).index(act)] = dq_of[act]
        node.input[list(node.input).index(layer.weight)] = _weight_rewrite(layer, q, scale, weight.ndim, fake_weights,
                                                                           before[node.name], new_inits, taken)
    rebuilt = []
    for node in graph.node:
        rebuilt += before.get(node.name, [])
        rebuilt += replaced_nodes.get(node.name, [node])
    del graph.node[:]
    graph.node.extend(rebuilt)
    graph.initializer.extend(new_inits)
    _drop_unused_initializers(graph)
    return model


def _activation_qdq(tensor, scheme, ranges, out_nodes, new_inits, taken) -> str:
    from onnx import helper, numpy_helper

    dq_name = unique_name(f"{tensor}_DequantizeLinear_Output", taken)
    if scheme is ActivationScheme.DYNAMIC_UINT8:
        q, s, z = (unique_name(f"{tensor}_dynamic_{p}", taken) for p in ("quantized", "scale", "zero_point"))
        out_nodes.append(helper.make_node("DynamicQuantizeLinear", [tensor], [q, s, z], name=unique_name(f"{tensor}_DynamicQuantizeLinear", taken)))
        out_nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [dq_name], name=unique_name(f"{tensor}_DequantizeLinear", taken)))
        return dq_name
    if ranges is None or tensor not in ranges:
        raise BuildError(f"no calibrated range for activation `{tensor}`: calibrate before quantizing statically.")
    scale, zero_point = activation_qparams(*ranges[tensor], scheme)
    s_name, z_name, q_name = (unique_name(f"{tensor}_{p}", taken) for p in ("scale", "zero_point", "QuantizeLinear_Output"))
    new_inits += [numpy_helper.from_array(scale, s_name), numpy_helper.from_array(zero_point, z_name)]
    out_nodes.append(helper.make_node("QuantizeLinear", [tensor, s_name, z_name], [q_name], name=unique_name(f"{tensor}_QuantizeLinear", taken)))
    out_nodes.append(helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [dq_name], name=unique_name(f"{tensor}_DequantizeLinear", taken)))
    return dq_name


def _embedding_rewrite(layer, node, q, scale, fake, new_inits, taken) -> list:
    """Gather on an INT8 table, then multiply by the gathered per-row scales (4x smaller table)."""
    from onnx import TensorProto, helper, numpy_helper

    if fake:
        name = unique_name(f"{layer.weight}_fakequant", taken)
        new_inits.append(numpy_helper.from_array(dequantize_per_channel(q, scale, 0), name))
        node.input[0] = name
        return [node]
    ids, out = node.input[1], node.output[0]
    q_name, s_name = unique_name(f"{layer.weight}_int8", taken), unique_name(f"{layer.weight}_row_scale", taken)
    new_inits += [numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale.reshape(-1, 1), s_name)]
    rows_q, rows_f, rows_s = (unique_name(f"{layer.name}/{p}", taken) for p in ("rows_int8", "rows_float", "rows_scale"))
    return [
        helper.make_node("Gather", [q_name, ids], [rows_q], name=unique_name(f"{layer.name}_int8", taken), axis=0),
        helper.make_node("Cast", [rows_q], [rows_f], name=unique_name(f"{layer.name}/Cast", taken), to=TensorProto.FLOAT),
        helper.make_node("Gather", [s_name, ids], [rows_s], name=unique_name(f"{layer.name}/scale_Gather", taken), axis=0),
        helper.make_node("Mul", [rows_f, rows_s], [out], name=unique_name(f"{layer.name}/scale_Mul", taken)),
    ]


def _drop_unused_initializers(graph) -> None:
    used = {t for n in graph.node for t in n.input} | {o.name for o in graph.output}
    keep = [i for i in graph.initializer if i.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


def quantize_embedding_tables(model, layers: Sequence[QuantizableLayer]):
    """INT8 embedding tables with per-row scales (CPU graph only; TensorRT keeps them FP16)."""
    tables = [l for l in layers if l.kind is LayerKind.EMBEDDING]
    return insert_qdq(model, tables, ActivationScheme.DYNAMIC_UINT8) if tables else copy_model(model)


def convert_to_fp16(model):
    """Everything in floating point outside Q/DQ goes to FP16; graph inputs/outputs stay FP32.

    Uses ONNX Runtime's bundled copy of onnxconverter-common's converter. The opset is raised to
    19 first, because Q/DQ with FP16 scales (so DequantizeLinear outputs FP16 directly and
    TensorRT fuses it into the INT8 layer, with no Cast between) need it.
    """
    import onnx
    from onnx import version_converter
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = copy_model(model)
    default = next((o for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if default is None or default.version < GPU_GRAPH_OPSET:
        model = version_converter.convert_version(model, GPU_GRAPH_OPSET)
    converted = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False)
    sort_topologically(converted.graph)  # the converter may place its input Casts after their consumers
    onnx.checker.check_model(converted)
    return converted


def sort_topologically(graph) -> None:
    """Reorder `graph.node` so every node comes after the producers of its inputs (stable)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            raise BuildError(f"graph has a cycle or a missing input around node {pending[0].name!r}.")
        ready_ids = {id(n) for n in ready}
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if id(n) not in ready_ids]
    copies = []
    for node in ordered:
        copy = type(node)()
        copy.CopyFrom(node)
        copies.append(copy)
    del graph.node[:]
    graph.node.extend(copies)


def qdq_summary(model) -> dict:
    """What a reviewer checks in a Q/DQ graph: which layers consume DQ outputs, the zero points,
    and the element types of the floating-point initializers."""
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    dq_outputs = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    zero_points = []
    for n in graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2 and n.input[2] in initializers:
            zero_points.extend(numpy_helper.to_array(initializers[n.input[2]]).ravel().tolist())
    consumers = sorted({n.name for n in graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                        and any(i in dq_outputs for i in n.input)})
    float_types = sorted({TensorProto.DataType.Name(i.data_type) for i in graph.initializer
                          if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)})
    return {"int8_layers": consumers, "zero_points": sorted(set(zero_points)), "float_initializer_types": float_types,
            "quantize_nodes": sum(n.op_type == "QuantizeLinear" for n in graph.node),
            "dequantize_nodes": sum(n.op_type == "DequantizeLinear" for n in graph.node)}
