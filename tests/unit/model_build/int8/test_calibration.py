"""Calibration sets: proportions per stratum, sizes, seeds, and no test data."""
import numpy as np
import pytest

from model_build.int8.calibration import (
    Sampling, calibration_set, proportional_allocation, random_calibration_set, sequence_length_strata,
    stratified_calibration_set,
)
from model_build.errors import BuildError


def test_proportional_allocation_adds_up_and_follows_shares():
    counts = proportional_allocation({"a": 500, "b": 300, "c": 200}, 64)
    assert sum(counts.values()) == 64
    assert counts == {"a": 32, "b": 19, "c": 13}  # 32.0, 19.2, 12.8 -> largest remainder to c


def test_proportional_allocation_never_exceeds_a_stratum():
    counts = proportional_allocation({"big": 1000, "tiny": 1}, 1001)
    assert counts == {"big": 1000, "tiny": 1}


def test_a_small_stratum_is_not_rounded_out_when_the_size_allows_one_row_each():
    """The text encoder's training strata (964 / 1,330 / 502 / 41 texts): at 16 or 32 rows the
    longest texts got 0 by rounding, the very miss stratifying exists to prevent."""
    strata = {"1-16": 964, "17-32": 1330, "33-64": 502, "65-128": 41}
    for size in (4, 16, 32, 256):
        counts = proportional_allocation(strata, size)
        assert sum(counts.values()) == size and counts["65-128"] >= 1, (size, counts)
    assert proportional_allocation({"short": 1000, "long": 2}, 100) == {"short": 99, "long": 1}
    assert proportional_allocation({"a": 1, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 0}  # too few rows for all


def test_stratified_set_is_proportional_per_class():
    labels = np.repeat(np.arange(4), [400, 200, 100, 100])
    cal = stratified_calibration_set(labels, 64, seed=3)
    drawn = np.bincount(labels[list(cal.rows)], minlength=4)
    expected = 64 * np.array([400, 200, 100, 100]) / 800
    assert cal.size == 64 and len(set(cal.rows)) == 64
    assert np.all(np.abs(drawn - expected) <= 1)
    assert cal.per_stratum == {"0": 32, "1": 16, "2": 8, "3": 8}


def test_small_stratified_set_keeps_every_class_that_random_may_miss():
    labels = np.repeat(np.arange(10), 100)
    for seed in range(5):
        assert len(set(labels[list(stratified_calibration_set(labels, 16, seed).rows)])) == 10


def test_same_seed_same_rows_other_seed_other_rows():
    labels = np.repeat(np.arange(3), 50)
    assert stratified_calibration_set(labels, 30, 1).rows == stratified_calibration_set(labels, 30, 1).rows
    assert stratified_calibration_set(labels, 30, 1).rows != stratified_calibration_set(labels, 30, 2).rows
    assert random_calibration_set(150, 30, 1).rows == random_calibration_set(150, 30, 1).rows
    assert random_calibration_set(150, 30, 1).rows != random_calibration_set(150, 30, 2).rows


def test_random_set_has_the_same_size_and_no_strata():
    cal = calibration_set(Sampling.RANDOM, ["x"] * 100, 16, 0)
    assert cal.size == 16 and cal.per_stratum == {} and cal.sampling is Sampling.RANDOM


@pytest.mark.parametrize("size", [0, -1, 101])
def test_size_out_of_range_is_rejected(size):
    with pytest.raises(BuildError, match="calibration size"):
        stratified_calibration_set(["a"] * 100, size, 0)


def test_sequence_length_strata_names_buckets():
    assert sequence_length_strata([1, 16, 17, 64, 65, 128, 200]) == ["1-16", "1-16", "17-32", "33-64", "65-128", "65-128", "129+"]
    with pytest.raises(BuildError, match="strictly increasing"):
        sequence_length_strata([3], edges=(8, 8))


def test_digit_calibration_rows_come_from_the_training_split_only():
    from model_build.data import digits

    splits = digits.load_digits_splits(seed=0)
    n_rows = len(splits.train_labels) + len(splits.test_labels)
    train_rows = np.flatnonzero(~np.isin(np.arange(n_rows), splits.test_indices))  # as load_digits_splits orders them
    for sampling in Sampling:
        cal = calibration_set(sampling, splits.train_labels, 256, seed=0)
        dataset_rows = train_rows[list(cal.rows)]
        assert not set(dataset_rows) & set(splits.test_indices.tolist())
        assert max(cal.rows) < len(splits.train_labels)
