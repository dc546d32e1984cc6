"""Outlier channels moved from activations into weights before INT8 (SmoothQuant's migration, on
outlier channels only).

Why: a MatMul's activation is quantized with ONE scale per tensor, so a single channel far above the
others sets the step for all of them. MiniLM shows it in two places (per-channel max |x| over the
calibration texts): each block's FFN output input (layer.0: one channel at 24.7, median channel 1.67)
and each block's FFN input, the attention LayerNorm output (layer.1: 30.3 against 1.90). With
min-max calibration the other channels get about 17 of 256 levels. The precision plan had to keep
layer.0's FFN output in FP32 (alone in INT8: mean cosine 0.9947), and every layer INT8 missed the
0.99 budget (0.9887).

The rewrite: for an activation X read by MatMuls with weights W (K x N), X @ W = (X / s) @ (s W) for
any positive per-channel s (K). A `Mul(X, 1/s)` feeds those MatMuls only (a residual Add beside them
keeps reading X) and their weight rows are multiplied by s. Only channels above `threshold` x the
median channel get s > 1 (s = their max / (threshold x median), rounded to a power of two), so the
activation's range shrinks to about `threshold` x the median channel, while each weight row grows by
at most its own s; per-output-channel weight scales absorb that better than the per-tensor activation
scale absorbed the outlier. Powers of two make the FP32 products identical. SmoothQuant's
smooth-everything form (s = max|X|^a / max|W|^(1-a)) was measured worse here (every layer INT8: mean
cosine 0.977 at a = 0.5, 0.985 at a = 0.8): it grows every weight row.

Measured on the text encoder (Intel Xeon, family 6 model 167, ORT 1.32, 256 held-out texts, min-max
calibration on 256 training texts; docs/measurements/2026-12-05-intel-xeon/outlier-smoothing/):
every layer INT8, mean cosine 0.9887 without the rewrite; threshold 3 (ten activations: the FFN
input of blocks 0-5 and the FFN output input of blocks 0-3) 0.9958; 2 (18 activations) 0.9976; 4
0.9957; 6 0.9934. With 7-bit weights (the AVX2 path, forced): 0.9874 -> 0.9948. The plan then keeps no
layer in FP32 or FP16, and a call is 3-9% shorter in-process than with layer.0's FFN output in FP32.
Each smoothed activation costs one Mul by 1/s (`MIN_SCALE` skips those not worth it); written into
GELU's own 0.5 constant instead, it stopped ONNX Runtime's GELU fusion and the call got up to 21% slower.

Pure parts (`smoothing_candidates`, `outlier_scales`, `plan_smoothing`, `apply_smoothing`) read or
rewrite an `onnx.ModelProto`; `activation_channel_absmax` and `smoothed_source` run ONNX Runtime over
the calibration set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from model_build.errors import BuildError
from model_build.int8.qdq import copy_model, graph_names, unique_name
from model_build.int8.quant_types import LayerKind, QuantizableLayer
from model_build.int8.quantize import cpu_session

#: Default: channels above 3x the median channel's max |x| are scaled down to it (see the docstring).
DEFAULT_OUTLIER_THRESHOLD = 3.0
#: An activation whose largest channel is under this many times the threshold keeps its range: its
#: per-tensor step grows less than 2x (under one bit lost) and the Mul would cost more than it buys.
MIN_SCALE = 2.0


@dataclass(frozen=True)
class ChannelSmoothing:
    """One activation's per-channel divisor and the MatMul layers whose weight rows take it."""

    activation: str
    layers: tuple[str, ...]
    weights: tuple[str, ...]
    #: s per input channel (>= 1; 1 for every channel that is not an outlier).
    scales: tuple[float, ...]

    @property
    def outlier_channels(self) -> int:
        return sum(1 for s in self.scales if s > 1.0)

    @property
    def max_scale(self) -> float:
        return max(self.scales)

    @property
    def smoothed_activation(self) -> str:
        return f"{self.activation}_smoothed"

    def describe(self) -> dict:
        return {"activation": self.activation, "layers": list(self.layers), "outlier_channels": self.outlier_channels,
                "channels": len(self.scales), "max_scale": round(self.max_scale, 3)}


def smoothing_candidates(model, layers: Sequence[QuantizableLayer]) -> dict[str, tuple[QuantizableLayer, ...]]:
    """{activation: the MatMul layers that read it} for activations read by MatMul layers whose 2-D
    constant weights no other node reads: the divisor is undone entirely inside those weights. Other
    readers of the same activation (the residual Add beside a LayerNorm output) keep reading the
    original tensor. An activation with a MatMul reader whose weight is shared is left alone, as are
    Conv and Gemm layers."""
    weight_readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            weight_readers.setdefault(name, []).append(node.name)
    by_activation: dict[str, list[QuantizableLayer]] = {}
    for layer in layers:
        if layer.kind is LayerKind.COMPUTE and layer.op_type == "MatMul":
            by_activation.setdefault(layer.activation_input, []).append(layer)
    return {activation: tuple(readers) for activation, readers in by_activation.items()
            if all(weight_readers.get(l.weight, []) == [l.name] for l in readers)}


