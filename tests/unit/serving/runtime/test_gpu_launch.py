"""The GPU side of the launcher and backend, checked on CPU: plans, environments, configs, errors."""
from __future__ import annotations

import pytest

from contracts.model_config import render_onnx_cpu_config, TensorSpec
from contracts.onnx_sessions import execution_providers
from contracts.serving_spec import ModelSpec, serving_spec_from_dict
from serving.runtime.launcher import RunLayout, mps_client_environment, start_mps_daemon


def test_gpu_models_get_kind_gpu_instances():
    spec = serving_spec_from_dict({"models": {"m": {"recipe": "digit_cnn", "device": "gpu"}}, "priorities": {}})
    config = render_onnx_cpu_config(spec.model("m"), spec, [TensorSpec("x", "TYPE_FP32", (3,))], [TensorSpec("y", "TYPE_FP32", (2,))])
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    cpu = render_onnx_cpu_config(ModelSpec(name="c", recipe="digit_cnn"), spec, [TensorSpec("x", "TYPE_FP32", (3,))],
                                 [TensorSpec("y", "TYPE_FP32", (2,))])
    assert cpu.instance_group[0].kind == cpu.instance_group[0].KIND_CPU


def test_providers_follow_the_instance_kind_and_refuse_a_silent_cpu_run():
    assert execution_providers("KIND_CPU", 0, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert execution_providers("GPU", 1, ["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        ("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"]
    with pytest.raises(ValueError, match="requirements/gpu.txt"):
        execution_providers("KIND_GPU", 0, ["CPUExecutionProvider"])


def test_mps_clients_do_not_inherit_cuda_visible_devices(tmp_path):
    env = mps_client_environment(RunLayout(tmp_path))
    assert env["CUDA_MPS_PIPE_DIRECTORY"].startswith(str(tmp_path)) and env["SERVING_UNSET_ENV"] == "CUDA_VISIBLE_DEVICES"


def test_a_missing_mps_control_binary_is_one_line_and_a_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control here
    line = start_mps_daemon(RunLayout(tmp_path))
    assert line.startswith("nvidia-cuda-mps-control is not on PATH") and "NOT enforced" in line and "\n" not in line
