"""Recipe `onnx_file` (an ONNX file the user brings): the checks that keep a file the backend cannot
serve, or whose answers batching would change, out of the repository; the config it renders.
Real graphs (onnx.helper) in the real ONNX Runtime; no server."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from contracts.model_config import read_model_config
from contracts.serving_spec import ModelSpec, Variant, load_serving_spec
from model_build.errors import BuildError
from model_build.pipeline import build_fingerprint
from model_build.install import install_onnx_file
from model_build.recipes.onnx_file import build_onnx_file, check_onnx_file_options
from model_build.recipes.registry import recipe_for
from tiny_onnx_models import dense_model, ids_interact_model, image_model, mask_weighted_model, one_row_table_model, save

PROJECT_ROOT = Path(__file__).resolve().parents[4]


def _model(path: Path, **options) -> ModelSpec:
    return ModelSpec("mine", "onnx_file", partition="main", max_batch_size=32, instance_count=2,
                     options={"path": str(path), **options})


def test_a_dense_graph_is_copied_checked_and_rendered_with_the_served_models_batching(tmp_path):
    source = save(dense_model(), tmp_path / "mine.onnx")
    model = _model(source)
    record = build_onnx_file(model, tmp_path / "work")
    assert (tmp_path / "work" / record["served_file"]).read_bytes() == source.read_bytes()
    assert record["batching_check"]["max_abs_diff"] <= record["batching_check"]["tolerance"]
    assert record["tensors"]["inputs"] == {"features": ["TYPE_FP32", -1, 3]}

    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    serving = dataclasses.replace(serving, models=(*serving.models, model))
    install_onnx_file(model, serving, record, tmp_path / "work", tmp_path / "repo")
    config = read_model_config(tmp_path / "repo" / "mine")
    assert config.backend == "onnxruntime_cpu" and config.max_batch_size == 32
    assert [(t.name, list(t.dims)) for t in config.input] == [("features", [3])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("scores", [2])]
    assert config.dynamic_batching.priority_levels == len(serving.priorities)  # the served models' levels and policies
    assert len(config.instance_group) == 2 and config.model_warmup


def test_a_changed_file_under_the_same_name_is_a_new_build(tmp_path):
    path = save(dense_model(seed=0), tmp_path / "mine.onnx")
    recipe = recipe_for("onnx_file")
    before = build_fingerprint(recipe, _model(path))
    save(dense_model(seed=1), path)
    assert build_fingerprint(recipe, _model(path)) != before


@pytest.mark.parametrize("options, variant, expected", [
    ({"path": "x.onnx", "bogus": 1}, Variant.FP32, "unknown keys ['bogus']"),
    ({}, Variant.FP32, "options.path` = None: expected the path of an ONNX file"),
    ({"path": "no/such/file.onnx"}, Variant.FP32, "is not a file; expected an ONNX file"),
    ({"path": "SOURCE"}, Variant.INT8_MIXED, "serves the file as given; expected \"fp32\""),
    ({"path": "SOURCE", "batch_tolerance": 0}, Variant.FP32, "batch_tolerance` = 0: expected a number > 0"),
    ({"path": "SOURCE", "seed": -1}, Variant.FP32, "seed` = -1: expected an integer >= 0"),
])
def test_options_are_checked_before_anything_is_built(tmp_path, options, variant, expected):
    source = save(dense_model(), tmp_path / "mine.onnx")
    options = {k: (str(source) if v == "SOURCE" else v) for k, v in options.items()}
    with pytest.raises(BuildError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        check_onnx_file_options(ModelSpec("mine", "onnx_file", variant=variant, options=options))


def test_a_relative_path_is_read_from_the_checkout(tmp_path):
    with pytest.raises(BuildError, match=str(PROJECT_ROOT / "models" / "absent.onnx")):
        check_onnx_file_options(ModelSpec("mine", "onnx_file", options={"path": "models/absent.onnx"}))


@pytest.mark.parametrize("kind, expected", [
    ("fixed_batch", r"expected a dynamic first \(batch\) axis"),
    ("variable_axis", r"`options.max_dims` has no entry for input 'features' of dims \[-1, -1\] \(variable axes after "
                      r"the batch axis\): expected its largest dims, e.g. features = \[N\]"),
    ("rows_interact", r"answers differently inside a batch of 4 than alone"),
    # a flattened output under a symbolic first axis: split per request, each would get others' rows
    ("flat_rows", r"output 'scores' has shape \[12, 1\] for 4 input row\(s\): its first axis is not the batch"),
    # the load's warm-up (zeros) would be answered with an error: the load fails (and can crash Triton)
    ("nan_at_zero", r"Triton's warm-up request at load \(every input zeros\) gets an answer that cannot be served: "
                    r"output 'scores' holds NaN or Inf values"),
])
def test_graphs_the_backend_cannot_serve_as_they_are_fail_the_build_with_the_reason(tmp_path, kind, expected):
    source = save(dense_model(kind=kind), tmp_path / f"{kind}.onnx")
    with pytest.raises(BuildError, match=expected):
        build_onnx_file(_model(source), tmp_path / "work")


def test_the_batching_check_compares_every_row_alone_with_the_batch(tmp_path):
    """A graph whose rows interact (each row minus the batch mean) answers a lone row with zeros."""
    import onnxruntime as ort

    from model_build.recipes.onnx_file import batching_error, split_rows

    session = ort.InferenceSession(str(save(dense_model(kind="rows_interact"), tmp_path / "m.onnx")))
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert batching_error(session, split_rows({"features": rows})) == pytest.approx(4.5)
    assert batching_error(session, split_rows({"features": rows[:1]})) == 0.0


def test_rows_that_interact_only_through_their_ids_are_found(tmp_path):
    """All-ones ids make every row alike, and batch statistics then change nothing: the check draws them."""
    with pytest.raises(BuildError, match="answers differently inside a batch of 4 than alone"):
        build_onnx_file(_model(save(ids_interact_model(), tmp_path / "ids.onnx")), tmp_path / "work")


def test_mask_inputs_are_exactly_those_named_and_reach_the_config(tmp_path):
    """A brought graph's `pixel_mask` is a weight (any value): not a 0/1 mask unless options.mask_inputs says
    so; the backend reads the config's `mask_inputs` parameter, and warm-up fills only those with ones."""
    from contracts.model_config import config_parameters
    from contracts.sequence_buckets import mask_input_names

    source = save(mask_weighted_model(), tmp_path / "weighted.onnx")
    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    for masks, expected in (([], frozenset()), (["pixel_mask"], frozenset({"pixel_mask"}))):
        model = _model(source, **({"mask_inputs": masks} if masks else {}))
        record = build_onnx_file(model, tmp_path / "work")
        install_onnx_file(model, dataclasses.replace(serving, models=(*serving.models, model)), record,
                          tmp_path / "work", tmp_path / "repo")
        config = read_model_config(tmp_path / "repo" / "mine")
        assert mask_input_names([t.name for t in config.input], config_parameters(config)) == expected
        warm = config.model_warmup[0].inputs["pixel_mask"]
        assert warm.zero_data != bool(masks) and bool(warm.input_data_file) == bool(masks)
    with pytest.raises(BuildError, match=r"mask_inputs`: \['features'\] are not integer or boolean inputs"):
        build_onnx_file(_model(source, mask_inputs=["features"]), tmp_path / "work")


