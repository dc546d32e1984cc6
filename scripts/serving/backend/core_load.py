"""How busy the cores a wide session's workers would run on were lately, from /proc/stat.

Why: a lone call on the wide session is faster, but its second thread takes a core. When that core
has other work (the sibling instance's next call, Triton's HTTP threads answering the other clients,
the fallback partition, a load generator on the same host), the call's own time may still improve
while the server's throughput drops, and the session choice, which times calls, cannot see that.
So it runs lone calls on one thread while the worker cores were busy with other work above a share
(serving/backend/session_choice.py; docs/performance.md has the interleaved A/B runs). The wide
session's own worker threads are not other work: their CPU time is taken out, or a wide call would
make the next one look crowded.

`core_times` and `busy_share` are pure; `CoreLoad` reads /proc/stat and the worker
threads' stat files (Linux; ~20 us + ~5 us a thread) at most once per `interval_s`, from the stub's
main thread.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

from contracts.processes import cpu_idle_and_total, cpu_ticks

PROC_STAT = "/proc/stat"


def core_times(proc_stat: str) -> dict[int, tuple[int, int]]:
    """Per core number, (idle, total) clock ticks since boot (contracts.processes reads the lines)."""
    return {int(name[3:]): ticks for name, ticks in cpu_idle_and_total(proc_stat).items() if name[3:].isdigit()}


def busy_share(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]],
               cores: Iterable[int], own_ticks: int = 0) -> float:
    """The share of `cores`' time between two readings that was busy with other work than
    `own_ticks` (0.0 when no tick passed)."""
    idle = total = 0
    for core in cores:
        if core in before and core in after:
            idle += after[core][0] - before[core][0]
            total += after[core][1] - before[core][1]
    return min(1.0, max(0.0, (total - idle - own_ticks) / total)) if total > 0 else 0.0


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # a thread that exited
        return ""


class CoreLoad:
    """The share of some cores busy with other work than some of this process's threads, over the
    last `interval_s` or more, re-read at most that often."""

    def __init__(self, interval_s: float = 0.1, read: Callable[[str], str] = _read,
                 clock: Callable[[], float] = time.monotonic):
        self.interval_s, self.clock, self.read = interval_s, clock, read
        self.at, self.times, self.own, self.share = clock(), core_times(read(PROC_STAT)), 0, 0.0

    def busy(self, cores: Iterable[int], own_threads: Iterable[int] = ()) -> float:
        now = self.clock()
        if now - self.at >= self.interval_s:
            times = core_times(self.read(PROC_STAT))
            own = sum(cpu_ticks(text) for text in (self.read(f"/proc/self/task/{tid}/stat") for tid in own_threads) if text)
            self.share = busy_share(self.times, times, cores, max(0, own - self.own))
            self.at, self.times, self.own = now, times, own
        return self.share
