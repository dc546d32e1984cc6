from __future__ import annotations

import pytest

from conftest import TWO_PRIORITY_LEVELS
from contracts.errors import ConfigError
from contracts.serving_spec import ModelSpec, Variant, load_serving_spec, serving_spec_from_dict

BASE = {
    "priorities": TWO_PRIORITY_LEVELS,
    "batching": {"default_priority": "batch"},
    "models": {"m": {"recipe": "digit_cnn"}},
}


def test_the_committed_serving_configuration_is_valid():
    from conftest import SERVING_CONFIG

    spec = load_serving_spec(SERVING_CONFIG)
    assert spec.models and spec.default_priority_level == spec.priority(spec.batching.default_priority).level


def test_unknown_variant_is_rejected_with_the_allowed_values():
    with pytest.raises(ConfigError, match=r"`models.m.variant` = 'int4'.*allowed fp32, int8_mixed"):
        ModelSpec(name="m", recipe="digit_cnn", variant="int4")


def test_max_batch_size_zero_is_rejected_naming_the_field_and_range():
    with pytest.raises(ConfigError, match=r"`models.m.max_batch_size` = 0 is out of range: allowed between 1 and 4096"):
        ModelSpec(name="m", recipe="digit_cnn", max_batch_size=0)


@pytest.mark.parametrize("name", ["../etc", "Model", "a/b", "", "x" * 65])
def test_model_names_that_could_escape_the_repository_are_rejected(name):
    with pytest.raises(ConfigError, match="not a valid name"):
        ModelSpec(name=name, recipe="digit_cnn")


def test_unknown_keys_are_rejected_with_the_allowed_keys():
    data = {**BASE, "models": {"m": {"recipe": "digit_cnn", "max_batch": 8}}}
    with pytest.raises(ConfigError, match=r"`models.m` has unknown keys \['max_batch'\]"):
        serving_spec_from_dict(data)


_ONE_MODEL = {"a": {"recipe": "digit_cnn"}}
_RT = {"level": 1, "max_queue_size": 4, "default_timeout_microseconds": 10}


@pytest.mark.parametrize("document, message", [
    ({"models": {"a": {}}}, r"`models.a` is missing \['recipe'\]"),
    ({"models": "a"}, r"`models` = 'a' is a str: allowed a table"),
    ({"models": {"a": "digit"}}, r"`models.a` = 'digit' is a str: allowed a table \(\[models.a\] followed by key = value lines\)"),
    ({"models": _ONE_MODEL, "partitions": ["p"]}, r"`partitions` = \['p'\] is a list: allowed a table"),
    ({"models": {"a": {"recipe": "digit_cnn", "options": ["x"]}}}, r"`models.a.options` = \['x'\]: allowed a table"),
    ({"models": _ONE_MODEL, "batching": "x"}, r"`batching` = 'x' is a str: allowed a table"),
    ({"models": _ONE_MODEL, "priorities": {"rt": {"level": 1}}},
     r"`priorities.rt` is missing \['default_timeout_microseconds', 'max_queue_size'\]"),
    ({"models": _ONE_MODEL, "priorities": {"rt": {**_RT, "allow_timeout_override": "false"}}},
     r"`priorities.rt`: `allow_timeout_override` = 'false' must be true or false"),
    ({"models": _ONE_MODEL, "priorities": {"rt": {**_RT, "max_queue_size": 2**33}}},
     r"`priorities.rt`: `max_queue_size` = 8589934592 is out of range: allowed between 1 and 4294967295"),
    ({"models": _ONE_MODEL, "priorities": {"rt": {**_RT, "default_timeout_microseconds": 2**64}}},
     r"`default_timeout_microseconds` = 18446744073709551616 is out of range"),
])
def test_config_mistakes_are_config_errors_naming_the_key_and_the_expected_form(document, message):
    """Each used to escape as a TypeError, AttributeError or ValueError traceback (or, for a string
    where a model table belongs, as "unknown keys ['d', 'g', 'i', 't']"), or to pass validation and
    fail only when Triton's config was rendered (a string boolean, a queue size beyond uint32)."""
    with pytest.raises(ConfigError, match=message):
        serving_spec_from_dict(document)


def test_priority_levels_must_be_contiguous_from_one():
    data = {**BASE, "priorities": {"a": {"level": 1, "max_queue_size": 1, "default_timeout_microseconds": 1},
                                   "b": {"level": 3, "max_queue_size": 1, "default_timeout_microseconds": 1}},
            "batching": {"default_priority": "a"}}
    with pytest.raises(ConfigError, match=r"1..N without gaps"):
        serving_spec_from_dict(data)


def test_default_priority_must_name_a_priority():
    data = {**BASE, "batching": {"default_priority": "urgent"}}
    with pytest.raises(ConfigError, match="`batching.default_priority` = 'urgent'"):
        serving_spec_from_dict(data)


def test_variant_strings_become_enums():
    assert ModelSpec(name="m", recipe="digit_cnn", variant="int8_mixed").variant is Variant.INT8_MIXED


