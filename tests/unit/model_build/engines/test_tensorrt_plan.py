"""TensorRT engine planning (pure) and the GPU-absent path (one line, no file)."""
from pathlib import Path

import pytest

from model_build.errors import BuildError
from model_build.engines.tensorrt import (
    EngineBuild, InputProfile, detect_tensorrt, plan_engine_builds, polygraphy_command, render_tensorrt_config,
    replay_command, run_tensorrt_step, split_feeds, trtexec_command,
)
from contracts.model_config import TensorSpec

TEXT_INPUTS = (TensorSpec("input_ids", "TYPE_INT64", (-1,)), TensorSpec("attention_mask", "TYPE_INT64", (-1,)))


def test_plan_has_one_strongly_typed_engine_per_gpu_graph_with_batch_and_sequence_profiles(tmp_path):
    (tmp_path / "fp16_gpu.onnx").write_bytes(b"x")
    (tmp_path / "int8_mixed_gpu.onnx").write_bytes(b"x")
    builds = plan_engine_builds("text_encoder", tmp_path, TEXT_INPUTS, max_batch_size=64, max_length=128)
    assert [b.precision for b in builds] == ["fp16", "int8_mixed"]
    ids = builds[1].profiles[0]
    assert (ids.minimum, ids.optimum, ids.maximum) == ((1, 1), (32, 64), (64, 128))
    assert builds[1].engine_path == tmp_path / "tensorrt" / "text_encoder_int8_mixed" / "1" / "model.plan"
    assert builds[0].timing_cache == builds[1].timing_cache  # one cache per model, reused


def test_plan_skips_missing_graphs_and_needs_a_max_length_for_dynamic_axes(tmp_path):
    assert plan_engine_builds("m", tmp_path, TEXT_INPUTS, 8, 128) == ()
    (tmp_path / "fp16_gpu.onnx").write_bytes(b"x")
    with pytest.raises(BuildError, match="no max length"):
        plan_engine_builds("m", tmp_path, TEXT_INPUTS, 8, None)


def test_commands_run_from_the_repository_root_and_create_the_engine_folder():
    from contracts.layout import ARTIFACTS_DIR

    workdir = ARTIFACTS_DIR / "digits_command_test"  # never created: commands are strings
    build = EngineBuild("digits", "int8_mixed", workdir / "int8_mixed_gpu.onnx", workdir / "tensorrt" / "digits_int8_mixed" / "1" / "model.plan",
                        workdir / "tensorrt" / "tensorrt_timing.cache", (InputProfile("image", (1, 1, 8, 8), (32, 1, 8, 8), (64, 1, 8, 8)),))
    trtexec = trtexec_command(build)
    assert trtexec.startswith("mkdir -p artifacts/digits_command_test/tensorrt/digits_int8_mixed/1 && trtexec ")
    assert "--onnx=artifacts/digits_command_test/int8_mixed_gpu.onnx" in trtexec and "--stronglyTyped" in trtexec
    assert "--minShapes=image:1x1x8x8" in trtexec and "--maxShapes=image:64x1x8x8" in trtexec
    assert "--timingCacheFile=artifacts/digits_command_test/tensorrt/tensorrt_timing.cache" in trtexec
    assert "--saveEngine=artifacts/digits_command_test/tensorrt/digits_int8_mixed/1/model.plan" in trtexec
    poly = polygraphy_command(build)
    assert poly.startswith("mkdir -p ") and "--strongly-typed" in poly and "--trt-max-shapes image:[64,1,8,8]" in poly
    replay = replay_command(build, 0.01)
    assert replay.startswith("polygraphy run artifacts/digits_command_test/tensorrt/digits_int8_mixed/1/model.plan --model-type engine --trt")
    assert "--load-inputs artifacts/digits_command_test/tensorrt/digits_int8_mixed/replay_inputs.json" in replay
    assert "<" not in replay  # no placeholder


def test_replay_inputs_are_cut_to_the_profile_maximum():
    import numpy as np

    feeds = [{"ids": np.arange(64).reshape(64, 1), "mask": np.ones((64, 1))}, {"ids": np.arange(10).reshape(10, 1), "mask": np.ones((10, 1))}]
    pieces = split_feeds(feeds, 24)
    assert [len(p["ids"]) for p in pieces] == [24, 24, 16, 10]
    assert np.concatenate([p["ids"] for p in pieces[:3]]).ravel().tolist() == list(range(64))
    with pytest.raises(BuildError, match=">= 1"):
        split_feeds(feeds, 0)


