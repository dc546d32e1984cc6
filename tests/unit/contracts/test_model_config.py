from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import TWO_PRIORITY_LEVELS
from contracts.errors import ConfigError
from contracts.model_config import (
    OTHER_INSTANCE_PRIORITY, TensorSpec, config_text, parse_config, read_model_config, render_onnx_cpu_config,
    write_model_config,
)
from serving.runtime.server import ServerSettings
from contracts.serving_spec import ModelSpec, serving_spec_from_dict

SERVING = serving_spec_from_dict({
    "priorities": TWO_PRIORITY_LEVELS,
    "batching": {"default_priority": "batch", "max_queue_delay_microseconds": 7000},
    "models": {"m": {"recipe": "digit_cnn", "max_batch_size": 16}},
})


def test_rendered_config_carries_batching_priorities_and_queue_policies():
    model = SERVING.model("m")
    config = render_onnx_cpu_config(model, SERVING, [TensorSpec("x", "TYPE_FP32", (3,))], [TensorSpec("y", "TYPE_FP32", (2,))])
    expected = parse_config("""
        name: "m" backend: "onnxruntime_cpu" max_batch_size: 16
        input { name: "x" data_type: TYPE_FP32 dims: 3 }
        output { name: "y" data_type: TYPE_FP32 dims: 2 }
        dynamic_batching {
          max_queue_delay_microseconds: 7000 priority_levels: 2 default_priority_level: 2
          default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 5000 allow_timeout_override: true max_queue_size: 8 }
          priority_queue_policy { key: 1 value { timeout_action: REJECT default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 4 } }
          priority_queue_policy { key: 2 value { timeout_action: REJECT default_timeout_microseconds: 5000 allow_timeout_override: true max_queue_size: 8 } }
        }
        instance_group { count: 1 kind: KIND_CPU }
        parameters { key: "intra_op_num_threads" value { string_value: "1" } }
        parameters { key: "onnx_file" value { string_value: "model.onnx" } }
        model_warmup { name: "warmup_batch_1" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: 3 zero_data: true } } }
        model_warmup { name: "warmup_batch_16" batch_size: 16 inputs { key: "x" value { data_type: TYPE_FP32 dims: 3 zero_data: true } } }
    """)
    config.parameters["intra_op_num_threads"].string_value = "1"  # depends on the machine's cores
    assert config == expected
    assert parse_config(config_text(config)) == config  # what is written parses back to the same message


def test_rendered_config_parses_as_a_triton_model_config():
    model = SERVING.model("m")
    config = parse_config(config_text(render_onnx_cpu_config(model, SERVING, [TensorSpec("ids", "TYPE_INT64", (-1,))],
                                                             [TensorSpec("y", "TYPE_FP32", (4,))])))
    assert config.dynamic_batching.priority_queue_policy[1].max_queue_size == 4
    assert list(config.model_warmup[0].inputs["ids"].dims) == [16]  # variable dims get a concrete warmup size


def test_per_model_queue_delay_overrides_the_default():
    model = ModelSpec(name="m", recipe="digit_cnn", max_queue_delay_microseconds=2000)
    config = render_onnx_cpu_config(model, SERVING, [TensorSpec("x", "TYPE_FP32", (1,))], [TensorSpec("y", "TYPE_FP32", (1,))])
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000


def test_names_are_escaped_not_spliced():
    model = ModelSpec(name="m", recipe="digit_cnn")
    config = render_onnx_cpu_config(model, SERVING, [TensorSpec('x"y', "TYPE_FP32", (1,))], [TensorSpec("y", "TYPE_FP32", (1,))])
    assert parse_config(config_text(config)).input[0].name == 'x"y'


def test_written_config_names_its_warmup_ones_files(tmp_path):
    import numpy as np

    model = ModelSpec(name="m", recipe="digit_cnn", max_batch_size=4)
    config = render_onnx_cpu_config(model, SERVING, [TensorSpec("ids", "TYPE_INT64", (-1,)), TensorSpec("attention_mask", "TYPE_INT64", (-1,))],
                                    [TensorSpec("y", "TYPE_FP32", (1,))])
    write_model_config(tmp_path, config)
    assert read_model_config(tmp_path) == config
    ones = np.frombuffer((tmp_path / "warmup" / "ones_TYPE_INT64_16").read_bytes(), dtype=np.int64)
    assert ones.shape == (16,) and (ones == 1).all()
    with pytest.raises(ConfigError, match="does not exist"):
        read_model_config(tmp_path / "missing")


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


def test_several_instances_are_one_group_each_the_first_preferred_by_the_rate_limiter():
    """Triton's rate limiter schedules the free instance with the fewest executions x priority:
    priority 1 for the first and OTHER_INSTANCE_PRIORITY for the rest keeps lone requests on one
    process (warm caches); Triton then names the instances m_0_0, m_1_0, m_2_0."""
    model = replace(SERVING.model("m"), instance_count=3)
    config = render_onnx_cpu_config(model, SERVING, [TensorSpec("x", "TYPE_FP32", (3,))], [TensorSpec("y", "TYPE_FP32", (2,))])
    assert list(config.instance_group) == [parse_config(f"instance_group {{ count: 1 kind: KIND_CPU rate_limiter {{ priority: {p} }} }}").instance_group[0]
                                           for p in (1, OTHER_INSTANCE_PRIORITY, OTHER_INSTANCE_PRIORITY)]
    assert OTHER_INSTANCE_PRIORITY > 1
    one = render_onnx_cpu_config(SERVING.model("m"), SERVING, [TensorSpec("x", "TYPE_FP32", (3,))], [TensorSpec("y", "TYPE_FP32", (2,))])
    assert [(g.count, g.HasField("rate_limiter")) for g in one.instance_group] == [(1, False)]


