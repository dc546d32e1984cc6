"""Small real ONNX graphs (built with onnx.helper, run by the real ONNX Runtime) for tests of the
backend's input contract and failure isolation. Shared by unit tests and the served-model tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB, WIDTH = 10, 4


def _table() -> np.ndarray:
    return np.arange(VOCAB * WIDTH, dtype=np.float32).reshape(VOCAB, WIDTH) / 10.0


def checked_model(graph, opset: int = 17):
    """A model of `graph` at `opset` (IR version 8, what ONNX Runtime 1.x reads), through onnx.checker."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def masked_embedding_model(ids_through_mul: bool = False, mean_over_padding: bool = False):
    """ids INT64 [B, S], attention_mask INT64 [B, S] -> pooled FP32 [B, WIDTH]:
    sum over tokens of table[ids] * mask / max(1, sum(mask)).

    With `mean_over_padding`, the masked rows are averaged over all S positions (a mean pooling that
    forgets to divide by the mask's count): right-padding a row to its batch mates' length then changes
    its answer, so it must not be batched padded.

    With `ids_through_mul`, the ids are doubled before the lookup (Mul by 2): the input contract
    cannot see that range (it follows only pass-through ops), so ids >= VOCAB / 2 make ONNX
    Runtime fail at run time -- the case failure isolation exists for."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], [numpy_helper.from_array(_table(), "table"),
                        numpy_helper.from_array(np.array([2], np.int64), "two"),
                        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
                        numpy_helper.from_array(np.array([2], np.int64), "axis2"),
                        numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    ids = "input_ids"
    if ids_through_mul:
        nodes.append(helper.make_node("Mul", ["input_ids", "two"], ["doubled"]))
        ids = "doubled"
    nodes += [
        helper.make_node("Gather", ["table", ids], ["rows"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["rows", "mask3"], ["masked"]),
    ]
    if mean_over_padding:
        nodes.append(helper.make_node("ReduceMean", ["masked"], ["embedding"], axes=[1], keepdims=0))
    else:
        nodes += [helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
                  helper.make_node("ReduceSum", ["maskf", "axis1"], ["count"], keepdims=1),
                  helper.make_node("Max", ["count", "one"], ["safe_count"]),
                  helper.make_node("Div", ["summed", "safe_count"], ["embedding"])]
    graph = helper.make_graph(
        nodes, "masked_embedding",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", WIDTH])],
        inits,
    )
    return checked_model(graph, opset=17)


def reference_embedding(ids: np.ndarray, mask: np.ndarray, ids_through_mul: bool = False) -> np.ndarray:
    """What `masked_embedding_model` computes, in numpy (per row)."""
    rows = _table()[ids * 2 if ids_through_mul else ids]
    summed = (rows * mask[..., None]).sum(axis=1)
    return summed / np.maximum(1.0, mask.sum(axis=1, keepdims=True))


def save(model, path: Path) -> Path:
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def dense_model(seed: int = 0, kind: str = "dense"):
    """features FP32 [B, 3] -> scores FP32 [B, 2] = features @ W + b (W, b drawn from `seed`): a graph
    anyone could bring (recipe `onnx_file`). Other `kind`s are what that recipe must refuse:
    "fixed_batch" (batch axis 1, not dynamic), "variable_axis" (features [B, N], any N: N is summed
    to scores [B, 2]), "rows_interact" (scores [B, 3] = each row minus the batch's mean row, so a row's
    answer depends on its batch mates), "flat_rows" (scores [B*3, 1]: the features flattened, declared
    with a symbolic first axis that is not the batch), "batch_only" (scores [B]: the row sums),
    "nan_at_zero" (scores = features / their L2 norm, no epsilon: NaN for the all-zero warm-up row),
    "scalar_rows" (features [B] -> scores [B] = 2 x features: tensors of the batch axis only)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights, bias = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    inits = [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"), numpy_helper.from_array(np.ones((1, 2), np.float32), "twos")]
    batch, features, width = ("batch", 3, 2)
    batch_out = None
    if kind == "rows_interact":
        nodes = [helper.make_node("ReduceMean", ["features", "axis0"], ["mean"], keepdims=1),
                 helper.make_node("Sub", ["features", "mean"], ["scores"])]
        width = 3
    elif kind == "flat_rows":
        inits.append(numpy_helper.from_array(np.array([-1, 1], np.int64), "column"))
        nodes = [helper.make_node("Reshape", ["features", "column"], ["scores"])]
        batch_out, width = "flat", 1
    elif kind == "batch_only":
        nodes = [helper.make_node("ReduceSum", ["features", "axis1"], ["scores"], keepdims=0)]
    elif kind == "scalar_rows":
        inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two_f"))
        nodes = [helper.make_node("Mul", ["features", "two_f"], ["scores"])]
    elif kind == "nan_at_zero":
        nodes = [helper.make_node("ReduceL2", ["features", "axis1"], ["norm"], keepdims=1),
                 helper.make_node("Div", ["features", "norm"], ["scores"])]
        width = 3
    elif kind == "variable_axis":
        nodes = [helper.make_node("ReduceSum", ["features", "axis1"], ["total"], keepdims=1),
                 helper.make_node("Mul", ["total", "twos"], ["scores"])]
        features = "n"
    else:
        nodes = [helper.make_node("MatMul", ["features", "W"], ["projected"]),
                 helper.make_node("Add", ["projected", "b"], ["scores"])]
        batch = 1 if kind == "fixed_batch" else batch
    graph = helper.make_graph(
        nodes, f"{kind}_model", [helper.make_tensor_value_info("features", TensorProto.FLOAT,
                                                              [batch] if kind == "scalar_rows" else [batch, features])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT,
                                       [batch] if kind in ("batch_only", "scalar_rows") else [batch_out or batch, width])],
        inits)
    return checked_model(graph, opset=18)