def test_profile_rejects_min_above_max():
    with pytest.raises(BuildError, match="min <= opt <= max"):
        InputProfile("x", (4,), (2,), (8,))


def test_tensorrt_config_is_a_gpu_plan():
    config = render_tensorrt_config("digits_int8_mixed", 64, [TensorSpec("image", "TYPE_FP32", (1, 8, 8))],
                                    [TensorSpec("probabilities", "TYPE_FP32", (10,))])
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 64 and config.name == "digits_int8_mixed"
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU and config.default_model_filename == "model.plan"


class _Spec:
    def __init__(self, name):
        self.name, self.max_batch_size = name, 64


class _Serving:
    models = (_Spec("digits"),)


def _write_tiny_gpu_graph(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Flatten", ["image"], ["probabilities"], name="flat")], "g",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 64])])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))


def _tree(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def test_without_a_gpu_the_step_prints_one_line_and_writes_nothing(tmp_path, capsys):
    availability = detect_tensorrt()
    if availability.available:
        pytest.skip("a GPU with TensorRT is present here: the GPU-absent path cannot be exercised")
    _write_tiny_gpu_graph(tmp_path / "digits" / "int8_mixed_gpu.onnx")
    before = _tree(tmp_path)
    record = {"model": "digits", "variants": {"int8_mixed_gpu_graph": {"file": "int8_mixed_gpu.onnx"}}}
    assert run_tensorrt_step([{"model": "digits", "variants": {}}], _Serving(), tmp_path) == ("", [])  # no GPU graph built
    section, skipped = run_tensorrt_step([record], _Serving(), tmp_path)
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("[tensorrt]") and "skipped" in printed[0]
    assert availability.reason in printed[0]
    assert _tree(tmp_path) == before  # no engine, no config, no placeholder
    assert skipped == [printed[0].removeprefix("[tensorrt] ")]
    assert "trtexec --onnx=" in section and "int8_mixed_gpu.onnx" in section and "replay against FP32" in section


def test_detection_gives_a_reason_when_unavailable():
    availability = detect_tensorrt()
    assert availability.reason  # always says what was found or what is missing


@pytest.mark.gpu
def test_builds_a_strongly_typed_engine_on_a_gpu(tmp_path):
    availability = detect_tensorrt()
    if not availability.available:
        pytest.skip(f"needs an NVIDIA GPU with TensorRT: {availability.reason}")
    from model_build.engines.tensorrt import run_engine_build

    _write_tiny_gpu_graph(tmp_path / "fp16_gpu.onnx")
    (build,) = plan_engine_builds("digits", tmp_path, (TensorSpec("image", "TYPE_FP32", (1, 8, 8)),), 8, None)
    engine = run_engine_build(build)
    assert engine.stat().st_size > 0 and build.timing_cache.stat().st_size > 0


def test_a_failed_engine_build_is_reported_and_does_not_fail_the_cpu_build(tmp_path, monkeypatch, capsys):
    """The error path only (TensorRT itself cannot run here): the build step raises, the report says so."""
    from model_build.engines import tensorrt

    _write_tiny_gpu_graph(tmp_path / "digits" / "int8_mixed_gpu.onnx")
    record = {"model": "digits", "variants": {"int8_mixed_gpu_graph": {"file": "int8_mixed_gpu.onnx"}}}
    monkeypatch.setattr(tensorrt, "detect_tensorrt", lambda: tensorrt.TensorRTAvailability(True, "test GPU"))

    def failing_build(build):
        raise RuntimeError("Network validation failed.\nmore detail")

    monkeypatch.setattr(tensorrt, "run_engine_build", failing_build)
    section, failed = run_tensorrt_step([record], _Serving(), tmp_path)
    assert failed == ["TensorRT engine digits int8_mixed: FAILED (RuntimeError: Network validation failed.)"]
    assert "digits int8_mixed: FAILED (RuntimeError: Network validation failed.)" in section
    assert "[tensorrt] digits int8_mixed: FAILED" in capsys.readouterr().out
