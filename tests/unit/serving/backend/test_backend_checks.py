"""Input checks the onnxruntime_cpu backend runs before ONNX Runtime (NaN/Inf are rejected)."""
from __future__ import annotations

import numpy as np
import pytest

from serving.backend.checks import first_request_error, non_finite_error


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_finite_floats_pass(dtype):
    assert non_finite_error("image", np.zeros((2, 1, 8, 8), dtype)) is None


def test_nan_and_inf_are_counted_and_named():
    image = np.zeros((1, 1, 8, 8), np.float32)
    image[0, 0, 0, :3] = np.nan
    image[0, 0, 1, 0] = np.inf
    image[0, 0, 1, 1] = -np.inf
    message = non_finite_error("image", image)
    assert message == ("invalid input 'image': 3 NaN and 2 Inf values out of 64; expected finite numbers "
                       "(this request was rejected, not computed).")


@pytest.mark.parametrize("array", [np.array([1, 2], np.int64), np.array([b"\xff", b""], object), np.zeros((0, 4), np.float32)])
def test_non_float_and_empty_inputs_are_not_checked(array):
    assert non_finite_error("x", array) is None


def test_first_problem_of_a_request_is_reported():
    good = np.ones((1, 4), np.float32)
    bad = np.array([[np.nan, 1, 2, 3]], np.float32)
    assert first_request_error([("a", good), ("b", good)]) is None
    assert "'b'" in first_request_error([("a", good), ("b", bad)])
