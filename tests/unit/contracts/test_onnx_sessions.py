"""The served sessions leave out the graph fusions measured slower on CPU, and only there."""
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from contracts.onnx_sessions import CPU_PROVIDER, CPU_SLOWER_FUSIONS, CUDA_PROVIDER, disabled_fusions, served_session

HIDDEN = 16


def residual_layer_norm_model() -> onnx.ModelProto:
    """x + skip -> LayerNormalization: the pattern ONNX Runtime fuses into SkipLayerNormalization."""
    rng = np.random.default_rng(0)
    shape = ["batch", "tokens", HIDDEN]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "skip"], ["sum"]),
         helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12)],
        "residual_layer_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape), helper.make_tensor_value_info("skip", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(rng.normal(1, 0.1, HIDDEN).astype(np.float32), "gamma"),
         numpy_helper.from_array(rng.normal(0, 0.1, HIDDEN).astype(np.float32), "beta")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def optimized_ops(path, tmp_path, disabled) -> Counter:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=[CPU_PROVIDER], disabled_optimizers=disabled)
    return Counter(node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)


def test_cpu_sessions_leave_the_skip_layer_norm_fusion_out_and_gpu_sessions_keep_it():
    assert disabled_fusions() == disabled_fusions([CPU_PROVIDER]) == list(CPU_SLOWER_FUSIONS) == ["SkipLayerNormFusion"]
    assert disabled_fusions([(CUDA_PROVIDER, {"device_id": 0}), CPU_PROVIDER]) == []
    assert disabled_fusions([CUDA_PROVIDER]) == []


def test_the_disabled_name_is_one_onnx_runtime_knows(tmp_path):
    # An unknown name in `disabled_optimizers` is ignored silently; this graph fuses by default and must not here.
    path = tmp_path / "model.onnx"
    onnx.save(residual_layer_norm_model(), str(path))
    assert optimized_ops(path, tmp_path, [])["SkipLayerNormalization"] == 1
    assert optimized_ops(path, tmp_path, disabled_fusions()) == Counter({"Add": 1, "LayerNormalization": 1})


def test_served_session_answers_as_the_fused_graph_does_within_float_rounding(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(residual_layer_norm_model(), str(path))
    rng = np.random.default_rng(1)
    feeds = {name: rng.normal(0, 1, (3, 5, HIDDEN)).astype(np.float32) for name in ("x", "skip")}
    fused = ort.InferenceSession(str(path), providers=[CPU_PROVIDER]).run(None, feeds)[0]
    np.testing.assert_allclose(served_session(path, 1).run(None, feeds)[0], fused, rtol=1e-5, atol=1e-5)