def test_the_http_gzip_level_reaches_the_partition_plan_and_is_bounded_to_zlibs_levels():
    from contracts.partition_plan import plan_partitions

    spec = serving_spec_from_dict({**BASE, "server": {"http_gzip_level": 1}})
    assert spec.server.http_gzip_level == 1
    assert serving_spec_from_dict(BASE).server.http_gzip_level == "off"  # default: uncompressed answers
    assert plan_partitions(spec, cpu_count=2, gpu_present=False).http_gzip_level == 1
    assert plan_partitions(serving_spec_from_dict(BASE), cpu_count=2, gpu_present=False).http_gzip_level == "off"
    for bad in (-1, 10):
        with pytest.raises(ConfigError, match=rf"`server.http_gzip_level` = {bad} is out of range: allowed between 0 and 9"):
            serving_spec_from_dict({**BASE, "server": {"http_gzip_level": bad}})
    for bad in ("none", "6", ""):
        with pytest.raises(ConfigError, match=r"allowed 'off' or a zlib level 0-9"):
            serving_spec_from_dict({**BASE, "server": {"http_gzip_level": bad}})


def test_the_per_input_limit_reaches_the_plan_and_refuses_a_value_that_is_not_bytes():
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import DEFAULT_MAX_INPUT_BYTES, MAX_INPUT_BYTES_CEILING

    assert serving_spec_from_dict(BASE).server.max_input_bytes == DEFAULT_MAX_INPUT_BYTES == 1 << 20
    for value in (0, 1024, 64 << 20, MAX_INPUT_BYTES_CEILING):
        spec = serving_spec_from_dict({**BASE, "server": {"max_input_bytes": value}})
        assert plan_partitions(spec, cpu_count=2, gpu_present=False).max_input_bytes == value
    with pytest.raises(ConfigError, match=r"`server.max_input_bytes` = 64: allowed 0 \(no limit\) or 1024 to .* bytes "
                                          r"\(a limit in bytes per input, not in KiB or MiB\)"):
        serving_spec_from_dict({**BASE, "server": {"max_input_bytes": 64}})
    for bad, message in ((-1, "is out of range"), (MAX_INPUT_BYTES_CEILING + 1, "is out of range"),
                         ("1M", "must be an integer"), (True, "must be an integer")):
        with pytest.raises(ConfigError, match=rf"`server.max_input_bytes` = .* {message}"):
            serving_spec_from_dict({**BASE, "server": {"max_input_bytes": bad}})


def test_latency_summary_quantiles_reach_the_plan_and_the_server_flags():
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import DEFAULT_LATENCY_SUMMARY_QUANTILES
    from serving.runtime.launcher import partition_server_settings

    assert serving_spec_from_dict(BASE).server.latency_summary_quantiles == DEFAULT_LATENCY_SUMMARY_QUANTILES
    assert 0.999 not in {q for q, _ in DEFAULT_LATENCY_SUMMARY_QUANTILES}, "Triton's own P99.9 costs every request (docs/operations.md)"
    spec = serving_spec_from_dict({**BASE, "server": {"latency_summary_quantiles": [[0.5, 0.05], [0.99, 0.001]]}})
    plan = plan_partitions(spec, cpu_count=2, gpu_present=False)
    assert plan.latency_summary_quantiles == ((0.5, 0.05), (0.99, 0.001))
    args = partition_server_settings(plan, plan.partitions[0], "/r", "/b").to_args_list()
    assert "--metrics-config=summary_latencies=true" in args and "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001" in args
    off = serving_spec_from_dict({**BASE, "server": {"latency_summary_quantiles": []}})
    off_plan = plan_partitions(off, cpu_count=2, gpu_present=False)
    off_args = partition_server_settings(off_plan, off_plan.partitions[0], "/r", "/b").to_args_list()
    assert not [a for a in off_args if a.startswith("--metrics-config=summary")], "[] = no summaries at all"


@pytest.mark.parametrize("bad, message", [
    ("0.99", "expected a list of \\[quantile, error\\] pairs"),
    ([0.99], "has 0.99: expected a list"),
    ([[0.99, 0.001, 1]], "expected a list"),
    ([[0.99, True]], "expected a list"),
    ([[1.0, 0.001]], "has \\[1.0, 0.001\\]: a quantile must lie between 0 and 1"),
    ([[0.99, 0.02]], "its error between 0 and the quantile's distance"),
    ([[0.5, 0.0]], "its error between 0"),
    ([[0.5, 0.05], [0.5, 0.01]], "names a quantile twice"),
])
def test_bad_latency_summary_quantiles_name_the_pair_and_the_expected_form(bad, message):
    with pytest.raises(ConfigError, match=rf"`server.latency_summary_quantiles`.*{message}"):
        serving_spec_from_dict({**BASE, "server": {"latency_summary_quantiles": bad}})


def test_a_model_that_follows_an_encoder_serves_the_encoders_variant():
    """The perf report called the fused embedder "fp32" (its own, unused `variant`) while it served
    the INT8-mixed encoder's graph (a review, 2026-12-07)."""
    spec = serving_spec_from_dict({**BASE, "models": {
        "enc": {"recipe": "minilm_encoder", "variant": "int8_mixed"},
        "embedder": {"recipe": "text_pipeline", "options": {"encoder": "enc"}},
        "loop_a": {"recipe": "text_pipeline", "options": {"encoder": "loop_b"}},
        "loop_b": {"recipe": "text_pipeline", "options": {"encoder": "loop_a"}},
        "m": {"recipe": "digit_cnn"}}})
    assert spec.served_variant("embedder") is Variant.INT8_MIXED and spec.model("embedder").variant is Variant.FP32
    assert spec.served_variant("m") is Variant.FP32 and spec.served_variant("enc") is Variant.INT8_MIXED
    assert spec.served_variant("loop_a") is Variant.FP32  # a loop ends (the build names it), not RecursionError
