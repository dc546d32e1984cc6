"""Outlier channels moved from activations into weights before INT8 (SmoothQuant's migration, on
outlier channels only).

Why: a MatMul's activation is quantized with ONE scale per tensor, so a single channel far above the
others sets the step for all of them. MiniLM's feed-forward output layers show it plainly (per-channel
max |x| over the calibration texts, layer.0: 24.7 in one channel of 1,536, median 1.67): with
min-max calibration the other 1,535 channels get about 17 of 256 levels. That layer was the one the
precision plan had to keep in FP32 (alone in INT8: mean cosine 0.9947), and every layer INT8 missed the
0.99 budget (0.9887).

The rewrite is exact in real arithmetic: for an activation X feeding MatMuls with weights W (K x N),
X @ W = (X / s) @ (s W) for any positive per-channel s (K). Only channels above `threshold` x the
median channel get s > 1 (s = their max / (threshold x median)), so the activation's range shrinks to
about `threshold` x the median channel, while each weight row grows by at most its own s; per-output
-channel weight scales absorb that better than the per-tensor activation scale absorbed the outlier.
SmoothQuant's smooth everything form (s = max|X|^a / max|W|^(1-a)) was measured worse here (all INT8:
mean cosine 0.977 at a = 0.5, 0.985 at a = 0.8) because it grows every weight row.

Measured on the text encoder (Intel Xeon, family 6 model 167, ORT 1.32, 256 held-out texts, min-max
calibration on 256 training texts; docs/measurements/2026-12-05-intel-xeon/outlier-smoothing/):
every layer INT8, mean cosine 0.9887 without the rewrite, 0.9910 at threshold 3 (the four FFN output
inputs of layers 0-3 smoothed), 0.9914 at 2 (seven activations), 0.9908 at 4, 0.9897 at 6. The plan
then keeps no layer in FP32 (it kept layer.0's FFN output: 0.9903), and the call is 5-9% shorter
in-process (1 and 2 threads, 1-32 texts). Each smoothed activation costs one Mul by 1/s (about 1% of a
call each; `MIN_SCALE` skips those not worth it); written into GELU's own 0.5 constant instead, it
stopped ONNX Runtime's GELU fusion and the call got up to 21% slower.

Pure parts (`smoothing_candidates`, `outlier_scales`, `plan_smoothing`, `apply_smoothing`) read or
rewrite an `onnx.ModelProto`; `activation_channel_absmax` runs ONNX Runtime over the calibration set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from model_build.errors import BuildError
from model_build.int8.quant_types import LayerKind, QuantizableLayer

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
    """{activation: its consumers} for activations read ONLY by MatMul layers with a 2-D constant weight
    used by no other node: there the divisor can be undone entirely inside the weights. An activation
    that also feeds anything else (a residual Add, LayerNorm outputs feeding Q, K, V and the residual)
    is left alone, as are Conv and Gemm layers."""
    graph = model.graph
    consumers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node.name)
    outputs = {o.name for o in graph.output}
    matmuls = {l.name: l for l in layers if l.kind is LayerKind.COMPUTE and l.op_type == "MatMul"}
    by_activation: dict[str, list[QuantizableLayer]] = {}
    for layer in matmuls.values():
        by_activation.setdefault(layer.activation_input, []).append(layer)
    candidates = {}
    for activation, readers in by_activation.items():
        if activation in outputs or sorted(consumers.get(activation, [])) != sorted(l.name for l in readers):
            continue
        if any(consumers.get(l.weight, []) != [l.name] for l in readers):
            continue
        candidates[activation] = tuple(readers)
    return candidates


def outlier_scales(channel_absmax: np.ndarray, threshold: float, min_scale: float = MIN_SCALE) -> np.ndarray | None:
    """s per channel: max|x| / (threshold x median channel) where that exceeds 1, else 1; None when no
    channel reaches `min_scale` (or the median channel is all zeros: nothing to measure against)."""
    absmax = np.asarray(channel_absmax, dtype=np.float64)
    if absmax.ndim != 1 or absmax.size == 0:
        raise BuildError(f"outlier scales need one max |x| per channel (a 1-D array), got shape {absmax.shape}.")
    if threshold <= 1.0:
        raise BuildError(f"outlier threshold {threshold!r} must be > 1 (a multiple of the median channel's max |x|).")
    reference = float(np.median(absmax)) * threshold
    if reference <= 0.0 or float(absmax.max()) < reference * max(min_scale, 1.0 + 1e-9):
        return None
    return np.maximum(1.0, absmax / reference)


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
    import onnx
    from onnx import helper, numpy_helper

    smoothed = onnx.ModelProto()
    smoothed.CopyFrom(model)
    graph = smoothed.graph
    initializers = {i.name: i for i in graph.initializer}
    for smoothing in smoothings:
        scales = np.asarray(smoothing.scales, dtype=np.float32)
        for weight_name in smoothing.weights:
            weight = numpy_helper.to_array(initializers[weight_name])
            if weight.ndim != 2 or weight.shape[0] != scales.size:
                raise BuildError(f"{weight_name}: a {weight.shape} weight cannot take {scales.size} input-channel scales.")
            initializers[weight_name].CopyFrom(numpy_helper.from_array((weight * scales[:, None]).astype(weight.dtype), weight_name))
        divisor = f"{smoothing.activation}_outlier_divisor"
        graph.initializer.append(numpy_helper.from_array((1.0 / scales).astype(np.float32), divisor))
        nodes = list(graph.node)
        first = min(i for i, n in enumerate(nodes) if n.name in smoothing.layers)
        mul = helper.make_node("Mul", [smoothing.activation, divisor], [smoothing.smoothed_activation],
                               name=f"{nodes[first].name}_OutlierSmoothing")
        graph.node.insert(first, mul)
        for node in graph.node:
            if node.name in smoothing.layers:
                node.input[0] = smoothing.smoothed_activation
    return smoothed


def activation_channel_absmax(model, activations: Sequence[str], batches: Sequence[Mapping[str, np.ndarray]],
                              session_factory: Callable) -> dict[str, np.ndarray]:
    """Max |x| per channel (last axis) of each activation over `batches`, every position counted (the
    calibrator that sets the activation ranges sees padding too)."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for name in activations:
        if name not in known:
            probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = session_factory(probe)
    names = [o.name for o in session.get_outputs()]
    absmax: dict[str, np.ndarray] = {}
    for batch in batches:
        outputs = dict(zip(names, session.run(None, dict(batch))))
        for name in activations:
            x = np.abs(outputs[name])
            channel = x.reshape(-1, x.shape[-1]).max(0)
            absmax[name] = channel if name not in absmax else np.maximum(absmax[name], channel)
    return absmax