def image_model(spatial_output: bool = False, seed: int = 0):
    """x FP32 [B, 3, H, W], any H and W (an exported detector's or OCR model's input) -> a 3x3 convolution
    (zero border) and ReLU, then either "pooled" FP32 [B, 4] (global average: fixed dims) or, with
    `spatial_output`, "heat" FP32 [B, 1, H, W] (a 1x1 convolution and a sigmoid: variable dims, like a
    text detector's probability map). Padding such an input with zeros to its batch mates' size would
    change both answers: these models must be batched by equal shapes (recipe onnx_file's max_dims)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv_w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv_b")]
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["features"])]
    if spatial_output:
        inits.append(numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "head_w"))
        nodes += [helper.make_node("Conv", ["features", "head_w"], ["logits"]),
                  helper.make_node("Sigmoid", ["logits"], ["heat"])]
        output = helper.make_tensor_value_info("heat", TensorProto.FLOAT, ["batch", 1, "height", "width"])
    else:
        nodes += [helper.make_node("GlobalAveragePool", ["features"], ["pooled_4d"]),
                  helper.make_node("Flatten", ["pooled_4d"], ["pooled"])]
        output = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph(nodes, "image_model", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", 3, "height", "width"])], [output], inits)
    return checked_model(graph, opset=17)


def ids_interact_model():
    """ids INT64 [B, 2] (table of 4 rows) -> scores FP32 [B, 2] = embedding(ids) summed over the ids,
    minus the batch's mean: rows interact only through an integer input (what a recommender exported
    with training-mode batch statistics does)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
             helper.make_node("ReduceSum", ["rows", "axis1"], ["summed"], keepdims=0),
             helper.make_node("ReduceMean", ["summed", "axis0"], ["mean"], keepdims=1),
             helper.make_node("Sub", ["summed", "mean"], ["scores"])]
    graph = helper.make_graph(nodes, "ids_interact", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 2])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 2])], inits)
    return checked_model(graph, opset=18)


def mask_weighted_model(mask_name: str = "pixel_mask", mask_type: int | None = None):
    """features FP32 [B, 3] and `mask_name` [B, 3] (INT64, or `mask_type`) -> scores FP32 [B, 3] =
    features * mask: a `*mask` input that is a weight (any value), not a 0/1 token mask."""
    import onnx
    from onnx import TensorProto, helper

    mask_type = TensorProto.INT64 if mask_type is None else mask_type
    nodes = [helper.make_node("Cast", [mask_name], ["weight"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["features", "weight"], ["scores"])]
    graph = helper.make_graph(nodes, "mask_weighted",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3]),
                               helper.make_tensor_value_info(mask_name, mask_type, ["batch", 3])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3])])
    return checked_model(graph, opset=18)


def one_row_table_model(rows: int = 1):
    """features FP32 [B, 3] and token_type_ids INT32 [B, 1] into a table of `rows` rows (RoBERTa's
    token types: 1 row, so 0 is the only valid id) -> scores FP32 [B, 3] = features + table[id]."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "type_table"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["type_table", "token_type_ids"], ["typed"], axis=0),
             helper.make_node("Squeeze", ["typed", "axis1"], ["type_rows"]),
             helper.make_node("Add", ["features", "type_rows"], ["scores"])]
    graph = helper.make_graph(nodes, "one_row_table",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3]),
                               helper.make_tensor_value_info("token_type_ids", TensorProto.INT32, ["batch", 1])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3])], inits)
    return checked_model(graph, opset=18)
