"""Elastic CPU sets: each partition owns its share's cores, and lends them while it is idle.

Why: pinned CPU sets isolate partitions (a noisy neighbour leaves the other's P99 within ~1.4x)
but waste the machine when one partition is idle (on 2 cores the main models get one core while
the fallback partition, which only sees traffic in overload, keeps the other idle). CPU shares
(cgroup weights) use the whole machine but isolate poorly: measured here, a flooding neighbour
raised the quiet partition's P99 4.8x, because every hop of a request (HTTP thread, backend stub,
ONNX Runtime thread) waits for the scheduler to preempt the neighbour's busy threads.

So the supervisor watches how much CPU each partition's processes used on each tick and moves
cores: a partition that saturates its own cores ("home", the CPU-sets plan) borrows the cores of
partitions that are idle, in proportion to the borrowers' shares; an idle partition keeps its home
cores too (its first request runs at once, beside the borrower) and gets them back to itself on the
next tick after it becomes busy. A partition that is busy but does not saturate its cores (e.g.
one request at a time) borrows nothing: more cores would not make it faster, and its latency
stays what it is when the others are busy too. Busy and saturated are fast to set (one tick) and
slow to clear (`idle_after_s` below the threshold), so a burst does not make cores flap.

`lend_idle_cores` and `ActivityTracker` are pure; `group_cpu_seconds` and `pin_process_group`
read /proc and call sched_setaffinity on every thread of a partition's processes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, Sequence


class Activity(str, Enum):
    IDLE = "idle"
    BUSY = "busy"
    SATURATED = "saturated"


def lend_idle_cores(home: Mapping[str, Sequence[int]], shares: Mapping[str, int],
                    activity: Mapping[str, Activity]) -> dict[str, tuple[int, ...]]:
    """The cores each partition may run on now.

    Saturated partitions: their home cores plus the idle partitions' cores, handed out in
    proportion to the borrowers' shares (declaration order breaks ties). Everyone else: home.
    """
    assigned = {name: list(cores) for name, cores in home.items()}
    borrowers = [name for name in home if activity.get(name) is Activity.SATURATED]
    spare = [core for name in home if activity.get(name, Activity.IDLE) is Activity.IDLE for core in home[name]]
    if not borrowers or not spare:
        return {name: tuple(cores) for name, cores in assigned.items()}
    total = sum(shares[name] for name in borrowers)
    given = 0
    for i, name in enumerate(borrowers):
        count = len(spare) - given if i == len(borrowers) - 1 else round(len(spare) * shares[name] / total)
        assigned[name] += spare[given:given + count]
        given += count
    return {name: tuple(sorted(cores)) for name, cores in assigned.items()}


@dataclass
class ActivityTracker:
    """Per partition: idle, busy or saturating its home cores? From the CPU seconds its processes
    used between ticks."""

    #: CPU use above this fraction of ONE core over a tick marks a partition busy at once ...
    busy_fraction: float = 0.05
    #: ... above this fraction of ALL its home cores, saturated ...
    saturated_fraction: float = 0.85
    #: ... and each is cleared only after this long below its threshold.
    idle_after_s: float = 2.0
    last_cpu: dict[str, float] = field(default_factory=dict)
    last_time: dict[str, float] = field(default_factory=dict)
    last_busy_at: dict[str, float] = field(default_factory=dict)
    last_saturated_at: dict[str, float] = field(default_factory=dict)

    def update(self, partition: str, cpu_seconds: float, now: float, home_cores: int = 1) -> Activity:
        previous_cpu, previous_time = self.last_cpu.get(partition), self.last_time.get(partition)
        self.last_cpu[partition], self.last_time[partition] = cpu_seconds, now
        if previous_cpu is not None and now > previous_time:
            used = max(0.0, cpu_seconds - previous_cpu) / (now - previous_time)
            if used >= self.busy_fraction:
                self.last_busy_at[partition] = now
            if used >= self.saturated_fraction * home_cores:
                self.last_saturated_at[partition] = now
        recent = lambda table: partition in table and now - table[partition] < self.idle_after_s  # noqa: E731
        if recent(self.last_saturated_at):
            return Activity.SATURATED
        return Activity.BUSY if recent(self.last_busy_at) else Activity.IDLE

    def forget(self, partition: str) -> None:
        """A restarted server starts a new count (its processes are new)."""
        for table in (self.last_cpu, self.last_time, self.last_busy_at, self.last_saturated_at):
            table.pop(partition, None)


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (a partition's server and its backend stubs): a
    scan of /proc, so callers keep the list for a while."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
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
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
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
