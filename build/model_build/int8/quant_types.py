"""The vocabulary of quantization: schemes, calibration methods, and which layers can run in INT8.

Pure (no ONNX Runtime): `find_quantizable_layers` reads an `onnx.ModelProto` and returns frozen
descriptions that the sensitivity search, the precision plan and the graph rewrites share.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from model_build.errors import BuildError

#: Embedding tables smaller than this stay as they are: too small to matter for size or speed.
MIN_EMBEDDING_PARAMETERS = 65_536


class CalibrationMethod(str, Enum):
    """How a calibrated activation range is derived from the calibration activations."""

    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"


class ActivationScheme(str, Enum):
    """How an INT8 layer's input activation is quantized.

    `static_int8_symmetric` is TensorRT's scheme (calibrated, zero point 0) and always the GPU
    graph's; the CPU graph uses whichever of the others runs fastest in ONNX Runtime on the build
    machine (see `quantize.choose_cpu_scheme`).
    """

    STATIC_INT8_SYMMETRIC = "static_int8_symmetric"
    STATIC_UINT8 = "static_uint8"
    DYNAMIC_UINT8 = "dynamic_uint8"


class LayerKind(str, Enum):
    COMPUTE = "compute"  # Conv, Gemm, MatMul with a constant weight
    EMBEDDING = "embedding_table"  # Gather from a constant table (INT8 storage on CPU only)


class Precision(str, Enum):
    INT8 = "int8"
    FP32 = "fp32"
    FP16 = "fp16"


@dataclass(frozen=True)
class QuantizableLayer:
    """A node that can run in INT8: its activation input and its constant weight."""

    name: str
    op_type: str
    kind: LayerKind
    weight: str
    #: Axis of the weight that indexes output channels (per-channel scales run along it).
    channel_axis: int
    parameters: int
    activation_input: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise BuildError(f"a quantizable {self.op_type} node has no name; every layer needs one for the plan.")
        if self.kind is LayerKind.COMPUTE and not self.activation_input:
            raise BuildError(f"compute layer {self.name} needs an activation input.")


def find_quantizable_layers(model) -> tuple[QuantizableLayer, ...]:
    """Conv/Gemm/MatMul nodes whose weight is a constant, and large constant embedding tables.

    MatMuls between two activations (attention scores) are not candidates: there is no weight to
    shrink, and ONNX Runtime's CPU INT8 kernels do not speed them up; TensorRT's fused attention
    handles them in FP16.
    """
    graph = model.graph
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    layers = []
    for node in graph.node:
        inputs = list(node.input)
        if node.op_type == "Conv" and len(inputs) > 1 and inputs[1] in shapes and inputs[0] not in shapes:
            layers.append(QuantizableLayer(node.name, node.op_type, LayerKind.COMPUTE, inputs[1], 0, _count(shapes[inputs[1]]), inputs[0]))
        elif node.op_type == "Gemm" and len(inputs) > 1 and inputs[1] in shapes and inputs[0] not in shapes:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            layers.append(QuantizableLayer(node.name, node.op_type, LayerKind.COMPUTE, inputs[1], 0 if trans_b else 1,
                                           _count(shapes[inputs[1]]), inputs[0]))
        elif node.op_type == "MatMul" and inputs[1] in shapes and len(shapes[inputs[1]]) == 2 and inputs[0] not in shapes:
            layers.append(QuantizableLayer(node.name, node.op_type, LayerKind.COMPUTE, inputs[1], 1, _count(shapes[inputs[1]]), inputs[0]))
        elif (node.op_type == "Gather" and inputs[0] in shapes and len(shapes[inputs[0]]) == 2
              and _count(shapes[inputs[0]]) >= MIN_EMBEDDING_PARAMETERS
              and next((a.i for a in node.attribute if a.name == "axis"), 0) == 0):
            layers.append(QuantizableLayer(node.name, node.op_type, LayerKind.EMBEDDING, inputs[0], 0, _count(shapes[inputs[0]])))
    names = [layer.name for layer in layers]
    if len(set(names)) != len(names):
        raise BuildError(f"quantizable node names are not unique: {sorted(n for n in names if names.count(n) > 1)}.")
    return tuple(layers)


def _count(dims) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total
