"""ONNX Runtime latency on this CPU, measured so that variants can be compared fairly.

The build machine is shared and noisy (run-to-run swings of 15% were seen), so variants are never
timed in separate runs: every repeat times each session once, in turn (interleaved), and the
median per session is kept. Only ratios from ONE call are meaningful.
"""
from __future__ import annotations

import time
from typing import Mapping

import numpy as np


def median_latencies(sessions: Mapping[str, object], feeds: Mapping[str, np.ndarray], repeats: int = 5,
                     warmup_outputs: dict | None = None) -> dict[str, float]:
    """Median seconds per `session.run` on the same feeds, sessions interleaved; one warm-up each.
    `warmup_outputs`, if given, receives each session's warm-up outputs (name -> list), so a caller
    that needs the outputs of exactly these feeds does not run them again."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    for name, session in sessions.items():
        outputs = session.run(None, dict(feeds))
        if warmup_outputs is not None:
            warmup_outputs[name] = outputs
    samples: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(repeats):
        for name, session in sessions.items():
            started = time.perf_counter()
            session.run(None, dict(feeds))
            samples[name].append(time.perf_counter() - started)
    return {name: float(np.median(values)) for name, values in samples.items()}


def batch_of(feeds: Mapping[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """The first `batch` rows of each feed, tiled if there are fewer rows than asked for."""
    out = {}
    for name, array in feeds.items():
        reps = -(-batch // len(array))
        out[name] = np.concatenate([array] * reps)[:batch] if reps > 1 else array[:batch]
    return out
