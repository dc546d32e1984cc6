"""Elastic CPU sets: each partition owns its share's cores, and lends them while it is idle.

Why: pinned CPU sets isolate partitions (a noisy neighbour leaves the other's P99 within ~1.4x)
but waste the machine when one partition is idle (on 2 cores the main models get one core while
the fallback partition, which only sees traffic in overload, keeps the other idle). CPU shares
(cgroup weights) use the whole machine but isolate poorly: measured here, a flooding neighbour
raised the quiet partition's P99 4.8x, because every hop of a request (HTTP thread, backend stub,
ONNX Runtime thread) waits for the scheduler to preempt the neighbour's busy threads.

So the supervisor watches how much CPU each partition's processes used on each tick and moves
cores: a busy partition keeps its own cores ("home", the CPU-sets plan) and borrows the cores of
partitions that are idle, in proportion to the borrowers' shares; an idle partition keeps its home
cores too (its first request runs at once, beside the borrower) and gets them back to itself on the
next tick after it becomes busy. Even one request at a time gains from a borrowed core (ONNX
Runtime runs one thread per reachable core: a lone text took 14.7 ms on two cores, 26.7 ms on
one); a tiny model's sequential stream pays for it instead, ~12% at P50, its request's hops waking
threads on the other core (docs/partitions.md). Busy is fast to set (one tick) and slow to clear
(`idle_after_s` below the threshold), so a burst does not make cores flap. (`saturated`, above 85%
of the home cores, is reported.)

`lend_idle_cores` and `ActivityTracker` are pure; `group_members`, `cpu_seconds` and `pin_threads`
read /proc and call sched_setaffinity on every thread of a partition's processes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, Sequence

from contracts.partition_plan import largest_remainder
from contracts.processes import cpu_ticks, proc_stat_fields


class Activity(str, Enum):
    IDLE = "idle"
    BUSY = "busy"
    SATURATED = "saturated"
    #: Not running (starting, restarting, crash loop): keeps its home cores, lends and borrows nothing.
    DOWN = "down"


def lend_idle_cores(home: Mapping[str, Sequence[int]], shares: Mapping[str, int],
                    activity: Mapping[str, Activity],
                    borrowing: frozenset = frozenset({Activity.BUSY, Activity.SATURATED}),
                    core_order: Sequence[int] = ()) -> dict[str, tuple[int, ...]]:
    """The cores each partition may run on now.

    Partitions whose activity is in `borrowing` (default: busy or saturated): their home cores
    plus the idle partitions' cores, handed out in proportion to the borrowers' shares
    (declaration order breaks ties), in `core_order` (the plan's, a physical core's threads together:
    two borrowers then never split one core's threads between them). Everyone else: home.
    """
    assigned = {name: list(cores) for name, cores in home.items()}
    borrowers = [name for name in home if activity.get(name) in borrowing]
    spare = [core for name in home if activity.get(name, Activity.IDLE) is Activity.IDLE for core in home[name]]
    if not borrowers or not spare:
        return {name: tuple(cores) for name, cores in assigned.items()}
    position = {core: i for i, core in enumerate(core_order)}
    spare.sort(key=lambda core: (position.get(core, len(position)), core))
    # the spare cores in proportion to the borrowers' shares, largest remainder first (rounding each
    # share on its own handed out more cores than were spare with three or more borrowers)
    total = sum(shares[name] for name in borrowers)
    counts = largest_remainder([len(spare) * shares[name] / total for name in borrowers], len(spare))
    given = 0
    for name, count in zip(borrowers, counts):
        assigned[name] += spare[given:given + count]
        given += count
    return {name: tuple(sorted(cores)) for name, cores in assigned.items()}


@dataclass
class ActivityTracker:
    """Per partition: idle, busy or saturating its home cores? From the CPU seconds its processes
    used between ticks."""

    #: CPU use above this fraction of ONE core over the last `window_s` marks a partition busy ...
    busy_fraction: float = 0.05
    window_s: float = 1.0
    #: ... and so does this much over the last tick alone (a flood is seen within one tick, while
    #: housekeeping spikes, a health probe or a metrics update, stay below it) ...
    burst_fraction: float = 0.25
    #: ... above this fraction of ALL its home cores, saturated ...
    saturated_fraction: float = 0.85
    #: ... and each is cleared only after this long below its threshold.
    idle_after_s: float = 2.0
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    last_busy_at: dict[str, float] = field(default_factory=dict)
    last_saturated_at: dict[str, float] = field(default_factory=dict)

    def update(self, partition: str, cpu_seconds: float, now: float, home_cores: int = 1) -> Activity:
        history = self.samples.setdefault(partition, [])
        history.append((now, cpu_seconds))
        while len(history) > 2 and now - history[1][0] >= self.window_s:
            history.pop(0)  # keep one sample at or before the window's start

        def usage(since: tuple[float, float]) -> float:
            return max(0.0, cpu_seconds - since[1]) / (now - since[0]) if now > since[0] else 0.0

        if len(history) >= 2:
            tick, window = usage(history[-2]), usage(history[0])
            if tick >= self.burst_fraction or (now - history[0][0] >= 0.8 * self.window_s and window >= self.busy_fraction):
                self.last_busy_at[partition] = now
            if tick >= self.saturated_fraction * home_cores:
                self.last_saturated_at[partition] = now
        recent = lambda table: partition in table and now - table[partition] < self.idle_after_s  # noqa: E731
        if recent(self.last_saturated_at):
            return Activity.SATURATED
        return Activity.BUSY if recent(self.last_busy_at) else Activity.IDLE

    def rebase(self, partition: str, joined_cpu_seconds: float) -> None:
        """Processes joined the partition's member list (stubs after a reload) with `joined_cpu_seconds`
        already used: shift its history by that much, so their past is not read as a burst of work
        (that marked an idle partition saturated and moved cores for `idle_after_s`)."""
        self.samples[partition] = [(t, cpu + joined_cpu_seconds) for t, cpu in self.samples.get(partition, [])]

    def forget(self, partition: str) -> None:
        """A restarted server starts a new count (its processes are new)."""
        for table in (self.samples, self.last_busy_at, self.last_saturated_at):
            table.pop(partition, None)


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (a partition's server and its backend stubs): a
    scan of /proc, so callers keep the list for a while."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = proc_stat_fields(f.read())
            except OSError:
                continue
            if int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the live processes among `pids`."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                total += cpu_ticks(f.read())
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def pin_threads(pids: Sequence[int], cpus: Sequence[int]) -> int:
    """sched_setaffinity on every thread of the processes `pids`; how many threads were pinned."""
    pinned = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
                pinned += 1
            except OSError:  # the thread just exited
                continue
    return pinned
