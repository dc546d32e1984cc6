"""The max_batch_size memory rule: pure choice, plus the real probe on a small real ONNX graph."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_build.sizing.batch_sizing import (
    MEMORY_BUDGET_FRACTION,
    BatchMeasurement,
    candidate_batch_sizes,
    choose_max_batch_size,
    model_memory_budget_bytes,
    probe_batch_memory,
    read_sizing_record,
    served_model_spec,
    size_model_batches,
)
from contracts.errors import ConfigError
from contracts.partition_plan import plan_partitions
from contracts.serving_spec import serving_spec_from_dict

PROJECT_ROOT = Path(__file__).resolve().parents[4]
MiB = 1024 * 1024


def measurements(*pairs):
    return [BatchMeasurement(b, int(mib * MiB)) for b, mib in pairs]


def test_candidates_are_powers_of_two_up_to_the_cap_and_the_cap():
    assert candidate_batch_sizes(64) == (1, 2, 4, 8, 16, 32, 64)
    assert candidate_batch_sizes(48) == (1, 2, 4, 8, 16, 32, 48)
    assert candidate_batch_sizes(1) == (1,)


def test_budget_is_70_percent_of_the_models_even_share_of_the_partition():
    assert MEMORY_BUDGET_FRACTION == 0.70
    assert model_memory_budget_bytes(1000 * MiB, 2) == int(1000 * MiB * 0.7 / 2)
    assert model_memory_budget_bytes(1000 * MiB, 2, instances=2) == int(1000 * MiB * 0.7 / 4)


def test_memory_binds_below_the_cap():
    decision = choose_max_batch_size("m", "p", measurements((1, 10), (2, 20), (4, 40), (8, 80)), 50 * MiB, cap=8)
    assert (decision.chosen, decision.bound_by) == (4, "memory")


def test_cap_binds_when_everything_fits():
    decision = choose_max_batch_size("m", "p", measurements((1, 10), (2, 11), (4, 12)), 50 * MiB, cap=4)
    assert (decision.chosen, decision.bound_by) == (4, "cap")


def test_a_batch_that_does_not_fit_stops_the_search_even_if_a_larger_one_measured_less():
    decision = choose_max_batch_size("m", "p", measurements((4, 10), (1, 10), (2, 60), (8, 30)), 50 * MiB, cap=8)
    assert decision.chosen == 1 and [m.batch_size for m in decision.measurements] == [1, 2, 4, 8]


def test_batch_one_over_budget_is_an_error_naming_the_partition_memory_the_split_and_every_way_out():
    with pytest.raises(ConfigError, match=r"needs 90.0 MiB at batch size 1 .* raise `partitions.p.memory_mb`, run fewer "
                                          r"instances \(`instance_count`\) or move the model"):
        choose_max_batch_size("m", "p", measurements((1, 90)), 50 * MiB, cap=8)
    # how the budget was split, as the build's success line says it (two models over a partition's share: a review)
    from model_build.sizing.batch_sizing import budget_split_text

    split = budget_split_text(100, 2, "p", 2)
    with pytest.raises(ConfigError, match=r"budget in partition 'p' is 50.0 MiB \(70% of 100 MiB / 2 model\(s\) in p / "
                                          r"2 instance\(s\)\)"):
        choose_max_batch_size("m", "p", measurements((1, 90)), 50 * MiB, cap=8, split=split)


def test_served_spec_carries_the_measured_choice():
    spec = serving_spec_from_dict({"models": {"m": {"recipe": "digit_cnn", "max_batch_size": 64}}})
    decision = choose_max_batch_size("m", "default", measurements((1, 1), (2, 1), (4, 99)), 50 * MiB, cap=64)
    assert served_model_spec(spec.model("m"), decision).max_batch_size == 2


@pytest.fixture(scope="module")
def wide_matmul_onnx(tmp_path_factory):
    """A real ONNX graph whose activations grow with the batch: [N, 512] x [512, 4096]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((512, 4096)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 512])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4096])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "wide.onnx"
    onnx.save(model, path)
    return path


def test_the_probe_measures_more_memory_for_a_larger_batch_in_a_fresh_process(wide_matmul_onnx):
    small = probe_batch_memory(wide_matmul_onnx, 1, 1, 16, "cpu")
    large = probe_batch_memory(wide_matmul_onnx, 1024, 1, 16, "cpu")
    # batch 1024 holds a 1024 x 4096 float32 output (16 MiB) that batch 1 does not
    assert large["peak_rss_growth_bytes"] - small["peak_rss_growth_bytes"] > 12 * MiB
    assert small["peak_rss_growth_bytes"] > 4 * MiB  # the 8 MiB of weights are counted


def test_the_probe_measures_a_brought_models_rows_at_its_max_dims(tmp_path):
    """A graph of variable height and width (recipe onnx_file's max_dims): measured at those dims, so a
    larger image costs more memory than a small one at the same batch."""
    from tiny_onnx_models import image_model, save

    onnx_path = save(image_model(spatial_output=True), tmp_path / "heat.onnx")
    small = probe_batch_memory(onnx_path, 8, 1, 16, "cpu", input_dims={"x": [3, 16, 16]})
    large = probe_batch_memory(onnx_path, 8, 1, 16, "cpu", input_dims={"x": [3, 512, 512]})
    # 8 x 3 x 512 x 512 float32 in (24 MiB) and 4 feature maps of that size on the way
    assert large["peak_rss_growth_bytes"] - small["peak_rss_growth_bytes"] > 24 * MiB