def test_a_graph_with_external_data_is_served_as_one_file_and_its_data_is_fingerprinted(tmp_path):
    import onnx

    source = tmp_path / "ext" / "model.onnx"
    source.parent.mkdir()
    onnx.save(dense_model(), str(source), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    model = _model(source)
    record = build_onnx_file(model, tmp_path / "work")
    assert record["source"]["external_data"] == {"weights.bin": record["source"]["external_data"]["weights.bin"]}
    served = onnx.load(str(tmp_path / "work" / record["served_file"]), load_external_data=False)
    assert not any(t.external_data for t in served.graph.initializer)  # self-contained
    before = build_fingerprint(recipe_for("onnx_file"), model)
    onnx.save(dense_model(seed=5), str(source), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert build_fingerprint(recipe_for("onnx_file"), model) != before


def test_a_file_that_is_not_onnx_is_refused_with_its_own_path(tmp_path):
    source = tmp_path / "weights.pt"
    source.write_bytes(b"not a protobuf")
    with pytest.raises(BuildError, match=str(source)):
        build_onnx_file(_model(source), tmp_path / "work")


def test_ids_of_a_one_row_table_are_drawn_as_0_by_the_checks_and_the_memory_probe(tmp_path):
    """RoBERTa's token types index a table of 1 row: synthetic ids of 1 failed a valid model's build, and
    would have failed its memory sizing (a review, 2026-12-07)."""
    from model_build.sizing.batch_sizing import probe_batch_memory

    source = save(one_row_table_model(), tmp_path / "types.onnx")
    record = build_onnx_file(_model(source), tmp_path / "work")
    assert record["batching_check"]["max_abs_diff"] <= record["batching_check"]["tolerance"]
    measured = probe_batch_memory(source, batch=4, threads=1, variable_dim=1, device="cpu")
    assert measured["batch_size"] == 4 and measured["peak_rss_growth_bytes"] > 0


def test_a_type_the_config_cannot_declare_is_refused_naming_the_users_file(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "int16",
                              [helper.make_tensor_value_info("x", TensorProto.INT16, ["batch", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT16, ["batch", 2])])
    source = tmp_path / "int16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(source))
    with pytest.raises(BuildError) as refused:
        build_onnx_file(_model(source), tmp_path / "work")
    assert f"{source}: tensor `x` has unsupported type INT16." in str(refused.value)
    assert "fp32.onnx" not in str(refused.value) and "dynamic batch axis" not in str(refused.value)


def test_tensors_of_the_batch_axis_only_are_declared_1_with_a_reshape(tmp_path):
    """Triton 2.51 refuses a batched config tensor without dims (an argmax label of shape [batch]): it is
    declared dims [1] with `reshape { shape: [] }`, so the backend gets [batch] and clients [batch, 1]."""
    from contracts.model_config import tensor_specs_from_config

    source = save(dense_model(kind="batch_only"), tmp_path / "sums.onnx")
    model = _model(source)
    record = build_onnx_file(model, tmp_path / "work")
    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    install_onnx_file(model, dataclasses.replace(serving, models=(*serving.models, model)), record,
                      tmp_path / "work", tmp_path / "repo")
    config = read_model_config(tmp_path / "repo" / "mine")
    (scores,) = config.output
    assert list(scores.dims) == [1] and scores.HasField("reshape") and list(scores.reshape.shape) == []
    assert not config.input[0].HasField("reshape")  # features [batch, 3]: as it was
    assert tensor_specs_from_config(config)[1][0].dims == ()  # read back as the backend sees it


def test_variable_axes_with_max_dims_are_served_by_equal_shapes_checked_and_warmed_up_at_the_largest(tmp_path, capsys):
    """An image graph of any height and width: the build runs its checks at max_dims; the config keeps the
    variable axes without allow_ragged_batch (Triton then batches equal shapes only), tells the backend
    the largest dims and warms up at them; the request guard's bound is checked at them too."""
    from contracts.errors import ConfigError
    from contracts.model_config import request_input_bounds

    source = save(image_model(spatial_output=True), tmp_path / "heat.onnx")
    model = _model(source, max_dims={"x": [3, 24, 32]})
    record = build_onnx_file(model, tmp_path / "work")
    assert record["max_dims"] == {"x": [3, 24, 32]}
    # equal shapes weaken the starvation bound: the build says so
    assert "inputs ['x'] are batched by equal shapes" in capsys.readouterr().out
    assert record["tensors"]["outputs"] == {"heat": ["TYPE_FP32", -1, 1, -1, -1]}

    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    serving = dataclasses.replace(serving, models=(*serving.models, model))
    install_onnx_file(model, serving, record, tmp_path / "work", tmp_path / "repo")
    config = read_model_config(tmp_path / "repo" / "mine")
    assert [list(t.dims) for t in config.input] == [[3, -1, -1]] and not config.input[0].allow_ragged_batch
    assert [list(t.dims) for t in config.output] == [[1, -1, -1]]
    assert config.parameters["max_input_dims"].string_value == '{"x":[3,24,32]}'
    assert {tuple(w.inputs["x"].dims) for w in config.model_warmup} == {(3, 24, 32)}
    assert [b.bytes for b in request_input_bounds(config)] == [32 * 3 * 24 * 32 * 4]
    from contracts.starvation import served_model_facts  # no starvation bound, declared so (docs/priorities.md)
    facts = served_model_facts(tmp_path / "repo" / "mine" / "config.pbtxt")
    assert facts.equal_shape_inputs == ("x",) and facts.equal_shapes_declared

    small = dataclasses.replace(serving, server=dataclasses.replace(serving.server, max_input_bytes=100_000))
    with pytest.raises(ConfigError, match=r"input 'x': \[32,3,24,32\] of FP32 needs 294,912 bytes"):
        install_onnx_file(model, small, record, tmp_path / "work", tmp_path / "repo2")


@pytest.mark.parametrize("max_dims, expected", [
    ({"x": [3, 24, 32], "y": [1]}, r"names 'y', which is not an input of the graph; expected some of \['x'\]"),
    ({"x": [4, 24, 32]}, r"gives 'x' dims \[4, 24, 32\]; expected 3 dims agreeing with the graph's fixed ones \[3, N, N\]"),
    ({"x": [3, 24]}, r"gives 'x' dims \[3, 24\]; expected 3 dims"),
])
def test_max_dims_must_cover_exactly_the_variable_inputs_and_agree_with_the_fixed_dims(tmp_path, max_dims, expected):
    source = save(image_model(), tmp_path / "pooled.onnx")
    with pytest.raises(BuildError, match=expected):
        build_onnx_file(_model(source, max_dims=max_dims), tmp_path / "work")


@pytest.mark.parametrize("max_dims", [{"x": [3, 0, 4]}, {"x": "3x24x32"}, [3, 24, 32], {"x": [3, True, 4]}])
def test_max_dims_of_the_wrong_form_are_refused_before_anything_is_built(tmp_path, max_dims):
    source = save(image_model(), tmp_path / "pooled.onnx")
    with pytest.raises(BuildError, match=r"options.max_dims` = .*expected a table of input name -> the largest dims"):
        check_onnx_file_options(_model(source, max_dims=max_dims))


def test_token_sequences_with_a_declared_mask_are_padded_across_a_batch_after_the_build_checked_it(tmp_path):
    """A brought text encoder ([batch, N] ids and a 0/1 mask named in mask_inputs): served like the
    project's own, texts of any length padded to their batch's longest (ragged inputs, the mask as the
    sequence_length_input, max_dims as the longest length), once the build saw that padding rows of
    different lengths leaves each row's answer as it is alone."""
    from tiny_onnx_models import masked_embedding_model

    source = save(masked_embedding_model(), tmp_path / "encoder.onnx")
    model = _model(source, mask_inputs=["attention_mask"], max_dims={"input_ids": [12], "attention_mask": [12]})
    record = build_onnx_file(model, tmp_path / "work")
    assert record["padded_sequences"] == {"mask": "attention_mask", "max_length": 12, "buckets": [12]}
    assert record["batching_check"]["max_abs_diff"] < 1e-6

    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    serving = dataclasses.replace(serving, models=(*serving.models, model))
    install_onnx_file(model, serving, record, tmp_path / "work", tmp_path / "repo")
    config = read_model_config(tmp_path / "repo" / "mine")
    assert [(list(t.dims), t.allow_ragged_batch) for t in config.input] == [([-1], True), ([-1], True)]
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    assert parameters["sequence_length_input"] == "attention_mask" and parameters["max_sequence_length"] == "12"
    assert parameters["sequence_buckets"] == "12"  # contracts.sequence_buckets' defaults: 16, 24, ... up to 128 for 128
    assert "max_input_dims" not in parameters
    # warmed up at 12 tokens: the default 16 would be refused by the backend, and the load with it
    assert {tuple(w.inputs["input_ids"].dims) for w in config.model_warmup} == {(12,)}
    # the same graph without a declared mask: equal lengths only, nothing padded
    unmasked = build_onnx_file(_model(source, max_dims={"input_ids": [12], "attention_mask": [12]}), tmp_path / "w2")
    assert unmasked["padded_sequences"] is None


def test_a_sequence_model_whose_answer_moves_with_padding_is_refused_padded_batching(tmp_path):
    from tiny_onnx_models import masked_embedding_model

    source = save(masked_embedding_model(mean_over_padding=True), tmp_path / "encoder.onnx")
    model = _model(source, mask_inputs=["attention_mask"], max_dims={"input_ids": [12], "attention_mask": [12]})
    with pytest.raises(BuildError, match=r"a row answers differently inside a batch of 4 than alone"):
        build_onnx_file(model, tmp_path / "work")
    with pytest.raises(BuildError, match=r"the token sequences \{'input_ids': 12, 'attention_mask': 8\}.*one longest length"):
        build_onnx_file(_model(source, mask_inputs=["attention_mask"], max_dims={"input_ids": [12], "attention_mask": [8]}),
                        tmp_path / "w2")


def test_max_dims_give_an_axis_the_graph_shares_one_length(tmp_path):
    """`a` and `b` share the graph's axis `seq`: the backend refuses a request whose lengths there differ, and
    Triton's warm-up runs at max_dims, so max_dims of 4 and 8 would fail the model's own load (a review)."""
    from onnx import TensorProto, helper

    from tiny_onnx_models import checked_model

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["a"], ["sa"], axes=[1], keepdims=1),
         helper.make_node("ReduceSum", ["b"], ["sb"], axes=[1], keepdims=1),
         helper.make_node("Concat", ["sa", "sb"], ["both"], axis=1)],
        "shared_axis", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq"]) for n in "ab"],
        [helper.make_tensor_value_info("both", TensorProto.FLOAT, ["batch", 2])])
    source = save(checked_model(graph, opset=12), tmp_path / "shared.onnx")
    with pytest.raises(BuildError, match=r"gives the axis 'seq' that the graph shares between \['a', 'b'\] the lengths "
                                         r"\{'a': 4, 'b': 8\}; expected one length"):
        build_onnx_file(_model(source, max_dims={"a": [4], "b": [8]}), tmp_path / "work")
    assert build_onnx_file(_model(source, max_dims={"a": [8], "b": [8]}), tmp_path / "ok")["max_dims"] == {"a": [8], "b": [8]}
