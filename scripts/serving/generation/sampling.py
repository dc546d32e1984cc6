"""Choose the next token from a row of logits: greedy, or temperature / top-k / top-p sampling.

Greedy is `argmax` (ties go to the lowest id, as numpy and torch agree), so a greedy sequence is
reproducible token for token whatever else runs in its batch. Sampling draws from a per-request
numpy Generator seeded with `seed` (else from the OS), so a seeded request is reproducible too.
"""
from __future__ import annotations

import numpy as np

from serving.generation.requests import SamplingParams


def new_rng(params: SamplingParams) -> np.random.Generator:
    return np.random.default_rng(params.seed)


def sample_token(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    if params.greedy:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / params.temperature
    if not np.isfinite(scaled.max()):  # a temperature so small the scale overflows: its limit is greedy
        return int(np.argmax(logits))
    if params.top_k and params.top_k < scaled.size:
        kth = np.partition(scaled, -params.top_k)[-params.top_k]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs)
        cumulative = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cumulative, params.top_p) + 1)]
        mask = np.zeros_like(probs)
        mask[keep] = probs[keep]
        probs = mask / mask.sum()
    return int(rng.choice(probs.size, p=probs))
