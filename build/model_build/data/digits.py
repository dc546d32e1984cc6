"""The digit classifier: scikit-learn's bundled 8x8 digits, a small CNN trained deterministically.

The data split is fixed by a seed and stratified by class; the test split is never used for
training or calibration (calibration draws only from `train`). The split is saved with the model
so clients and tests classify exactly the held-out images, without scikit-learn.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The split's file is contracts.digit_split's (clients, perf sweeps and tests read it too);
# `load_test_split` keeps the build's name for its reader.
from contracts.digit_split import load_digit_test_split as load_test_split  # noqa: F401
from contracts.digit_split import save_digit_test_split

#: Pixel values in the bundled data set run 0..16; the model sees them scaled to 0..1.
DIGITS_PIXEL_MAX = 16.0
NUM_CLASSES = 10
INPUT_NAME = "image"
OUTPUT_NAME = "probabilities"


@dataclass(frozen=True)
class DigitsSplits:
    train_images: np.ndarray  # float32 [N, 1, 8, 8] in 0..1
    train_labels: np.ndarray  # int64 [N]
    test_images: np.ndarray
    test_labels: np.ndarray
    test_indices: np.ndarray  # row numbers in sklearn's data set, for traceability

    def save(self, path: Path) -> None:
        """Save the held-out split (only) for clients and tests."""
        save_digit_test_split(path, self.test_images, self.test_labels, self.test_indices)


def load_digits_splits(test_fraction: float = 0.2, seed: int = 0) -> DigitsSplits:
    """Stratified train/test split of scikit-learn's bundled digits (no download)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (data.images.astype(np.float32) / DIGITS_PIXEL_MAX)[:, None, :, :]
    labels = data.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test_rows = []
    for label in range(NUM_CLASSES):
        rows = np.flatnonzero(labels == label)
        rng.shuffle(rows)
        test_rows.extend(rows[: int(round(len(rows) * test_fraction))])
    test_mask = np.zeros(len(labels), dtype=bool)
    test_mask[test_rows] = True
    test_idx = np.flatnonzero(test_mask)
    train_idx = np.flatnonzero(~test_mask)
    return DigitsSplits(images[train_idx], labels[train_idx], images[test_idx], labels[test_idx], test_idx)


def make_digit_cnn(width: int = 16):
    """A small CNN for 8x8 digits; `width` scales the channels (the fallback model uses less)."""
    import torch.nn as nn

    class DigitCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
                nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.ReLU(),
            )
            self.classifier = nn.Sequential(
                nn.Flatten(), nn.Linear(4 * width * 16, 8 * width), nn.ReLU(), nn.Linear(8 * width, NUM_CLASSES)
            )

        def forward(self, image):
            return self.classifier(self.features(image)).softmax(dim=-1)

    return DigitCNN()


#: torch threads while training, whatever the build's own (MODEL_BUILD_THREADS): torch sums its parallel
#: reductions in another order on another thread count, so a parallel prebuild (1 thread per build) and a
#: sequential build (2) trained different weights (max 9e-7 apart after 3 epochs) under one fingerprint.
TRAINING_THREADS = 1


def train_digit_cnn(splits: DigitsSplits, width: int = 16, epochs: int = 40, seed: int = 0):
    """Train deterministically on the train split only; same inputs give the same weights, on any
    number of build threads (TRAINING_THREADS; the caller's thread count is restored after)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(TRAINING_THREADS)
    try:
        return _train(splits, width, epochs, seed)
    finally:
        torch.set_num_threads(threads)


def _train(splits: DigitsSplits, width: int, epochs: int, seed: int):
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    model = make_digit_cnn(width)
    images = torch.from_numpy(splits.train_images)
    labels = torch.from_numpy(splits.train_labels)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(images), generator=generator)
        for start in range(0, len(images), 64):
            batch = order[start:start + 64]
            optimizer.zero_grad()
            probs = model(images[batch])
            loss = torch.nn.functional.nll_loss(torch.log(probs + 1e-9), labels[batch])
            loss.backward()
            optimizer.step()
    model.eval()
    return model


def top1_accuracy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float((np.asarray(probabilities).argmax(axis=-1) == labels).mean())
