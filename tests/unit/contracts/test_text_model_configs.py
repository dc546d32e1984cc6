"""Configs of the text ensemble: Python tokenizer, ragged encoder, ensemble, all from the encoder's graph."""
from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from conftest import TWO_PRIORITY_LEVELS
from contracts.errors import ConfigError
from contracts.model_config import (
    TEXT_INPUT,
    EnsembleStep,
    TensorSpec,
    render_ensemble_config,
    render_onnx_cpu_config,
    render_python_model_config,
    text_ensemble_steps,
    tokenizer_tensor_specs,
)
from contracts.serving_spec import ModelSpec, serving_spec_from_dict

SERVING = serving_spec_from_dict({
    "priorities": TWO_PRIORITY_LEVELS,
    "batching": {"default_priority": "batch", "max_queue_delay_microseconds": 7000},
    "models": {
        "enc": {"recipe": "minilm_encoder", "max_batch_size": 32},
        "tok": {"recipe": "text_tokenizer", "max_batch_size": 64},
        "emb": {"recipe": "text_ensemble", "max_batch_size": 32},
    },
})
ENCODER_INPUTS = (TensorSpec("input_ids", "TYPE_INT64", (-1,)), TensorSpec("attention_mask", "TYPE_INT64", (-1,)))
ENCODER_OUTPUTS = (TensorSpec("embedding", "TYPE_FP32", (384,)),)


def parse(config):
    """Round trip through the written text: what Triton reads is what was built."""
    return text_format.Parse(text_format.MessageToString(config), model_config_pb2.ModelConfig())


def test_tokenizer_outputs_are_the_encoder_inputs():
    inputs, outputs = tokenizer_tensor_specs(ENCODER_INPUTS)
    assert inputs == (TEXT_INPUT,) and outputs == ENCODER_INPUTS
    with pytest.raises(ConfigError, match="pixel_values.*integer token inputs"):
        tokenizer_tensor_specs((TensorSpec("pixel_values", "TYPE_FP32", (3, 8, 8)),))


def test_python_model_config_has_the_batcher_priorities_and_queue_policies():
    inputs, outputs = tokenizer_tensor_specs(ENCODER_INPUTS)
    config = parse(render_python_model_config(SERVING.model("tok"), SERVING, inputs, outputs, {"max_length": "128"}))
    assert config.backend == "python" and config.max_batch_size == 64
    assert [(t.name, list(t.dims)) for t in config.input] == [("TEXT", [1])]
    assert [t.name for t in config.output] == ["input_ids", "attention_mask"]
    assert config.dynamic_batching.max_queue_delay_microseconds == 7000
    assert config.dynamic_batching.priority_levels == 2 and config.dynamic_batching.default_priority_level == 2
    assert config.dynamic_batching.priority_queue_policy[1].max_queue_size == 4
    assert config.parameters["max_length"].string_value == "128"
    assert [w.batch_size for w in config.model_warmup] == [1, 64]


def test_ragged_encoder_config_allows_ragged_batches_only_on_variable_inputs():
    inputs = ENCODER_INPUTS + (TensorSpec("fixed", "TYPE_FP32", (4,)),)
    text = render_onnx_cpu_config(SERVING.model("enc"), SERVING, inputs, ENCODER_OUTPUTS,
                                         extra_parameters={"sequence_buckets": "16,32"}, ragged_inputs=True)
    config = parse(text)
    assert {t.name: t.allow_ragged_batch for t in config.input} == {"input_ids": True, "attention_mask": True, "fixed": False}
    assert config.backend == "onnxruntime_cpu" and config.parameters["sequence_buckets"].string_value == "16,32"
    assert list(config.output[0].dims) == [384]


def test_ensemble_config_wires_text_through_tokenizer_and_encoder():
    steps = text_ensemble_steps("tok", "enc", ENCODER_INPUTS, ENCODER_OUTPUTS)
    config = parse(render_ensemble_config(SERVING.model("emb"), (TEXT_INPUT,), ENCODER_OUTPUTS, steps, {"tok": 64, "enc": 32}))
    assert config.platform == "ensemble" and config.max_batch_size == 32
    assert not config.HasField("dynamic_batching")  # an ensemble's steps batch, not the ensemble
    first, second = config.ensemble_scheduling.step
    assert first.model_name == "tok" and dict(first.input_map) == {"TEXT": "TEXT"}
    assert dict(first.output_map) == {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    assert second.model_name == "enc" and dict(second.output_map) == {"embedding": "embedding"}


def test_ensemble_validation_names_the_problem():
    steps = text_ensemble_steps("tok", "enc", ENCODER_INPUTS, ENCODER_OUTPUTS)
    emb = SERVING.model("emb")
    with pytest.raises(ConfigError, match="max_batch_size` = 32 exceeds its step `enc`'s max_batch_size 8"):
        render_ensemble_config(emb, (TEXT_INPUT,), ENCODER_OUTPUTS, steps, {"tok": 64, "enc": 8})
    with pytest.raises(ConfigError, match="not a served model"):
        render_ensemble_config(emb, (TEXT_INPUT,), ENCODER_OUTPUTS, steps, {"tok": 64})
    backwards = (steps[1], steps[0])
    with pytest.raises(ConfigError, match="reads .*input_ids.* which no earlier step produces"):
        render_ensemble_config(emb, (TEXT_INPUT,), ENCODER_OUTPUTS, backwards, {"tok": 64, "enc": 32})
    with pytest.raises(ConfigError, match="outputs \\['pooled'\\] are produced by no step"):
        render_ensemble_config(emb, (TEXT_INPUT,), (TensorSpec("pooled", "TYPE_FP32", (384,)),), steps, {"tok": 64, "enc": 32})
    with pytest.raises(ConfigError, match="at least one input"):
        EnsembleStep("x", (), (("a", "a"),))


def test_ensemble_rejects_a_text_model_whose_cap_exceeds_its_steps():
    model = ModelSpec(name="emb", recipe="text_ensemble", max_batch_size=64)
    steps = text_ensemble_steps("tok", "enc", ENCODER_INPUTS, ENCODER_OUTPUTS)
    with pytest.raises(ConfigError, match="allowed <= that"):
        render_ensemble_config(model, (TEXT_INPUT,), ENCODER_OUTPUTS, steps, {"tok": 64, "enc": 32})