def test_sizing_writes_measurements_and_choice_and_reuses_them(wide_matmul_onnx, tmp_path):
    spec = serving_spec_from_dict({
        "partitions": {"p": {"compute_share": 50, "memory_mb": 512}},
        "models": {"m": {"recipe": "digit_cnn", "max_batch_size": 4, "partition": "p"}},
    })
    plan = plan_partitions(spec, cpu_count=2, gpu_present=False)
    out = tmp_path / "batch_sizing.json"
    decision = size_model_batches(spec.model("m"), spec, plan, wide_matmul_onnx, out, log=lambda line: None)
    written = json.loads(out.read_text())
    assert [m["batch_size"] for m in written["measurements"]] == [1, 2, 4]
    assert written["chosen_max_batch_size"] == decision.chosen == 4 and written["bound_by"] == "cap"
    assert written["probe"]["threads"] == plan.partition("p").intra_op_threads
    assert read_sizing_record(out).decision == decision

    def no_probe(*args):
        raise AssertionError("cached measurements should have been reused")

    again = size_model_batches(spec.model("m"), spec, plan, wide_matmul_onnx, out, log=lambda line: None, probe=no_probe)
    assert again == decision
    assert json.loads(out.read_text())["measurements"] == written["measurements"]  # reused as written, probe details too

    # a record of an older build (no `bound_by` yet) is measured again, not a failed build
    out.write_text(json.dumps({k: v for k, v in written.items() if k != "bound_by"}))
    lines = []
    measured = size_model_batches(spec.model("m"), spec, plan, wide_matmul_onnx, out, log=lines.append)
    assert (measured.chosen, measured.bound_by) == (decision.chosen, decision.bound_by)
    assert any("not reusing" in line and "measuring again" in line for line in lines), lines
    assert json.loads(out.read_text())["bound_by"] == "cap"


def test_the_sizing_record_is_reused_only_for_the_same_probe_and_a_broken_one_names_the_fix(tmp_path):
    from model_build.errors import BuildError

    assert read_sizing_record(tmp_path / "none.json") is None
    probe = {"onnx_sha256": "ab", "threads": 2, "variable_dim": 128, "device": "cpu"}
    record = {"model": "m", "partition": "p", "budget_bytes": 100, "cap": 2, "chosen_max_batch_size": 2, "bound_by": "cap",
              "probe": probe, "measurements": [{"batch_size": b, "memory_bytes": 10 * b, "probe": {"rss": b}} for b in (1, 2)]}
    (tmp_path / "batch_sizing.json").write_text(json.dumps(record))
    read = read_sizing_record(tmp_path / "batch_sizing.json")
    assert read.decision.chosen == 2 and read.reusable(probe) == {b: record["measurements"][b - 1] for b in (1, 2)}
    assert read.reusable({**probe, "threads": 1}) == {}
    (tmp_path / "batch_sizing.json").write_text(json.dumps({**record, "measurements": None}))
    with pytest.raises(BuildError, match=r"batch_sizing.json is not a batch sizing record .*`size-batches --force`"):
        read_sizing_record(tmp_path / "batch_sizing.json")


def test_progress_is_shown_only_when_a_reached_batch_size_is_not_cached():
    """An up-to-date build printed "[size-batches m] 1/7 .. 7/7" progress lines, then "reused cached
    measurements" (a review, 2026-12-07): the loop shows progress only when it will measure."""
    from model_build.sizing.batch_sizing import _probes_any

    sizes, budget = [1, 2, 4, 8], 100
    cached = {b: {"memory_bytes": 10 * b} for b in sizes}
    assert not _probes_any(sizes, cached, budget)                              # all cached
    assert _probes_any(sizes, {b: cached[b] for b in (1, 2)}, budget)          # 4 is reached and not cached
    over = {1: {"memory_bytes": 10}, 2: {"memory_bytes": 500}}                 # the loop stops at 2 (over budget)
    assert not _probes_any(sizes, over, budget)                                # so 4 and 8 are never measured
    assert _probes_any(sizes, {}, budget)


def test_a_measured_size_that_breaks_the_starvation_bound_names_the_budget_and_its_even_split(tmp_path):
    """32 images at max_dims do not fit a small partition: the measured max_batch_size (below the 24 + 8
    the priorities need) fails the build, saying how the budget was split, so that a user who added a
    model to the partition sees why another model's size fell."""
    from model_build.errors import BuildError
    from model_build.pipeline import BuildPaths
    from model_build.sizing.batch_sizes import apply_measured_batch_size
    from tiny_onnx_models import image_model, save

    import tomllib

    save(image_model(spatial_output=True), tmp_path / "artifacts" / "heat" / "fp32.onnx")
    served = tomllib.loads((PROJECT_ROOT / "model_repository" / "serving.toml").read_text())  # its priorities
    spec = serving_spec_from_dict({
        **served,
        "partitions": {"p": {"compute_share": 50, "memory_mb": 96}},
        "models": {"heat": {"recipe": "onnx_file", "max_batch_size": 32, "partition": "p",
                            "options": {"path": "heat.onnx", "max_dims": {"x": [3, 256, 256]}}},
                   "other": {"recipe": "onnx_file", "max_batch_size": 32, "partition": "p",
                             "options": {"path": "other.onnx"}}},
    })
    plan = plan_partitions(spec, cpu_count=2, gpu_present=False)
    with pytest.raises(BuildError) as refused:
        apply_measured_batch_size(spec.model("heat"), spec, plan, {"served_file": "fp32.onnx"}, BuildPaths(tmp_path))
    message = str(refused.value)
    assert "cannot guarantee progress for `priorities.batch`" in message
    assert "Here max_batch_size is not serving.toml's 32 but " in message
    assert "70% of partition p's 96 MiB split evenly over its 2 models ['heat', 'other']" in message
