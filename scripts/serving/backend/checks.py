"""Checks the `onnxruntime_cpu` backend runs before ONNX Runtime sees anything.

Kept out of the backend's model.py so they are plain functions, tested without Triton, and so
the backend stays one file Triton loads. Only numpy and the standard library are imported: this
module runs inside the Python-backend stub.

Defined behaviour for non-finite input: a request whose floating-point input holds NaN or
+/-Inf is rejected with an error naming the input and the count, with Triton's INVALID_ARG code
(HTTP 400 / gRPC INVALID_ARGUMENT). Other requests of the same dynamic batch are still served. Without this, the digit
classifier answers NaN probabilities with status 200, which a caller could mistake for a result.
"""
from __future__ import annotations

import os
from pathlib import PurePosixPath

import numpy as np

#: Message prefix of every per-request input error (callers and docs/operations.md match on it).
INVALID_INPUT_PREFIX = "invalid input"


def non_finite_error(name: str, array: np.ndarray) -> str | None:
    """None when `array` is not floating point or all finite; else a one-line error message."""
    if array.dtype.kind not in "fc" or array.size == 0:
        return None
    finite = np.isfinite(array)
    if finite.all():
        return None
    nan = int(np.isnan(array).sum())
    inf = int(array.size - finite.sum()) - nan
    return (
        f"{INVALID_INPUT_PREFIX} '{name}': {nan} NaN and {inf} Inf values out of {array.size}; "
        f"expected finite numbers (this request was rejected, not computed)."
    )


def non_finite_answer_error(named_outputs) -> str | None:
    """None when every floating-point output of one request is finite; else a one-line error. Finite
    inputs can still overflow a model (the digit classifier answers NaN for pixels of 3e38): such an
    answer is refused like a non-finite input, never returned with status 200."""
    for name, array in named_outputs:
        if array.dtype.kind in "fc" and array.size and not np.isfinite(array).all():
            bad = int(array.size - np.isfinite(array).sum())
            return (f"{INVALID_INPUT_PREFIX}: this request's inputs are finite but the model's output '{name}' for it "
                    f"holds {bad} NaN/Inf values out of {array.size} (inputs far outside the range the model "
                    f"computes in); expected inputs of the model's usual magnitude (the request was not answered).")
    return None


def non_finite_answer_errors(output_names, answers) -> dict[int, str]:
    """{index: error} for the answers of one batch (per request its outputs in `output_names`
    order, or the exception it alone raised, skipped) that hold NaN/Inf. Checked over the whole
    batch first, one reduction per output, and per request only when that finds something: right
    after a framework call each numpy call costs 10-20 us (serving/backend/batch_execution.py), so
    a check per request cost ~20 us times the requests of every execution."""
    computed = [(i, a) for i, a in enumerate(answers) if not isinstance(a, Exception)]
    if len(computed) > 1 and all(
            parts[0].dtype.kind not in "fc" or np.isfinite(np.concatenate(parts)).all()
            for parts in ([a[k] for _, a in computed] for k in range(len(output_names)))):
        return {}
    return {i: message for i, a in computed if (message := non_finite_answer_error(zip(output_names, a)))}


def model_file_in_version_dir(version_dir: str, file_name: str) -> str:
    """Join a configured model file name to the version directory, refusing anything that escapes.

    `file_name` comes from config.pbtxt's `onnx_file` parameter: a plain relative path below the
    version directory (no absolute path, no `..`, no backslash, no NUL).
    """
    pure = PurePosixPath(file_name)
    if (not file_name or "\x00" in file_name or "\\" in file_name or pure.is_absolute()
            or any(part in ("..", "") for part in file_name.split("/"))):
        raise ValueError(
            f"model file {file_name!r} is not a plain relative path inside the version directory "
            f"(no absolute path, '..', backslash or empty component)."
        )
    joined = os.path.realpath(os.path.join(version_dir, file_name))
    root = os.path.realpath(version_dir)
    if os.path.commonpath([joined, root]) != root:
        raise ValueError(f"model file {file_name!r} resolves to {joined}, outside {root} (symbolic link?).")
    return joined


def model_arguments(args) -> tuple[dict, dict[str, str], str]:
    """(config, string parameters, version directory) from the `args` Triton passes `initialize`:
    the part every Python model of this project starts with."""
    import json

    config = json.loads(args["model_config"])
    params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
    return config, params, os.path.join(args["model_repository"], args["model_version"])
