"""Precision plan -> CPU and GPU graphs, on tiny real ONNX graphs run by ONNX Runtime."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tiny_onnx_models import checked_model
from model_build.int8.qdq import activation_qparams, insert_qdq, qdq_summary, quantize_symmetric_per_channel
from model_build.int8.quant_types import ActivationScheme, CalibrationMethod, LayerKind, find_quantizable_layers
from model_build.int8.quantize import compute_activation_ranges, cpu_graph, cpu_session, gpu_graph, simulated_graph

RNG = np.random.default_rng(0)


def tiny_mlp():
    """x[N,16] -> MatMul(W1[16,32]) -> Add(b1) -> Relu -> Gemm(W2[32,8], b2) -> y[N,8]."""
    inits = [
        numpy_helper.from_array(RNG.normal(size=(16, 32)).astype(np.float32), "W1"),
        numpy_helper.from_array(RNG.normal(size=32).astype(np.float32), "b1"),
        numpy_helper.from_array(RNG.normal(size=(32, 8)).astype(np.float32), "W2"),
        numpy_helper.from_array(RNG.normal(size=8).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    return checked_model(graph, opset=17)


def tiny_embedder():
    table = RNG.normal(size=(300, 256)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed", axis=0)], "emb",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 4, 256])], [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(model, feeds):
    return cpu_session(model).run(None, feeds)[0]


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    model = tiny_mlp()
    path = tmp_path_factory.mktemp("mlp") / "fp32.onnx"
    onnx.save(model, str(path))
    layers = find_quantizable_layers(model)
    batches = [{"x": RNG.normal(size=(32, 16)).astype(np.float32)} for _ in range(4)]
    cache = path.parent / "ranges.json"
    ranges = compute_activation_ranges(path, layers, batches, CalibrationMethod.MINMAX, cache)
    return model, path, layers, ranges, cache, {"x": RNG.normal(size=(64, 16)).astype(np.float32)}


def test_finds_weighted_layers_with_their_output_channel_axes():
    layers = {l.name: l for l in find_quantizable_layers(tiny_mlp())}
    assert set(layers) == {"fc1", "fc2"}
    assert (layers["fc1"].channel_axis, layers["fc1"].activation_input) == (1, "x")
    assert (layers["fc2"].channel_axis, layers["fc2"].kind) == (1, LayerKind.COMPUTE)  # Gemm without transB
    (emb,) = find_quantizable_layers(tiny_embedder())
    assert (emb.kind, emb.weight, emb.parameters) == (LayerKind.EMBEDDING, "table", 300 * 256)


def test_per_channel_weights_are_symmetric_int8_within_half_a_step():
    w = RNG.normal(size=(16, 32)).astype(np.float32)
    q, scale = quantize_symmetric_per_channel(w, axis=1)
    assert q.dtype == np.int8 and scale.shape == (32,) and np.abs(q).max() <= 127
    assert np.all(np.abs(q * scale - w) <= scale / 2 + 1e-7)


def test_activation_qparams_symmetric_has_zero_point_zero_unsigned_covers_range():
    scale, zp = activation_qparams(-2.0, 4.0, ActivationScheme.STATIC_INT8_SYMMETRIC)
    assert zp.dtype == np.int8 and int(zp) == 0 and scale == pytest.approx(4.0 / 127)
    scale, zp = activation_qparams(-2.0, 4.0, ActivationScheme.STATIC_UINT8)
    assert zp.dtype == np.uint8 and scale == pytest.approx(6.0 / 255) and int(zp) == 85


def test_gpu_graph_has_qdq_only_on_int8_layers_zero_points_zero_and_fp16_elsewhere(mlp):
    model, _, layers, ranges, _, feeds = mlp
    fc1 = [l for l in layers if l.name == "fc1"]
    graph = gpu_graph(model, fc1, ranges)
    summary = qdq_summary(graph)
    assert summary["int8_layers"] == ["fc1"]
    assert summary["zero_points"] == [0]
    assert summary["float_initializer_types"] == ["FLOAT16"]  # biases, fc2's weight and the scales
    assert summary["quantize_nodes"] == 1 and summary["dequantize_nodes"] == 2  # activation Q/DQ + weight DQ
    assert graph.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # interface stays FP32
    assert next(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")) >= 19
    out, ref = run(graph, feeds), run(model, feeds)
    assert np.abs(out - ref).max() < 0.05 * np.abs(ref).max()


def test_gpu_graph_with_no_int8_layer_is_plain_fp16(mlp):
    model, _, _, ranges, _, _ = mlp
    summary = qdq_summary(gpu_graph(model, [], ranges))
    assert summary["int8_layers"] == [] and summary["quantize_nodes"] == 0


@pytest.mark.parametrize("scheme", [ActivationScheme.STATIC_UINT8, ActivationScheme.DYNAMIC_UINT8])
def test_cpu_graph_quantizes_exactly_the_plan_layers(mlp, scheme):
    model, path, layers, _, cache, feeds = mlp
    graph = cpu_graph(path, [l for l in layers if l.name == "fc2"], scheme, CalibrationMethod.MINMAX, cache)
    ops = {n.name: n.op_type for n in graph.graph.node}
    assert ops["fc1"] == "MatMul"  # kept in FP32, untouched
    assert {i.name for i in graph.graph.initializer} >= {"W1"}  # FP32 weight still there
    assert "fc2" not in ops or any(n.op_type in ("DequantizeLinear", "DynamicQuantizeLinear") for n in graph.graph.node)
    assert not any(i.startswith("W1") and i != "W1" for i in (x.name for x in graph.graph.initializer))
    out, ref = run(graph, feeds), run(model, feeds)
    assert np.abs(out - ref).mean() < 0.03 * np.abs(ref).mean()  # inputs beyond the calibrated range clip


def test_simulated_graph_has_the_numerics_of_the_int8_graph(mlp):
    """Same rounding as the Q/DQ graph (run unfused). ONNX Runtime's fused S8S8 kernels on AVX2
    without VNNI can saturate int16 partial sums, which is why the real graphs are validated too."""
    model, _, layers, ranges, _, feeds = mlp
    qdq = insert_qdq(model, layers, ActivationScheme.STATIC_INT8_SYMMETRIC, ranges)
    real = cpu_session(qdq, optimize=False).run(None, feeds)[0]
    fake = cpu_session(simulated_graph(model, layers, ActivationScheme.STATIC_INT8_SYMMETRIC, ranges), optimize=False).run(None, feeds)[0]
    assert np.abs(real - fake).max() < 1e-3


def test_embedding_table_is_stored_in_int8_rows_and_gathers_the_same_vectors():
    model = tiny_embedder()
    quantized = cpu_graph_from_model(model)
    assert quantized.ByteSize() < model.ByteSize() / 3
    ids = {"ids": RNG.integers(0, 300, size=(5, 4)).astype(np.int64)}
    out, ref = run(quantized, ids), run(model, ids)
    assert np.abs(out - ref).max() <= np.abs(ref).max() / 127


def cpu_graph_from_model(model):
    from model_build.int8.qdq import quantize_embedding_tables

    return quantize_embedding_tables(model, find_quantizable_layers(model))


def test_dynamic_quantization_depends_on_batch_mates_static_does_not(mlp):
    from model_build.int8.quantize import BATCH_INVARIANCE_ATOL, batch_invariance_error

    _, path, layers, _, cache, _ = mlp
    feeds = {"x": np.concatenate([RNG.normal(size=(8, 16)), 8 * RNG.normal(size=(8, 16))]).astype(np.float32)}
    static = cpu_session(cpu_graph(path, layers, ActivationScheme.STATIC_UINT8, CalibrationMethod.MINMAX, cache))
    dynamic = cpu_session(cpu_graph(path, layers, ActivationScheme.DYNAMIC_UINT8, CalibrationMethod.MINMAX, cache))
    assert batch_invariance_error(static, feeds) <= BATCH_INVARIANCE_ATOL
    assert batch_invariance_error(dynamic, feeds) > BATCH_INVARIANCE_ATOL
