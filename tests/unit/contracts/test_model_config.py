from __future__ import annotations

import pytest

from contracts.errors import ConfigError
from contracts.model_config import TensorSpec, render_onnx_cpu_config
from serving.runtime.server import ServerSettings
from contracts.serving_spec import ModelSpec, serving_spec_from_dict

SERVING = serving_spec_from_dict({
    "priorities": {
        "realtime": {"level": 1, "max_queue_size": 4, "default_timeout_microseconds": 1000},
        "batch": {"level": 2, "max_queue_size": 8, "default_timeout_microseconds": 5000},
    },
    "batching": {"default_priority": "batch", "max_queue_delay_microseconds": 7000},
    "models": {"m": {"recipe": "digit_cnn", "max_batch_size": 16}},
})


def test_rendered_config_carries_batching_priorities_and_queue_policies():
    model = SERVING.model("m")
    text = render_onnx_cpu_config(model, SERVING, [TensorSpec("x", "TYPE_FP32", (3,))], [TensorSpec("y", "TYPE_FP32", (2,))])
    assert 'backend: "onnxruntime_cpu"' in text
    assert "max_batch_size: 16" in text
    assert "max_queue_delay_microseconds: 7000" in text
    assert "priority_levels: 2" in text and "default_priority_level: 2" in text
    assert text.count("timeout_action: REJECT") == 3  # default + one per level
    assert "max_queue_size: 4" in text and "max_queue_size: 8" in text
    assert 'name: "warmup_batch_16"' in text


def test_rendered_config_parses_as_a_triton_model_config():
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    model = SERVING.model("m")
    text = render_onnx_cpu_config(model, SERVING, [TensorSpec("ids", "TYPE_INT64", (-1,))], [TensorSpec("y", "TYPE_FP32", (4,))])
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert config.dynamic_batching.priority_queue_policy[1].max_queue_size == 4
    assert list(config.model_warmup[0].inputs["ids"].dims) == [16]  # variable dims get a concrete warmup size


def test_per_model_queue_delay_overrides_the_default():
    model = ModelSpec(name="m", recipe="digit_cnn", max_queue_delay_microseconds=2000)
    text = render_onnx_cpu_config(model, SERVING, [TensorSpec("x", "TYPE_FP32", (1,))], [TensorSpec("y", "TYPE_FP32", (1,))])
    assert "max_queue_delay_microseconds: 2000" in text


def test_unknown_tensor_type_is_rejected():
    with pytest.raises(ConfigError, match="TYPE_FP8"):
        TensorSpec("x", "TYPE_FP8", (1,))


def test_server_flags_bind_loopback_and_load_models_explicitly(tmp_path):
    args = ServerSettings(model_repository=tmp_path, backend_dir=tmp_path, models=("a", "b")).to_args_list()
    assert "--http-address=127.0.0.1" in args and "--grpc-address=127.0.0.1" in args
    assert "--http-port=8000" in args and "--grpc-port=8001" in args and "--metrics-port=8002" in args
    assert "--model-control-mode=explicit" in args and "--load-model=a" in args and "--load-model=b" in args


def test_gpu_metrics_are_off_unless_asked_for(tmp_path):
    assert "--allow-gpu-metrics=false" in ServerSettings(model_repository=tmp_path, backend_dir=tmp_path).to_args_list()
    on = ServerSettings(model_repository=tmp_path, backend_dir=tmp_path, gpu_metrics=True).to_args_list()
    assert "--allow-gpu-metrics=true" in on
