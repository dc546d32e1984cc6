"""Sensitivity ranking, the fewest-layers selection, the cache and the precision plan."""
import json

import pytest

from model_build.errors import BudgetExceededError, BuildError
from model_build.int8.quant_types import ActivationScheme, LayerKind, Precision, QuantizableLayer
from model_build.int8.sensitivity import (
    CLASSIFIER_BUDGET, EMBEDDER_BUDGET, LayerSensitivity, Measurement, PlanLayer, SensitivityCache,
    choose_fewest_high_precision, measure_sensitivities, plan_from_selection, rank_by_sensitivity, sensitivity_key,
)


def test_rank_puts_the_most_harmful_layer_first_for_either_budget_direction():
    cosines = [LayerSensitivity("a", 0.999, 0.001), LayerSensitivity("b", 0.95, 0.05), LayerSensitivity("c", 0.99, 0.01)]
    assert [s.layer for s in rank_by_sensitivity(cosines, EMBEDDER_BUDGET)] == ["b", "c", "a"]
    drops = [LayerSensitivity("a", 0.0, 0.001), LayerSensitivity("b", 1.2, 0.01), LayerSensitivity("c", 0.3, 0.02)]
    assert [s.layer for s in rank_by_sensitivity(drops, CLASSIFIER_BUDGET)] == ["b", "c", "a"]


def test_rank_breaks_metric_ties_by_output_error():
    tied = [LayerSensitivity("x", 0.0, 0.001), LayerSensitivity("y", 0.0, 0.009), LayerSensitivity("z", 0.0, 0.004)]
    assert [s.layer for s in rank_by_sensitivity(tied, CLASSIFIER_BUDGET)] == ["y", "z", "x"]


def _cosine_model(damage):
    """Mean cosine = 1 - damage of every layer still in INT8 (additive toy model)."""
    calls = []

    def evaluate(high):
        calls.append(high)
        value = 1.0 - sum(d for name, d in damage.items() if name not in high)
        return Measurement(value, 1.0 - value)

    return evaluate, calls


def test_selection_keeps_the_fewest_layers_that_meet_the_budget():
    damage = {"ffn0": 0.006, "ffn1": 0.006, "q0": 0.004, "k0": 0.002}
    evaluate, calls = _cosine_model(damage)
    ranked = ["ffn0", "ffn1", "q0", "k0"]
    selection = choose_fewest_high_precision(ranked, evaluate, EMBEDDER_BUDGET, "toy")
    assert selection.high_precision == ("ffn0", "ffn1")  # k=1 gives 0.988, k=2 gives 0.994
    assert [k for k, _ in selection.trials] == [0, 1, 2]
    assert calls == [(), ("ffn0",), ("ffn0", "ffn1")]


def test_selection_keeps_nothing_when_all_int8_already_meets_the_budget():
    evaluate, _ = _cosine_model({"a": 0.001, "b": 0.001})
    assert choose_fewest_high_precision(["a", "b"], evaluate, EMBEDDER_BUDGET, "toy").high_precision == ()


def test_unreachable_budget_fails_naming_metric_value_and_budget():
    with pytest.raises(BudgetExceededError, match=r"mean_cosine >= 0\.99.*mean_cosine = 0\.5000"):
        choose_fewest_high_precision(["a"], lambda high: Measurement(0.5, 0.5), EMBEDDER_BUDGET, "toy")


def test_budget_check_message_names_metric_value_and_limit():
    with pytest.raises(BudgetExceededError, match=r"digits int8_mixed: top1_drop_points = 0\.8000 misses its budget \(top1_drop_points <= 0\.5\)"):
        CLASSIFIER_BUDGET.check(0.8, "digits int8_mixed")
    CLASSIFIER_BUDGET.check(0.5, "digits int8_mixed")  # on the limit is within budget


def _layers(*names):
    return [QuantizableLayer(n, "MatMul", LayerKind.COMPUTE, f"{n}_w", 1, 16, f"{n}_in") for n in names]


def test_scores_are_cached_by_key(tmp_path):
    layers = _layers("a", "b")
    measured = []

    def evaluate_single(layer):
        measured.append(layer.name)
        return Measurement(0.99, 0.01)

    key = sensitivity_key(model=b"graph", scheme="static_int8_symmetric", data="abc")
    first, n1 = measure_sensitivities(layers, evaluate_single, SensitivityCache(tmp_path / "c.json"), key)
    second, n2 = measure_sensitivities(layers, evaluate_single, SensitivityCache(tmp_path / "c.json"), key)
    assert (n1, n2) == (2, 0) and first == second and measured == ["a", "b"]
    other = sensitivity_key(model=b"graph", scheme="static_int8_symmetric", data="abd")
    _, n3 = measure_sensitivities(layers, evaluate_single, SensitivityCache(tmp_path / "c.json"), other)
    assert n3 == 2


def test_plan_records_sensitivity_and_precision_per_graph(tmp_path):
    layers = _layers("a", "b") + [QuantizableLayer("emb", "Gather", LayerKind.EMBEDDING, "table", 0, 70000)]
    scores = {n: LayerSensitivity(n, v, 1 - v) for n, v in (("a", 0.97), ("b", 0.999), ("emb", 0.998))}
    plan = plan_from_selection("m", EMBEDDER_BUDGET, layers, scores, cpu_high=["a"], gpu_high=["a", "b"],
                               cpu_scheme=ActivationScheme.DYNAMIC_UINT8, calibration={"method": "minmax"})
    assert plan.int8_layers("cpu") == ("b", "emb")
    assert plan.int8_layers("gpu") == ()  # embedding tables stay FP16 in the TensorRT graph
    data = json.loads(plan.write(tmp_path / "plan.json").read_text())
    assert [(l["name"], l["precision"]["cpu"], l["precision"]["gpu"]) for l in data["layers"]] == [
        ("a", "fp32", "fp16"), ("b", "int8", "fp16"), ("emb", "int8", "fp16")]
    assert data["layers"][0]["sensitivity"]["metric_value"] == 0.97


def test_plan_layer_rejects_impossible_precisions():
    s = LayerSensitivity("a", 1.0, 0.0)
    with pytest.raises(BuildError, match="GPU precision"):
        PlanLayer("a", "MatMul", LayerKind.COMPUTE, 1, s, Precision.INT8, Precision.FP32)
