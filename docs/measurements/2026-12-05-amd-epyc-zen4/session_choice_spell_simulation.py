"""The session choice across a slow spell of the host, simulated (made-up times, no ONNX Runtime).

Usage, from the repository root (the old rule from git, the new one from the tree):
    git show abf7172:scripts/serving/backend/session_choice.py > /tmp/session_choice_old.py
    .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/session_choice_spell_simulation.py \
        /tmp/session_choice_old.py scripts/serving/backend/session_choice.py

Per call: size from the mix; one thread takes 0.09 ms per token + 0.6 ms; two threads x1.6 faster
outside a spell and 8% slower in one; +-15% noise; 2% of calls stalled 3x; +1 ms on the first call
after a switch of sessions. Default ChoicePolicy.
"""
import importlib.util
import random
import statistics
import sys

MIXES = {"paragraphs": [24] * 25 + [45] * 35 + [90] * 30 + [128] * 10, "heldout": [20] * 70 + [40] * 27 + [80] * 3}


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def call(m, choice, size, wide_factor, last):
    one = 0.0001 * size * 0.9 + 0.0006
    base = {m.Session.WIDE: one * wide_factor, m.Session.NARROW: one}
    which = choice.choose(size)
    took = base[which] * random.uniform(0.85, 1.15) * (3 if random.random() < 0.02 else 1)
    choice.record(size, which, took + (0.001 if last not in (None, which) else 0))
    return which, took, base


def spell_end(m, sizes):
    lags, lost = [], []
    for seed in range(20):
        random.seed(seed)
        choice, last = m.SessionChoice(), None
        for phase, factor in (("before", 1 / 1.6), ("spell", 1.08), ("after", 1 / 1.6)):
            lag, cost = None, 0.0
            for k in range(3000):
                last, _, base = call(m, choice, random.choice(sizes), factor, last)
                if phase == "after":
                    cost += base[last] - base[m.Session.WIDE]
                    if lag is None and choice.preferred() is m.Session.WIDE:
                        lag = k
        lags.append(3000 if lag is None else lag)
        lost.append(cost)
    return statistics.median(lags), statistics.median(lost)


def steady(m, ratio):
    total = ideal = 0.0
    flips = 0
    for seed in range(5):
        random.seed(seed)
        choice, last, preferred = m.SessionChoice(), None, None
        for _ in range(20000):
            size = random.choice(MIXES["paragraphs"])
            last, took, base = call(m, choice, size, ratio, last)
            total, ideal = total + took, ideal + min(base.values())
            now = choice.preferred()
            flips += now is not None and preferred is not None and now != preferred
            preferred = now
    return total / ideal, flips / 5


if __name__ == "__main__":
    for label, path in (("old", sys.argv[1]), ("new", sys.argv[2])):
        m = load(path, f"session_choice_{label}")
        for mix, sizes in MIXES.items():
            lag, lost = spell_end(m, sizes)
            print(f"{label} {mix}: back on wide {lag:.0f} calls after the spell, {lost * 1e3:.0f} ms lost on narrow")
        for ratio in (0.62, 0.95, 1.0, 1.05, 1.3):
            time_ratio, flips = steady(m, ratio)
            print(f"{label} steady wide/narrow {ratio}: time x{time_ratio:.3f} of ideal, {flips:.1f} flips per 20k calls")