def outlier_scales(channel_absmax: np.ndarray, threshold: float, min_scale: float = MIN_SCALE) -> np.ndarray | None:
    """s per channel: max|x| / (threshold x median channel) rounded to the nearest power of two where
    that exceeds 1, else 1; None when no channel reaches `min_scale` (or the median channel is all
    zeros: nothing to measure against). Powers of two make x / s and s W exact in floating point, so
    the rewritten graph computes the very same products as the original."""
    absmax = np.asarray(channel_absmax, dtype=np.float64)
    if absmax.ndim != 1 or absmax.size == 0:
        raise BuildError(f"outlier scales need one max |x| per channel (a 1-D array), got shape {absmax.shape}.")
    if threshold <= 1.0:
        raise BuildError(f"outlier threshold {threshold!r} must be > 1 (a multiple of the median channel's max |x|).")
    reference = float(np.median(absmax)) * threshold
    if reference <= 0.0 or float(absmax.max()) < reference * max(min_scale, 1.0 + 1e-9):
        return None
    raw = np.maximum(1.0, absmax / reference)
    return np.exp2(np.round(np.log2(raw)))


def plan_smoothing(candidates: Mapping[str, Sequence[QuantizableLayer]], channel_absmax: Mapping[str, np.ndarray],
                   threshold: float) -> tuple[ChannelSmoothing, ...]:
    """One ChannelSmoothing per candidate activation that has an outlier channel, in candidate order."""
    planned = []
    for activation, readers in candidates.items():
        scales = outlier_scales(channel_absmax[activation], threshold)
        if scales is not None:
            planned.append(ChannelSmoothing(activation, tuple(l.name for l in readers), tuple(l.weight for l in readers),
                                            tuple(float(s) for s in scales)))
    return tuple(planned)


def apply_smoothing(model, smoothings: Sequence[ChannelSmoothing]):
    """A copy of `model` where each smoothed activation goes through `Mul(x, 1/s)` and each of its
    MatMuls' weight rows is multiplied by s: the same function, activations without their outliers."""
    from onnx import helper, numpy_helper

    smoothed = copy_model(model)
    graph = smoothed.graph
    initializers = {i.name: i for i in graph.initializer}
    taken = graph_names(graph)
    for smoothing in smoothings:
        scales = np.asarray(smoothing.scales, dtype=np.float32)
        for weight_name in smoothing.weights:
            weight = numpy_helper.to_array(initializers[weight_name])
            if weight.ndim != 2 or weight.shape[0] != scales.size:
                raise BuildError(f"{weight_name}: a {weight.shape} weight cannot take {scales.size} input-channel scales.")
            initializers[weight_name].CopyFrom(numpy_helper.from_array((weight * scales[:, None]).astype(weight.dtype), weight_name))
        divisor = unique_name(f"{smoothing.activation}_outlier_divisor", taken)
        graph.initializer.append(numpy_helper.from_array((1.0 / scales).astype(np.float32), divisor))
        readers = [n for n in graph.node if n.name in smoothing.layers and n.input[0] == smoothing.activation]
        if sorted(n.name for n in readers) != sorted(smoothing.layers):
            raise BuildError(f"{smoothing.activation}: expected its readers {sorted(smoothing.layers)}, found {sorted(n.name for n in readers)}.")
        first = min(i for i, n in enumerate(graph.node) if n.name in smoothing.layers)
        smoothed_name = unique_name(smoothing.smoothed_activation, taken)
        mul = helper.make_node("Mul", [smoothing.activation, divisor], [smoothed_name],
                               name=unique_name(f"{graph.node[first].name}_OutlierSmoothing", taken))
        graph.node.insert(first, mul)
        for node in readers:
            node.input[0] = smoothed_name
    return smoothed


def smoothed_source(model, layers: Sequence[QuantizableLayer], batches: Sequence[Mapping[str, np.ndarray]], threshold: float):
    """(graph to quantize, smoothings): `model` rewritten for the outliers `batches` show, or `model`
    itself when `threshold` is 0 or nothing qualifies. The build and the calibration study share it."""
    candidates = smoothing_candidates(model, layers) if threshold else {}
    if not candidates:
        return model, ()
    absmax = activation_channel_absmax(model, list(candidates), batches)
    smoothings = plan_smoothing(candidates, absmax, threshold)
    return (apply_smoothing(model, smoothings), smoothings) if smoothings else (model, ())


def activation_channel_absmax(model, activations: Sequence[str], batches: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Max |x| per channel (last axis) of each activation over `batches`, every position counted (the
    calibrator that sets the activation ranges sees padding too). The graph runs unoptimized, as the
    calibrator runs it, so every tensor named here exists."""
    import onnx

    probe = copy_model(model)
    known = {o.name for o in probe.graph.output}
    for name in activations:
        if name not in known:
            probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    if not batches:
        raise BuildError("measuring activation channels needs at least one calibration batch.")
    session = cpu_session(probe, optimize=False)
    names = [o.name for o in session.get_outputs()]
    absmax: dict[str, np.ndarray] = {}
    for batch in batches:
        outputs = dict(zip(names, session.run(None, dict(batch))))
        for name in activations:
            x = np.abs(outputs[name])
            channel = x.reshape(-1, x.shape[-1]).max(0)
            absmax[name] = channel if name not in absmax else np.maximum(absmax[name], channel)
    return absmax
