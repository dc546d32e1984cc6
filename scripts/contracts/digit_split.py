"""artifacts/<digit model>/test_split.npz: the digit classifier's held-out images and labels.

Written by the digit build (model_build.data.digits, `DigitsSplits.save`) and read by the build's
accuracy check, `model_client classify --test-samples`, the perf sweep's and the peer suite's image
inputs and the integration tests: its place, its arrays' names and the reader are here, so a
reader does not retype `artifacts/digit_classifier/test_split.npz` or the keys the writer chose.

The names do not start with `test`: pytest would collect a `test_...` function imported into a
test module as a test.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from contracts.errors import ServingError

#: The split's file name in a digit model's build folder (artifacts/<model>/).
TEST_SPLIT_FILE = "test_split.npz"
#: The served digit model whose build folder holds the split clients and benchmarks draw from.
DIGIT_CLASSIFIER = "digit_classifier"
#: One 8x8 grey image per row: [N, 1, 8, 8] float32 in 0..1.
IMAGE_SHAPE = (1, 8, 8)


class DigitSplitError(ServingError, ValueError):
    """test_split.npz is missing or does not hold the arrays the build writes."""


def digit_test_split_path(artifacts_dir: Path, model: str = DIGIT_CLASSIFIER) -> Path:
    """The held-out split in `model`'s build folder below `artifacts_dir`."""
    return Path(artifacts_dir) / model / TEST_SPLIT_FILE


def save_digit_test_split(path: Path, images: np.ndarray, labels: np.ndarray, indices: np.ndarray) -> None:
    """Write the held-out images, labels and their rows in the source data set (for traceability)."""
    np.savez_compressed(path, images=images, labels=labels, indices=indices)


def load_digit_test_split(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images [N, 1, 8, 8], labels [N]) of the split at `path`; DigitSplitError names the fix otherwise."""
    try:
        with np.load(path) as data:
            missing = sorted({"images", "labels"} - set(data.files))
            if missing:
                raise DigitSplitError(f"test split {path} lacks {missing}; expected `images` and `labels` "
                                      "(rebuild with `make build-engines FORCE=1`).")
            images, labels = data["images"], data["labels"]
    except FileNotFoundError:
        raise DigitSplitError(f"test split {path} does not exist: run `make build-engines` first.") from None
    if images.shape[1:] != IMAGE_SHAPE or labels.shape != images.shape[:1]:
        raise DigitSplitError(f"test split {path} holds images {list(images.shape)} and labels {list(labels.shape)}; "
                              f"expected [N, {', '.join(map(str, IMAGE_SHAPE))}] and [N] (rebuild with `make build-engines FORCE=1`).")
    return images, labels
