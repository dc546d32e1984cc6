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
