"""The digit test split's one place (contracts.digit_split): the build writes it, clients, perf sweeps
and tests read it through one reader that says what was wrong and what was expected."""
from __future__ import annotations

import numpy as np
import pytest

from contracts import digit_split
from contracts.digit_split import DigitSplitError, load_digit_test_split, save_digit_test_split


def test_the_split_is_read_back_as_written_at_the_served_classifiers_place(tmp_path):
    path = digit_split.digit_test_split_path(tmp_path)
    assert path == tmp_path / "digit_classifier" / "test_split.npz"
    assert digit_split.digit_test_split_path(tmp_path, "digit_classifier_small").parent.name == "digit_classifier_small"
    path.parent.mkdir()
    images, labels = np.random.default_rng(0).random((3, 1, 8, 8), np.float32), np.array([1, 7, 9])
    save_digit_test_split(path, images, labels, np.array([4, 5, 6]))
    read_images, read_labels = load_digit_test_split(path)
    assert np.array_equal(read_images, images) and np.array_equal(read_labels, labels)


def test_a_missing_or_foreign_split_names_the_fix(tmp_path):
    with pytest.raises(DigitSplitError, match="does not exist: run `make build-engines` first"):
        load_digit_test_split(tmp_path / "missing.npz")
    np.savez_compressed(tmp_path / "no_labels.npz", images=np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(DigitSplitError, match=r"lacks \['labels'\]; expected `images` and `labels`"):
        load_digit_test_split(tmp_path / "no_labels.npz")
    np.savez_compressed(tmp_path / "flat.npz", images=np.zeros((2, 64), np.float32), labels=np.zeros(2))
    with pytest.raises(DigitSplitError, match=r"holds images \[2, 64\] .* expected \[N, 1, 8, 8\] and \[N\]"):
        load_digit_test_split(tmp_path / "flat.npz")
