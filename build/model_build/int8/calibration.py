"""Calibration sets: which TRAINING rows calibrate an INT8 variant, stratified or at random.

Static INT8 needs activation ranges, and ranges come from the data the model is shown while
calibrating. A small set drawn at random can miss a class (classifier) or the long sequences
(embedder) and so under-estimate a range; a stratified set draws from every stratum in proportion
to its share of the training data. Both samplers are here, with the same size and seed, so the
build report can compare them (the study in `model_build/reports/benchmark.py`).

The functions only ever see training rows: they return positions into the arrays the caller
passes, and the recipes pass training data only (digits: `splits.train_*`; text: the corpus'
train split). Nothing here touches the disk.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterator, Mapping, Sequence

import numpy as np

from model_build.errors import BuildError

#: Token-count edges of the embedder's sequence-length strata: 1-16, 17-32, 33-64, 65-128, >128.
DEFAULT_LENGTH_EDGES = (16, 32, 64, 128)


class Sampling(str, Enum):
    STRATIFIED = "stratified"
    RANDOM = "random"


@dataclass(frozen=True)
class CalibrationSet:
    """Rows (positions into the training arrays) chosen for calibration, and how they were chosen."""

    rows: tuple[int, ...]
    sampling: Sampling
    seed: int
    #: stratum -> rows drawn from it (empty for random sampling: no strata were used).
    per_stratum: Mapping[str, int]

    def __post_init__(self) -> None:
        if not self.rows:
            raise BuildError("a calibration set needs at least one row.")
        if len(set(self.rows)) != len(self.rows):
            raise BuildError("a calibration set must not repeat a row.")
        if self.per_stratum and sum(self.per_stratum.values()) != len(self.rows):
            raise BuildError(f"per-stratum counts {dict(self.per_stratum)} do not add up to {len(self.rows)} rows.")

    @property
    def size(self) -> int:
        return len(self.rows)

    def describe(self) -> dict:
        return {"sampling": self.sampling.value, "size": self.size, "seed": self.seed, "per_stratum": dict(self.per_stratum)}


def _check_size(size: int, available: int) -> None:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise BuildError(f"calibration size {size!r} must be a positive integer.")
    if size > available:
        raise BuildError(f"calibration size {size} exceeds the {available} training rows available.")


def proportional_allocation(stratum_sizes: Mapping[str, int], size: int) -> dict[str, int]:
    """Split `size` over strata in proportion to their sizes (largest-remainder rounding).

    Every count is at most its stratum's size and the counts add up to `size` exactly; ties in the
    remainder go to the larger stratum, then to the stratum name, so the result is deterministic.
    When `size` allows one row per stratum, every stratum gets at least one: a small stratum (the
    41 longest training texts of 2,837) must not be left out by rounding, which is what stratifying
    is for; its row comes from the stratum with the most rows.
    """
    total = sum(stratum_sizes.values())
    _check_size(size, total)
    quotas = {name: size * count / total for name, count in stratum_sizes.items()}
    counts = {name: int(np.floor(q)) for name, q in quotas.items()}
    if size >= sum(1 for n in stratum_sizes.values() if n):
        for name in sorted(stratum_sizes, key=lambda n: (quotas[n], n)):
            if stratum_sizes[name] and counts[name] == 0:
                counts[name] = 1
        while sum(counts.values()) > size:  # the floors plus the guaranteed rows: give back from the largest
            counts[max((n for n in counts if counts[n] > 1), key=lambda n: (counts[n] - quotas[n], counts[n], n))] -= 1
    left = size - sum(counts.values())
    order = sorted(stratum_sizes, key=lambda n: (-(quotas[n] - counts[n]), -stratum_sizes[n], n))
    for name in order:
        if left == 0:
            break
        if counts[name] < stratum_sizes[name]:
            counts[name] += 1
            left -= 1
    return counts


def stratified_calibration_set(strata: Sequence, size: int, seed: int) -> CalibrationSet:
    """Rows drawn per stratum in proportion to the stratum's share of the training rows.

    `strata[i]` is training row i's stratum (a class label, or a sequence-length bucket from
    `sequence_length_strata`). Within a stratum rows are drawn without replacement.
    """
    labels = np.asarray([str(s) for s in strata])
    names, counts = np.unique(labels, return_counts=True)
    allocation = proportional_allocation(dict(zip(names.tolist(), counts.tolist())), size)
    rng = np.random.default_rng(seed)
    rows: list[int] = []
    for name in sorted(allocation):
        members = np.flatnonzero(labels == name)
        rows.extend(rng.choice(members, size=allocation[name], replace=False).tolist())
    return CalibrationSet(tuple(sorted(rows)), Sampling.STRATIFIED, seed, {n: c for n, c in allocation.items() if c})


def random_calibration_set(num_rows: int, size: int, seed: int) -> CalibrationSet:
    """`size` training rows drawn uniformly without replacement: the baseline for the comparison."""
    _check_size(size, num_rows)
    rows = np.random.default_rng(seed).choice(num_rows, size=size, replace=False)
    return CalibrationSet(tuple(sorted(int(r) for r in rows)), Sampling.RANDOM, seed, {})


def calibration_set(sampling: Sampling | str, strata: Sequence, size: int, seed: int) -> CalibrationSet:
    """The set `sampling` asks for, over the training rows described by `strata`."""
    sampling = Sampling(sampling)
    if sampling is Sampling.STRATIFIED:
        return stratified_calibration_set(strata, size, seed)
    return random_calibration_set(len(strata), size, seed)


def sequence_length_strata(token_counts: Sequence[int], edges: Sequence[int] = DEFAULT_LENGTH_EDGES) -> list[str]:
    """Name each text's length bucket, e.g. "17-32" tokens; the last bucket is open ("129+")."""
    edges = tuple(int(e) for e in edges)
    if not edges or list(edges) != sorted(set(edges)) or edges[0] < 1:
        raise BuildError(f"length edges {edges} must be positive and strictly increasing.")
    names = [f"{lo + 1}-{hi}" for lo, hi in zip((0, *edges[:-1]), edges)] + [f"{edges[-1] + 1}+"]
    return [names[int(np.searchsorted(edges, n, side="left"))] for n in token_counts]


def feed_batches_from_rows(train_feeds: Mapping[str, np.ndarray], rows: Sequence[int], batch_size: int = 32) -> Iterator[dict[str, np.ndarray]]:
    """Model feeds for the calibration rows of fixed-shape training arrays, in batches."""
    index = np.asarray(rows)
    for start in range(0, len(index), batch_size):
        chunk = index[start:start + batch_size]
        yield {name: array[chunk] for name, array in train_feeds.items()}
