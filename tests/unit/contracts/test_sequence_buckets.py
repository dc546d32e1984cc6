"""Sequence-length bucketing: boundaries, bucket assignment, padding counts, and the bucketed run."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.errors import ConfigError
from perf_sweep.padding_report import arrival_batches, padding_by_strategy
from contracts.sequence_buckets import (
    PaddingStats,
    assign_buckets,
    default_bucket_boundaries,
    format_bucket_boundaries,
    padding_to_fixed_length,
    padding_to_longest,
    padding_with_buckets,
    parse_bucket_boundaries,
    real_lengths,
    run_in_length_buckets,
)


def test_boundaries_parse_format_and_reject_bad_values():
    assert parse_bucket_boundaries("16,32, 64,128") == (16, 32, 64, 128)
    assert parse_bucket_boundaries("") == ()  # off
    assert format_bucket_boundaries((16, 32)) == "16,32"
    with pytest.raises(ConfigError, match="sequence_buckets.*integers"):
        parse_bucket_boundaries("16,abc")
    with pytest.raises(ConfigError, match="strictly increasing"):
        parse_bucket_boundaries("32,16")
    with pytest.raises(ConfigError, match="strictly increasing"):
        parse_bucket_boundaries("0,16")


def test_default_boundaries_end_at_the_max_length():
    assert default_bucket_boundaries(128) == (16, 24, 32, 48, 64, 96, 128)
    assert default_bucket_boundaries(100) == (16, 24, 32, 48, 64, 96, 100)
    assert default_bucket_boundaries(8) == (8,)


def test_real_lengths_from_a_right_padded_mask():
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    assert real_lengths(mask).tolist() == [3, 1, 4, 1]  # an all-padding row counts as 1, never 0
    with pytest.raises(ValueError, match="rows, sequence"):
        real_lengths(np.ones(3))


@pytest.mark.parametrize("row, length", [([1, 1, 1], 3), ([1, 1, 0], 2), ([0, 0], 1), ([1, 0, 1], 3), ([2, 5], 2)])
def test_a_lone_row_has_the_same_real_length_as_in_a_batch(row, length):
    """A lone unpadded row takes a shortcut (no reduction over the mask); padded or not, alone or
    beside another row, the same length."""
    assert real_lengths(np.array([row])).tolist() == [length]
    assert real_lengths(np.array([row, [0] * len(row)])).tolist() == [length, 1]


def test_rows_go_to_the_first_boundary_that_fits_and_overflow_joins_the_last():
    groups = assign_buckets([5, 16, 17, 40, 200, 3], (16, 32, 64))
    assert [g.tolist() for g in groups] == [[0, 1, 5], [2], [3, 4]]


def test_padding_counts_by_hand():
    lengths = [10, 12, 100, 20]
    assert padding_to_fixed_length(lengths, 128) == PaddingStats(142, 512, 1)
    assert padding_to_longest(lengths) == PaddingStats(142, 400, 1)
    # buckets: <=16: rows 10, 12 -> 2 x 12; <=32: row 20 -> 20; <=128: row 100 -> 100
    assert padding_with_buckets(lengths, (16, 32, 128)) == PaddingStats(142, 24 + 20 + 100, 3)
    assert padding_with_buckets(lengths, (16, 32, 128)).efficiency == pytest.approx(142 / 144)


def test_bucketing_never_computes_more_than_padding_to_the_longest():
    rng = np.random.default_rng(0)
    lengths = np.clip(np.exp(rng.normal(np.log(20), 0.6, size=640)).astype(int), 3, 128)
    totals = padding_by_strategy(lengths, arrival_batches(len(lengths), 32, seed=0), 128, default_bucket_boundaries(128))
    assert totals["bucketed"].computed_tokens <= totals["pad_to_longest"].computed_tokens <= totals["pad_to_max_length"].computed_tokens
    assert totals["bucketed"].efficiency > 0.8 > totals["pad_to_longest"].efficiency
    assert totals["pad_to_longest"].framework_calls == 20 and totals["bucketed"].framework_calls <= 20 * 7


def test_arrival_batches_cover_every_request_once():
    batches = arrival_batches(70, 32, seed=1)
    assert [len(b) for b in batches] == [32, 32, 6]
    assert sorted(np.concatenate(batches).tolist()) == list(range(70))


def masked_mean(feeds):
    """Stands in for an encoder: a pooled output that padding must not change."""
    ids, mask = feeds["input_ids"].astype(float), feeds["attention_mask"].astype(float)
    return [(ids * mask).sum(1, keepdims=True) / mask.sum(1, keepdims=True), np.full((len(ids), 1), ids.shape[1])]


def right_padded_feeds(lengths, width=None):
    """input_ids (distinct per row) and attention_mask, each row right-padded to `width`."""
    ids = np.zeros((len(lengths), width or max(lengths)), np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = np.arange(1, n + 1) * (row + 1)
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def test_bucketed_run_returns_rows_in_order_and_trims_each_bucket():
    feeds = right_padded_feeds([3, 40, 5, 70, 17])
    calls = []

    def run(part):
        calls.append(part["input_ids"].shape)
        return masked_mean(part)

    pooled, widths = run_in_length_buckets(run, feeds, "attention_mask", (16, 32, 64, 128))
    np.testing.assert_allclose(pooled, masked_mean(feeds)[0])
    assert widths[:, 0].tolist() == [5, 40, 5, 70, 17]  # each row ran at its bucket's longest real length
    assert sorted(calls) == [(1, 17), (1, 40), (1, 70), (2, 5)]


def test_a_batch_in_one_bucket_runs_once_trimmed_to_its_longest_real_row_and_keeps_row_order():
    feeds = right_padded_feeds([7, 3, 12], width=20)  # all <= 16
    calls = []

    def run(part):
        calls.append(part["input_ids"].shape)
        assert part["input_ids"].flags["C_CONTIGUOUS"]
        return masked_mean(part)

    pooled, widths = run_in_length_buckets(run, feeds, "attention_mask", (16, 32))
    assert calls == [(3, 12)]
    np.testing.assert_allclose(pooled, masked_mean(feeds)[0])
    assert widths[:, 0].tolist() == [12, 12, 12]
    assert [g.tolist() for g in assign_buckets([4], (16,))] == [[0]] and assign_buckets([], (16,)) == []


def test_mixed_buckets_are_grouped_shortest_bucket_first_with_rows_in_order():
    lengths = [70, 5, 40, 9, 200, 17, 6]
    groups = assign_buckets(lengths, (16, 32, 64, 128))
    assert [g.tolist() for g in groups] == [[1, 3, 6], [5], [2], [0, 4]]


def test_mask_inputs_come_from_the_config_parameter_exactly_or_else_from_the_naming_rule():
    from contracts.sequence_buckets import LENGTH_INPUT_PARAMETER, MASK_INPUTS_PARAMETER, mask_input_names

    names = ["input_ids", "attention_mask", "pixel_mask", "lengths"]
    assert mask_input_names(names, {}) == {"attention_mask", "pixel_mask"}
    assert mask_input_names(names, {LENGTH_INPUT_PARAMETER: "lengths"}) == {"attention_mask", "pixel_mask", "lengths"}
    assert mask_input_names(names, {MASK_INPUTS_PARAMETER: ""}) == frozenset()  # a brought model: none unless named
    assert mask_input_names(names, {MASK_INPUTS_PARAMETER: " attention_mask ,lengths"}) == {"attention_mask", "lengths"}


def test_max_input_dims_round_trip_and_refuse_what_is_not_dims():
    from contracts.sequence_buckets import max_input_dims_value, parse_max_input_dims

    value = max_input_dims_value({"x": (3, 48, 320), "a": [1]})
    assert value == '{"a":[1],"x":[3,48,320]}' and parse_max_input_dims(value) == {"a": (1,), "x": (3, 48, 320)}
    assert parse_max_input_dims("  ") == {}
    for bad in ("3x48x320", '{"x": [3, 0]}', '{"x": []}', '{"x": [3, true]}', '[3, 48]'):
        with pytest.raises(ConfigError, match="max_input_dims"):
            parse_max_input_dims(bad)