def test_server_rate_limit_follows_the_serving_spec(tmp_path):
    assert "--rate-limit=execution_count" in ServerSettings(model_repository=tmp_path, backend_dir=tmp_path).to_args_list()
    assert "--rate-limit=off" in ServerSettings(model_repository=tmp_path, backend_dir=tmp_path, rate_limit="off").to_args_list()
    models = {"m": {"recipe": "digit_cnn", "max_batch_size": 16}}
    assert SERVING.server.rate_limit == "execution_count"
    assert serving_spec_from_dict({"models": models, "server": {"rate_limit": "off"}}).server.rate_limit == "off"
    with pytest.raises(ConfigError, match="rate_limit"):
        serving_spec_from_dict({"models": models, "server": {"rate_limit": "resources"}})


def test_backend_parameters_of_serving_toml_reach_the_config_as_strings():
    spec = serving_spec_from_dict({
        "priorities": TWO_PRIORITY_LEVELS, "batching": {"default_priority": "batch"},
        "models": {"m": {"recipe": "digit_cnn", "backend_parameters": {"pinned_threads": False, "metrics_flush_interval_s": 0.5}}},
    })
    config = render_onnx_cpu_config(spec.model("m"), spec, [TensorSpec("x", "TYPE_FP32", (3,))], [TensorSpec("y", "TYPE_FP32", (2,))])
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    assert parameters["pinned_threads"] == "false" and parameters["metrics_flush_interval_s"] == "0.5"
    assert parameters["onnx_file"] == "model.onnx"  # derived parameters stay
    # the build derives served models with dataclasses.replace, which checks the fields again
    assert replace(spec.model("m"), max_batch_size=8).backend_parameters == {"pinned_threads": False, "metrics_flush_interval_s": 0.5}


@pytest.mark.parametrize("parameters, message", [
    ({"onnx_file": "other.onnx"}, "not a backend parameter this project sets; allowed"),
    ({"pinned_threads": "false"}, "expected true or false"),
    ({"metrics_flush_interval_s": 0}, r"expected a number of seconds in \(0, 3600\]"),
    ("pinned_threads=false", "expected a table of name = value"),
])
def test_backend_parameters_are_checked_naming_the_key_and_the_expected_form(parameters, message):
    with pytest.raises(ConfigError, match=message):
        ModelSpec(name="m", recipe="digit_cnn", backend_parameters=parameters)


def test_backend_parameters_on_a_model_another_backend_serves_are_refused_not_ignored():
    from contracts.model_config import render_python_model_config

    model = ModelSpec(name="tok", recipe="text_tokenizer", backend_parameters={"pinned_threads": False})
    with pytest.raises(ConfigError, match="served by Triton's Python backend"):
        render_python_model_config(model, SERVING, [TensorSpec("TEXT", "TYPE_STRING", (1,))], [TensorSpec("y", "TYPE_INT64", (-1,))])


def test_each_inputs_largest_valid_request_is_read_from_the_config():
    """Rows = max_batch_size (none without batching); a variable axis at max_sequence_length, else unbounded;
    bytes as the request guard counts them (a BYTES element as 8)."""
    from contracts.model_config import request_input_bounds

    encoder = parse_config("""name: "enc" max_batch_size: 32
        input { name: "input_ids" data_type: TYPE_INT64 dims: -1 }
        input { name: "TEXT" data_type: TYPE_STRING dims: 1 }
        parameters { key: "max_sequence_length" value { string_value: "128" } }""")
    assert [(b.input, b.rows, b.dims, b.bytes) for b in request_input_bounds(encoder)] == [
        ("input_ids", 32, (128,), 32 * 128 * 8), ("TEXT", 32, (1,), 32 * 8)]
    unbounded = parse_config("""name: "u" input { name: "x" data_type: TYPE_FP16 dims: [-1, 4] }""")
    (bound,) = request_input_bounds(unbounded)
    assert (bound.rows, bound.shape, bound.bytes) == (0, (-1, 4), None)
    assert bound.described == "model 'u' input 'x': [-1,4] of FP16"
    (flag,) = request_input_bounds(parse_config("""name: "g" input { name: "stream" data_type: TYPE_BOOL dims: 1 }"""))
    assert (flag.shape, flag.bytes) == ((1,), 1)


def test_a_model_whose_valid_requests_the_guard_would_refuse_is_refused_when_its_config_is_rendered():
    digits = [TensorSpec("image", "TYPE_FP32", (1, 8, 8))], [TensorSpec("p", "TYPE_FP32", (10,))]
    model = SERVING.model("m")  # max_batch_size 16: 16 x 256 bytes = 4,096
    tight = replace(SERVING, server=replace(SERVING.server, max_input_bytes=4095))
    with pytest.raises(ConfigError, match=r"model 'm' input 'image': \[16,1,8,8\] of FP32 needs 4,096 bytes in its largest "
                                          r"valid request, more than `server.max_input_bytes` = 4,095 .* at least 4096"):
        render_onnx_cpu_config(model, tight, *digits)
    render_onnx_cpu_config(model, replace(SERVING, server=replace(SERVING.server, max_input_bytes=4096)), *digits)
    render_onnx_cpu_config(model, replace(SERVING, server=replace(SERVING.server, max_input_bytes=0)), *digits)  # no limit
