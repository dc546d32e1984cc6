"""model_build.data.digits: training gives the same weights on any number of build threads.

Why: torch sums its parallel reductions in another order on another thread count. The parallel
prebuild (`make build-engines`, 1 thread per build) and a sequential build (2 threads) trained
weights up to 9e-7 apart under one build fingerprint, so the cache could not tell them apart."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_training_on_one_or_two_build_threads_gives_identical_weights_and_keeps_the_callers_threads():
    from model_build.data import digits

    splits = digits.load_digits_splits(seed=0)
    weights = {}
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            net = digits.train_digit_cnn(splits, width=4, epochs=2, seed=0)
            assert torch.get_num_threads() == threads  # export and validation run on the build's threads
            weights[threads] = torch.cat([p.detach().flatten() for p in net.parameters()])
    finally:
        torch.set_num_threads(before)
    assert torch.equal(weights[1], weights[2])
