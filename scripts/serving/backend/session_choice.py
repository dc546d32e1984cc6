"""Which of an instance's two ONNX Runtime sessions runs a call made while it computes alone.

Why: each instance keeps a wide session (one thread per reachable core) and a narrow one (1
thread); while a sibling instance computes, the narrow one runs (serving/backend/instance_activity.py).
When the instance computes alone, which is faster depends on the machine and the model, and no
fixed rule is right on every host. Measured, one text of the held-out corpus per call (the
INT8-mixed encoder):
- 2-core AMD EPYC (Zen 1, AVX2): a lone text 14.7 ms wide, 26.7 ms narrow: wide wins.
- 2-core Intel Xeon (KVM, AVX-512 VNNI/AMX), wide not spinning: 3.10 ms wide, 2.27 ms narrow: the
  call is so short that waking the second thread at each parallel section costs more than it
  saves; narrow wins. A digit image (~50 us) is faster on one thread on every host measured.
So each instance measures both on its own calls and runs the faster one.

How it measures matters as much as what. An earlier version timed every lone call, kept a running
average per size class and chose per class. It locked in whichever session happened to lead: a
session's first call after the other one ran is slower (its weights went cold: in-process, a lone
text 2.92 ms on one session, 3.47 ms alternating between two; docs/performance.md), the preferred
session was timed warm and the other, one re-check call in 64, always cold, and a stalled call
(the host is shared) stayed in the other's average until its next re-check. On a 2-core Zen 4 EPYC
it ran the 1-thread session for 87% of lone texts (ONNX Runtime 4.36 ms per call) in one start
and mostly the wide one in another; forced, one server, 6 s turns, the wide session served
192/224/189/180 texts/s at c=1, the 1-thread one 175/188/149/163, that chooser 169/201/194/165. Now:
- the sessions are compared in stints of `stint_calls` consecutive calls, and a call is timed only
  once the instance's last `cold_calls` calls ran on the same session (warm, as in steady use). One
  call is not enough: in-process on the 2-core Intel Xeon, the first 3-4 calls after a switch took
  1.3-2.2x a session's warm time (docs/measurements/2026-12-05-intel-xeon/session-settling/), so with
  only the first call of a stint untimed every re-check judged the other session on half-cold calls
  (at text c=1 in the server the wide session ran 7-8% faster per call than the 1-thread one when
  forced, yet the choice ran it for 4% to 96% of lone calls from one server start to the next; in
  4 starts of each, before and after this change, none wandered, so the fix rests on the in-process
  figures);
- a session's first `fresh_calls` calls in the instance's life are not timed either. Why: in the
  server the wide session's first stint runs at load (Triton's warm-up requests), while the other
  partition loads its models, and a fresh session's first calls are slow besides; traced at text
  c=1 on the 2-core Intel Xeon, the wide session's calls 5-16 took 1.4-6x its later time and the
  1-thread session's first ten 1.2-2.3x. The first choice, made on them, was the 1-thread session
  in most starts and held for a whole `recheck_every` interval: in the first 10 s of c=1 after a
  start the wide session ran 55/77/67/77% of lone calls in four starts, 95% in each of four with
  `fresh_calls` (247.8/246.7/256.1/268.2 against 229.9/253.1/232.8/262.0 texts/s in alternating
  starts; the next 10 s alike: docs/measurements/2026-12-05-intel-xeon/session-settling/);
- a session's time for a size class (a power of two of the elements fed) is the median of its last
  `window` warm calls of that class, so a stalled call does not decide;
- both sessions are compared on like calls (per class), and the instance makes one choice, the
  session that would have run the calls it has seen faster (classes weighted by their calls);
  only a class clearly faster on the other session (`class_margin`) runs that one (a lone digit
  image is faster on one thread, a batch of 16 on two): each switch between sessions pays the cold
  start, which a choice per class on small differences would pay at every other call;
- once chosen, one stint in `recheck_every` calls runs on the other session (on each in turn while
  some classes run each), so a change in the machine's load is noticed; the decision after it
  judges that session, in each class of which the stint timed `recheck_own_calls` calls, on those
  calls alone: its older times there are from before (the Zen 4 host's slow spells, minutes in
  which two threads gain nothing, end sharply; judged on the whole window, a stint spread over four
  size classes replaced too few of the spell's times, and the instance stayed on one thread for two
  or three re-checks after the spell: docs/performance.md);
- a re-check that changed the choice is confirmed: the session it left gets a re-check stint of its
  own after `confirm_calls` lone calls instead of `recheck_every` (once; a real change then stays).
  Why: a stint times few calls per size class (16 calls, 4 of them cold, over several classes), and
  noise in them can move the instance; at text c=1 in the server on the 2-core Intel Xeon, one such
  re-check put an instance on the 1-thread session, 7-8% slower per call there, for 512 of a
  window's ~3,000 lone calls (docs/measurements/2026-12-05-intel-xeon/session-settling/);
- while the cores the wide session's workers would run on were busy (above `busy_cores_share` of
  their time lately, serving/backend/core_load.py), lone calls run narrow and are not timed: a
  lone call then is a gap in other work (at c=2, between the sibling's calls), and its second
  thread would take a core that work needs (text c=2 measured 243 against 286 texts/s before a
  rule of this kind);
- after a call made while a sibling computed (narrow), lone calls that would run wide (the choice,
  or the start of an exploring or re-check stint on it) stay narrow, untimed, until the instance has
  made `settle_calls` lone calls in a row; a stint under way goes on (it times what it tries, its
  first `cold_calls` calls untimed). Why: under moderate load lone calls and calls beside a sibling
  alternate, and a wide call after narrow ones starts cold. In-process on the 2-core Intel Xeon
  (lone held-out texts 2.5 ms apart), a mix of 30% wide and 70% narrow calls took 2.48 ms per call
  against 1.83 ms narrow only and 1.96 ms wide only, its wide calls 3.46 ms
  (docs/measurements/2026-12-05-intel-xeon/session-settling/). Warm-only timing never sees that
  price, so the choice cannot weigh it; the streak keeps the wide session, and the exploring of an
  instance that has not chosen yet, for stretches of lone work, where the wide calls are warm and
  are not cut into cold pieces by a sibling's next call.

Pure (no ONNX Runtime here): the `onnxruntime_cpu` backend asks `choose` for a lone call and
`record`s every call it makes; tests/unit/serving/backend/test_session_choice.py drives it with
made-up times.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Session(enum.Enum):
    WIDE = "wide"
    NARROW = "narrow"


class Reason(enum.Enum):
    """Why a call ran on its session: the `reason` label of `serving_framework_calls_total`, so an
    operator (and the peer report) can tell a measured choice from a forced one."""

    #: A sibling instance computed: narrow, so two instances do not ask for more threads than cores.
    SIBLING_BUSY = "sibling_busy"
    #: Alone, but the wide session's worker cores were busy with other work: narrow, untimed.
    CORES_BUSY = "cores_busy"
    #: Alone, wide by the choice, but a sibling computed during one of the last `settle_calls` calls:
    #: narrow (warm), untimed.
    SETTLING = "settling"
    #: A stint before the instance has timed both sessions enough to prefer one.
    EXPLORING = "exploring"
    #: One of the stints that re-time the sessions every `recheck_every` lone calls.
    RECHECK = "recheck"
    #: The session the instance prefers, from both sessions' medians.
    PREFERRED = "preferred"
    #: The other session, for a size class clearly faster on it (`class_margin`).
    SIZE_CLASS = "size_class"


@dataclass(frozen=True)
class ChoicePolicy:
    """How long each session is tried before one is preferred, and how often the other is re-tried."""

    #: Consecutive lone calls on one session while comparing; the first `cold_calls` are not timed.
    stint_calls: int = 16
    #: A call is timed only after this many calls in a row on its session (the weights warm up).
    cold_calls: int = 4
    #: A session's first this many calls in the instance's life are not timed (a fresh session).
    fresh_calls: int = 16
    #: Warm timed calls of each session before one is preferred.
    explore_calls: int = 24
    #: After that, one stint in this many lone calls runs on the other session (0: never).
    recheck_every: int = 512
    #: A session's time for a size class: the median of its last this many warm calls of the class.
    window: int = 15
    #: Lone calls run narrow, untimed, while the wide session's worker cores were busier than this.
    busy_cores_share: float = 0.85
    #: After a call beside a sibling, lone calls run narrow, untimed, until this many lone calls came
    #: in a row (0: the instance's choice at once).
    settle_calls: int = 2
    #: A size class runs the other session than the instance's choice when that one's median is
    #: this much faster for it (and each session has `window` // 3 warm calls of the class).
    class_margin: float = 0.15
    #: A re-check stint that timed at least this many calls of a size class is judged on those calls
    #: alone for the class, not on its session's older times (from before a change of the host).
    recheck_own_calls: int = 3
    #: A re-check that changed the instance's choice is itself re-checked after this many lone calls
    #: instead of `recheck_every` (once; 0: at the usual interval).
    confirm_calls: int = 48

    def __post_init__(self) -> None:
        if (self.cold_calls < 1 or self.stint_calls <= self.cold_calls or self.explore_calls < 1
                or self.recheck_every < 0 or self.window < 1 or not 0 <= self.busy_cores_share <= 1
                or self.class_margin < 0 or self.recheck_own_calls < 1 or self.settle_calls < 0
                or self.confirm_calls < 0 or self.fresh_calls < 0):
            raise ValueError(f"{self}: cold_calls must be >= 1 and stint_calls > cold_calls (a stint's first "
                             "cold_calls calls are not timed), explore_calls >= 1, "
                             "recheck_every >= 0, window >= 1, busy_cores_share in [0, 1], class_margin >= 0, "
                             "recheck_own_calls >= 1, settle_calls >= 0, confirm_calls >= 0 and fresh_calls >= 0.")


def size_class(elements: int) -> int:
    """The power-of-two class of a call feeding `elements` input elements (rows x width)."""
    return max(int(elements), 1).bit_length() - 1


def size_class_range(size: int) -> str:
    """The elements a size class covers, `low-high` (4 -> "16-31"): its label on the metrics."""
    return f"{2 ** size}-{2 ** (size + 1) - 1}"


_SESSIONS = (Session.WIDE, Session.NARROW)  # index 0 and 1 below


class _ClassTimes:
    """One size class: the last warm times (seconds, a ring of `window`) and the warm timed calls
    per session (by index), the lone calls seen, and the session it runs if not the instance's."""

    __slots__ = ("recent_s", "timed", "seen", "own", "fresh")

    def __init__(self) -> None:
        self.recent_s, self.timed, self.seen, self.own = ([], []), [0, 0], 0, None
        self.fresh = [0, 0]  # warm timed calls per session since its last re-check stint began

    def median_s(self, index: int, latest: int = 0) -> float:
        """The median of the session's window, or of its `latest` times only."""
        recent, timed = self.recent_s[index], self.timed[index]
        if latest:
            latest = min(latest, len(recent))
            recent = [recent[(timed - 1 - k) % len(recent)] for k in range(latest)]  # a full ring or a growing list
        recent = sorted(recent)
        return recent[len(recent) // 2]


class SessionChoice:
    """The instance's choice, the stint under way and per size class the times of both sessions.

    Asked on every framework call, so it is kept to a few attribute reads (about a microsecond per
    choose + record; a digit image is ~50 us in ONNX Runtime)."""

    def __init__(self, policy: ChoicePolicy = ChoicePolicy()):
        self.policy = policy
        self._classes: dict[int, _ClassTimes] = {}
        self._best: int | None = None  # index of the preferred session; None while exploring
        self._last: int | None = None  # session of the instance's previous call (lone or not)
        self._on_last = 0               # the instance's calls in a row on that session
        self._lifetime = [0, 0]         # calls per session since the instance started
        self._timed = [0, 0]           # warm timed calls per session, all classes
        self._stint_on, self._stint_left, self._stint_over = 0, 0, False
        self._since_check = 0           # lone calls since the last re-check stint
        self._check_on = 1              # session of the next re-check stint (they alternate)
        self._confirming = False        # the next re-check confirms a choice the last one changed
        self._untimed = False           # the last lone call ran narrow, untimed (busy cores, settling)
        self._lone_streak = policy.settle_calls  # the instance's calls in a row with no sibling computing
        self._stint_reason = Reason.EXPLORING
        #: How many times the instance (re)made its choice (the backend republishes `summary()` then).
        self.decisions = 0
        #: Why the last lone call got its session (read by the backend right after `choose`).
        self.reason = Reason.EXPLORING

    def _times(self, size: int) -> _ClassTimes:
        key = size_class(size)
        times = self._classes.get(key)
        if times is None:
            times = self._classes[key] = _ClassTimes()
        return times

    def preferred(self, size: int | None = None) -> Session | None:
        """The session lone calls (of `size` elements) run on, once both were timed enough; None
        while exploring."""
        if self._best is None:
            return None
        own = None if size is None else self._times(size).own
        return _SESSIONS[self._best if own is None else own]

    def choose(self, size: int, worker_cores_busy: float = 0.0) -> Session:
        """The session for a lone call feeding `size` elements, the wide session's worker cores
        having been busy `worker_cores_busy` (a share) lately."""
        self._untimed = worker_cores_busy > self.policy.busy_cores_share
        if self._untimed:
            self.reason = Reason.CORES_BUSY
            return Session.NARROW
        times = self._times(size)
        times.seen += 1
        if self._stint_left:
            self._stint_left -= 1
            self.reason = self._stint_reason
            return _SESSIONS[self._stint_on]
        if self._stint_over:  # decide with what the stint just timed
            self._stint_over = False
            self._decide()
        every, by_class = self.policy.recheck_every, False
        if self._best is None:  # exploring: a stint on the session with fewer timed calls (wide first)
            index, reason = (0 if self._timed[0] <= self._timed[1] else 1), Reason.EXPLORING
        elif every and self._since_check >= every:  # re-check: a stint on each session in turn
            by_class = any(t.own is not None for t in self._classes.values())  # some classes run each session
            index, reason = (1 - self._check_on if by_class else 1 - self._best), Reason.RECHECK
        else:
            self._since_check += 1
            index = self._best if times.own is None else times.own
            reason = Reason.PREFERRED if times.own is None else Reason.SIZE_CLASS
        if index == 0 and self._last == 1 and self._lone_streak < self.policy.settle_calls:
            # a sibling computed lately: the wide session would start cold (and again after the next one)
            self._untimed, self.reason = True, Reason.SETTLING
            return Session.NARROW
        if reason is Reason.RECHECK:
            self._since_check = 0
            if by_class:
                self._check_on = index
        if reason in (Reason.EXPLORING, Reason.RECHECK):
            return self._start_stint(index, reason)
        self.reason = reason
        return _SESSIONS[index]

    def _start_stint(self, index: int, reason: Reason) -> Session:
        self._stint_on, self._stint_left, self._stint_over = index, self.policy.stint_calls - 1, True
        self._stint_reason = self.reason = reason
        if reason is Reason.RECHECK:
            for times in self._classes.values():
                times.fresh[index] = 0
        return _SESSIONS[index]

    def record(self, size: int, session: Session, seconds: float, alone: bool = True) -> None:
        """A call feeding `size` elements ran on `session` for `seconds`; `alone`: no sibling instance
        computed meanwhile. Every call is recorded (a call while siblings compute runs narrow and
        makes the next wide calls cold); only a lone call after `cold_calls` calls in a row on the same
        session is timed."""
        i = 0 if session is Session.WIDE else 1
        self._on_last = self._on_last + 1 if self._last == i else 1
        self._lifetime[i] += 1
        warm = self._on_last > self.policy.cold_calls and self._lifetime[i] > self.policy.fresh_calls
        self._last = i
        self._lone_streak = self._lone_streak + 1 if alone else 0
        if not (alone and warm) or self._untimed:
            return
        times, window = self._times(size), self.policy.window
        recent = times.recent_s[i]
        if len(recent) < window:
            recent.append(seconds)
        else:
            recent[times.timed[i] % window] = seconds
        times.timed[i] += 1
        times.fresh[i] += 1
        self._timed[i] += 1

    def _median_s(self, times: _ClassTimes, index: int) -> float:
        """What a decision compares: the session's window, or, for the session a re-check stint just
        ran, that stint's own calls of the class when it timed `recheck_own_calls` of them (its older
        times may be from a slow spell of the host that has ended: docs/performance.md)."""
        rechecked = self._stint_reason is Reason.RECHECK and index == self._stint_on  # _decide runs right after a stint
        if rechecked and times.fresh[index] >= self.policy.recheck_own_calls:
            return times.median_s(index, latest=times.fresh[index])
        return times.median_s(index)

    def _decide(self) -> None:
        """Prefer the session that would have run the lone calls seen faster: per size class timed on
        both, its calls x the difference of the medians. Undecided until each has `explore_calls`.
        Then a class whose calls were clearly faster on the other session (`class_margin`) runs that
        one: tiny calls may be faster on one thread where batches gain from two."""
        if min(self._timed) < self.policy.explore_calls:
            return
        both = [t for t in self._classes.values() if min(t.timed)]
        if not both:
            return
        median = self._median_s
        wide_minus_narrow = sum(t.seen * (median(t, 0) - median(t, 1)) for t in both)
        before = self._best
        self._best = best = 0 if wide_minus_narrow <= 0 else 1
        self.decisions += 1
        if self._stint_reason is Reason.RECHECK:  # a changed choice is re-checked soon, once
            confirm = self.policy.confirm_calls
            flipped = before is not None and best != before and not self._confirming and confirm
            self._confirming = bool(flipped)
            if flipped:
                self._since_check = max(0, self.policy.recheck_every - confirm)
        enough, margin = max(1, self.policy.window // 3), 1 - self.policy.class_margin
        for t in both:
            t.own = 1 - best if min(t.timed) >= enough and median(t, 1 - best) < margin * median(t, best) else None

    def medians_s(self) -> dict[int, dict[str, float]]:
        """Per size class, the median seconds of each session's window: what `_decide` compares, except
        right after a re-check stint, which judges its session on the stint's own calls of a class
        (`recheck_own_calls`); the window then holds those calls as its latest."""
        return {size: {s.value: times.median_s(i) for i, s in enumerate(_SESSIONS) if times.timed[i]}
                for size, times in sorted(self._classes.items())}

    def summary(self) -> dict[int, dict[str, float]]:
        """`medians_s` in milliseconds, rounded (for logs and tests)."""
        return {size: {name: round(seconds * 1e3, 3) for name, seconds in sessions.items()}
                for size, sessions in self.medians_s().items()}
