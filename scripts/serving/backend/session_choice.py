"""Which of an instance's two ONNX Runtime sessions runs a call made while it computes alone.

Why: each instance keeps a wide session (one thread per reachable core) and a narrow one (1
thread); while a sibling instance computes, the narrow one runs (serving/backend/instance_activity.py).
When the instance computes alone, which is faster depends on the machine and the size of the call,
and no fixed rule is right on every host. Measured, in-process, one text of the held-out corpus
per call (the INT8-mixed encoder):
- 2-core AMD EPYC (Zen 1, AVX2): a lone text 14.7 ms wide, 26.7 ms narrow: wide wins.
- 2-core Intel Xeon (KVM, AVX-512 VNNI/AMX): 3.10 ms wide, 2.27 ms narrow (medians of 600 calls,
  1 ms apart): the call is so short that waking the second thread at each parallel section costs
  more than it saves; narrow wins. In the server, always-narrow gave text 172 vs 162 texts/s at
  c=1 and 398 vs 358 at c=4 (docs/performance.md).
So each instance measures both on its own calls, per size class (a power of two of the elements
the call feeds), and runs the faster one; one call in `recheck_every` of a class runs on the other
session, so a change in the machine's load is noticed. Only calls made alone are timed, so both
sessions are compared under the same conditions.

Pure (no ONNX Runtime here): the `onnxruntime_cpu` backend asks `choose`, times the call and
`record`s it; tests/unit/serving/backend/test_session_choice.py drives it with made-up times.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Session(enum.Enum):
    WIDE = "wide"
    NARROW = "narrow"


@dataclass(frozen=True)
class ChoicePolicy:
    """How much each session is tried before one is preferred, and how often the other is re-tried."""

    #: Calls of each session per size class before the faster is preferred (they alternate).
    explore_calls: int = 3
    #: After that, one call in this many of a class runs on the slower session (0: never).
    recheck_every: int = 64
    #: Weight of a new time in the running average of a class's calls on one session.
    smoothing: float = 0.2

    def __post_init__(self) -> None:
        if self.explore_calls < 1 or self.recheck_every < 0 or not 0 < self.smoothing <= 1:
            raise ValueError(f"{self}: explore_calls must be >= 1, recheck_every >= 0 and smoothing in (0, 1].")


def size_class(elements: int) -> int:
    """The power-of-two class of a call feeding `elements` input elements (rows x width)."""
    return max(int(elements), 1).bit_length() - 1


_SESSIONS = (Session.WIDE, Session.NARROW)  # index 0 and 1 below


class _ClassTimes:
    """One size class: running average seconds and timed calls per session (by index), the calls
    chosen so far, and the index of the faster session once both were tried enough."""

    __slots__ = ("average_s", "timed", "chosen", "best")

    def __init__(self) -> None:
        self.average_s, self.timed, self.chosen, self.best = [0.0, 0.0], [0, 0], 0, None


class SessionChoice:
    """Per size class: a running average of seconds per call on each session, and the choice.

    Asked on every framework call, so it is kept to a few attribute reads (measured 0.6 us per
    choose + record here; a digit image is ~500 us in the stub)."""

    def __init__(self, policy: ChoicePolicy = ChoicePolicy()):
        self.policy = policy
        self._classes: dict[int, _ClassTimes] = {}

    def _times(self, size: int) -> _ClassTimes:
        key = size_class(size)
        times = self._classes.get(key)
        if times is None:
            times = self._classes[key] = _ClassTimes()
        return times

    def preferred(self, size: int) -> Session | None:
        """The faster session of this size's class once both were tried enough; None before."""
        best = self._times(size).best
        return None if best is None else _SESSIONS[best]

    def choose(self, size: int) -> Session:
        times = self._times(size)
        times.chosen += 1
        if times.best is None:  # exploring: the session with fewer timed calls (wide first)
            return _SESSIONS[0 if times.timed[0] <= times.timed[1] else 1]
        every = self.policy.recheck_every
        return _SESSIONS[1 - times.best if every and times.chosen % every == 0 else times.best]

    def record(self, size: int, session: Session, seconds: float) -> None:
        """A call of this size that ran alone on `session` took `seconds`."""
        times, i = self._times(size), 0 if session is Session.WIDE else 1
        alpha = self.policy.smoothing
        times.average_s[i] = seconds if not times.timed[i] else (1 - alpha) * times.average_s[i] + alpha * seconds
        times.timed[i] += 1
        if min(times.timed) >= self.policy.explore_calls:
            times.best = 0 if times.average_s[0] <= times.average_s[1] else 1

    def summary(self) -> dict[int, dict[str, float]]:
        """Per size class, the average milliseconds of each session tried (for logs and tests)."""
        return {size: {s.value: round(times.average_s[i] * 1e3, 3) for i, s in enumerate(_SESSIONS) if times.timed[i]}
                for size, times in sorted(self._classes.items())}
