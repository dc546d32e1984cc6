"""Outlier channels moved into weights (model_build.int8.smoothing), on tiny real ONNX graphs run by
ONNX Runtime: which activations qualify, the scales, exactness in FP32, and the INT8 error it removes."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tiny_onnx_models import checked_model
from model_build.errors import BuildError
from model_build.int8.quant_types import ActivationScheme, CalibrationMethod, find_quantizable_layers
from model_build.int8.quantize import compute_activation_ranges, cpu_graph, cpu_session
from model_build.int8.smoothing import (
    activation_channel_absmax, apply_smoothing, outlier_scales, plan_smoothing, smoothing_candidates,
)
from model_build.int8.variant import Int8Settings

RNG = np.random.default_rng(7)
OUTLIER = 5


def ffn(outlier_gain: float = 30.0, share_out_weight: bool = False):
    """x[N,16] -> fc_in(W_in[16,64]) -> Relu -> r -> fc_out(W_out[64,16]) -> + x -> y. Column OUTLIER of
    W_in is `outlier_gain` times larger, so channel OUTLIER of r is an outlier (as in MiniLM's FFN).
    x feeds fc_in AND the residual Add: smoothed, only fc_in may read the divided tensor."""
    w_in = RNG.normal(size=(16, 64)).astype(np.float32) * 0.3
    w_in[:, OUTLIER] *= outlier_gain
    w_out = RNG.normal(size=(64, 16)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("MatMul", ["x", "W_in"], ["h"], name="fc_in"),
        helper.make_node("Relu", ["h"], ["r"], name="act"),
        helper.make_node("MatMul", ["r", "W_out"], ["o"], name="fc_out"),
        helper.make_node("Add", ["o", "x"], ["y"], name="residual"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])]
    if share_out_weight:  # a second reader of W_out: its rows cannot be rescaled for fc_out alone
        nodes.append(helper.make_node("MatMul", ["r", "W_out"], ["o2"], name="fc_twin"))
        outputs.append(helper.make_tensor_value_info("o2", TensorProto.FLOAT, ["N", 16]))
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])], outputs,
                              [numpy_helper.from_array(w_in, "W_in"), numpy_helper.from_array(w_out, "W_out")])
    return checked_model(graph, opset=17)


def batches(n=6, rows=64, input_outlier: float = 1.0):
    """Random inputs; channel 2 of x `input_outlier` times larger (an outlier in the activation that
    fc_in shares with the residual Add, as a LayerNorm output is shared in MiniLM)."""
    out = []
    for _ in range(n):
        x = RNG.normal(size=(rows, 16)).astype(np.float32)
        x[:, 2] *= input_outlier
        out.append({"x": x})
    return out


def smoothed_ffn(model, calibration, threshold=3.0):
    candidates = smoothing_candidates(model, find_quantizable_layers(model))
    absmax = activation_channel_absmax(model, list(candidates), calibration)
    plan = plan_smoothing(candidates, absmax, threshold)
    return apply_smoothing(model, plan), plan, absmax


def test_scales_lift_only_channels_above_the_threshold():
    absmax = np.array([1.0, 1.0, 1.0, 1.0, 24.0])
    scales = outlier_scales(absmax, threshold=3.0)
    assert scales.tolist() == [1.0, 1.0, 1.0, 1.0, 8.0]
    assert outlier_scales(np.array([1.0, 1.0, 1.0, 19.0]), threshold=3.0).tolist() == [1.0, 1.0, 1.0, 8.0]  # 6.33 -> 8
    assert outlier_scales(np.array([1.0, 1.0, 1.0, 16.0]), threshold=3.0).tolist() == [1.0, 1.0, 1.0, 4.0]  # 5.33 -> 4
    assert outlier_scales(np.array([1.0, 1.2, 2.9]), threshold=3.0) is None  # nothing above 3x the median
    assert outlier_scales(np.array([1.0, 1.0, 4.5]), threshold=3.0) is None  # 1.5x over the line: under min_scale
    assert outlier_scales(np.array([1.0, 1.0, 4.5]), threshold=3.0, min_scale=1.0).tolist() == [1.0, 1.0, 2.0]  # powers of two
    assert outlier_scales(np.zeros(4), threshold=3.0) is None  # dead channels: no reference to measure against
    with pytest.raises(BuildError, match="must be > 1"):
        outlier_scales(absmax, threshold=1.0)


def readers(model):
    return {a: [l.name for l in ls] for a, ls in smoothing_candidates(model, find_quantizable_layers(model)).items()}


def test_activations_read_by_matmuls_with_their_own_weights_are_candidates():
    assert readers(ffn()) == {"x": ["fc_in"], "r": ["fc_out"]}  # x's residual reader does not count
    shared = ffn(share_out_weight=True)  # W_out read by fc_out and fc_twin: its rows cannot take one activation's scales twice
    assert readers(shared) == {"x": ["fc_in"]}


def test_a_weight_shared_by_two_activations_disqualifies_both_and_separate_weights_qualify():
    def two_readers(shared_weight: bool):
        w = [numpy_helper.from_array(RNG.normal(size=(8, 8)).astype(np.float32), n) for n in ("W", "V")]
        nodes = [helper.make_node("Relu", ["x"], ["a"], name="act_a"), helper.make_node("Sigmoid", ["x"], ["b"], name="act_b"),
                 helper.make_node("MatMul", ["a", "W"], ["ya"], name="mm_a"),
                 helper.make_node("MatMul", ["b", "W" if shared_weight else "V"], ["yb"], name="mm_b"),
                 helper.make_node("MatMul", ["a", "V" if shared_weight else "W2"], ["yc"], name="mm_c")]
        if not shared_weight:
            w.append(numpy_helper.from_array(RNG.normal(size=(8, 8)).astype(np.float32), "W2"))
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8]) for n in ("ya", "yb", "yc")], w)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    assert readers(two_readers(shared_weight=True)) == {}
    assert readers(two_readers(shared_weight=False)) == {"a": ["mm_a", "mm_c"], "b": ["mm_b"]}


def test_smoothed_graph_answers_as_fp32_and_its_activation_loses_the_outlier():
    model, calibration = ffn(), batches()
    smoothed, plan, absmax = smoothed_ffn(model, calibration)
    onnx.checker.check_model(smoothed, full_check=True)  # ONNX Runtime would run nodes out of order; the checker would not
    assert len(plan) == 1 and plan[0].layers == ("fc_out",) and plan[0].outlier_channels >= 1
    assert max(range(64), key=lambda j: plan[0].scales[j]) == OUTLIER
    assert all(float(np.log2(s)).is_integer() for s in plan[0].scales)
    feeds = {"x": RNG.normal(size=(32, 16)).astype(np.float32)}
    reference, out = cpu_session(model).run(None, feeds)[0], cpu_session(smoothed).run(None, feeds)[0]
    np.testing.assert_allclose(out, reference, rtol=1e-6, atol=1e-6)
    after = activation_channel_absmax(smoothed, [plan[0].smoothed_activation], calibration)
    before_max, after_max = absmax["r"].max(), after[plan[0].smoothed_activation].max()
    line = 3.0 * np.median(absmax["r"])
    assert after_max <= line * 1.5 and after_max < before_max / 4  # nearest power of two: within sqrt(2) of the line


def test_a_shared_activation_is_divided_only_for_its_matmul_readers():
    model, calibration = ffn(outlier_gain=1.0), batches(input_outlier=40.0)
    smoothed, plan, _ = smoothed_ffn(model, calibration)
    onnx.checker.check_model(smoothed, full_check=True)
    assert [p.activation for p in plan] == ["x"] and plan[0].layers == ("fc_in",)
    nodes = {n.name: n for n in smoothed.graph.node}
    assert nodes["fc_in"].input[0] == "x_smoothed" and list(nodes["residual"].input) == ["o", "x"]
    feeds = batches(n=1, rows=32, input_outlier=40.0)[0]
    np.testing.assert_allclose(cpu_session(smoothed).run(None, feeds)[0], cpu_session(model).run(None, feeds)[0], rtol=1e-6, atol=1e-5)


def test_static_int8_error_drops_when_the_outlier_moves_into_the_weights(tmp_path):
    model, calibration = ffn(), batches()
    smoothed, _, _ = smoothed_ffn(model, calibration)
    feeds = {"x": RNG.normal(size=(256, 16)).astype(np.float32)}
    reference = cpu_session(model).run(None, feeds)[0]
    errors = {}
    for name, graph in (("plain", model), ("smoothed", smoothed)):
        path = tmp_path / f"{name}.onnx"
        onnx.save(graph, str(path))
        layers = find_quantizable_layers(graph)
        compute_activation_ranges(path, layers, calibration, CalibrationMethod.MINMAX, tmp_path / f"{name}-ranges.json")
        int8 = cpu_graph(path, layers, ActivationScheme.STATIC_UINT8, CalibrationMethod.MINMAX, tmp_path / f"{name}-ranges.json")
        errors[name] = float(np.abs(cpu_session(int8).run(None, feeds)[0] - reference).mean())
    assert errors["smoothed"] < 0.6 * errors["plain"], errors


def test_no_outlier_means_no_rewrite():
    model = ffn(outlier_gain=1.0)
    _, plan, _ = smoothed_ffn(model, batches())
    assert plan == ()


@pytest.mark.parametrize("value, ok", [(0, True), (3.0, True), (1.0, False), (0.5, False), ("3", False)])
def test_outlier_threshold_setting_is_off_or_above_one(value, ok):
    if ok:
        assert Int8Settings.from_options({"outlier_threshold": value}).outlier_threshold == value
    else:
        with pytest.raises(BuildError, match="outlier_threshold"):
            Int8Settings.from_options({"outlier_threshold": value})


def test_the_build_quantizes_the_smoothed_graph_and_judges_against_the_original(tmp_path):
    """variant._prepare_run's wiring: calibration ranges belong to the smoothed graph (its tensor
    names), the reference comes from fp32.onnx itself, and turning the rewrite off removes the file."""
    from model_build.int8.calibration import CalibrationSet, Sampling
    from model_build.int8.sensitivity import Budget
    from model_build.int8.variant import SMOOTHED_FP32_ONNX, Int8Inputs, _prepare_run
    from model_build.onnx_export.validate import embedder_measurement

    model, calibration, evaluation = ffn(), batches(), batches(n=2)
    fp32_path = tmp_path / "fp32.onnx"
    onnx.save(model, str(fp32_path))
    inputs = Int8Inputs(model="ffn", workdir=tmp_path, fp32_path=fp32_path,
                        calibration=CalibrationSet(tuple(range(len(calibration))), Sampling.RANDOM, 0, {}),
                        calibration_batches=calibration, eval_batches=evaluation, measure=embedder_measurement,
                        budget=Budget("mean_cosine", 0.99, higher_is_better=True), latency_feeds={1: evaluation[0]}, atol=0.01)
    run = _prepare_run(inputs, Int8Settings())
    assert [s.layers for s in run.smoothing] == [("fc_out",)] and run.source_path == tmp_path / SMOOTHED_FP32_ONNX
    assert run.source_path.exists() and any(name.endswith("_smoothed") for name in run.ranges)
    original = cpu_session(fp32_path)
    np.testing.assert_array_equal(run.reference, np.concatenate([original.run(None, b)[0] for b in evaluation]))

    off = _prepare_run(inputs, Int8Settings(outlier_threshold=0))
    assert off.smoothing == () and off.source_path == fp32_path and not (tmp_path / SMOOTHED_FP32_ONNX).exists()
    assert not any(name.endswith("_smoothed") for name in off.ranges)
