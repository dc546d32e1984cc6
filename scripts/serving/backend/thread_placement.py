"""Where an instance's threads run when its partition gives it several cores: the instance's main
thread on a home core (cores[turn % cores], the turn being the instance's index after the instances of
the partition's models declared before its model: contracts.partition_env), its wide session's worker
threads on the others.

Why: unpinned, the wide session was hardly ever faster than the 1-thread one inside the backend's
stub processes, although it is outside Triton; pinned this way it is, and a lone text gained
(interleaved A/B on a 2-core Zen 4, docs/performance.md, "A lone request: main thread on a home
core"): the scheduler no longer wakes the worker on the core its caller is computing on. Under load
each instance's 1-thread calls then run on its own core.

The partition's cores change under the elastic CPU sets (serving.runtime.elastic_cpus re-pins every
thread of a partition when its set changes), so `ThreadPlacement.keep` runs at the start of every
execution: one sched_getaffinity, and a new plan only when the main thread's set is no longer the one
this placement gave it. With one core there is nothing to split and nothing is pinned; nor with more
cores than the partition's own count (`owned`): such a set is not the partition's, as in a Kubernetes
pod on a node without the static CPU manager, which sees every CPU of the node, where pinning put the
first instance of every pod of the node on CPU 0.
`plan_cores` is pure; `ThreadPlacement` calls sched_setaffinity (Linux).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class CorePlan:
    """The cores of one instance's threads: `home` for its main thread, `workers` for the wide session's."""

    home: int
    workers: tuple[int, ...]


def plan_cores(allowed: Iterable[int], instance: int, owned: int | None = None) -> CorePlan | None:
    """Home = the instance's turn among the allowed cores (siblings get different homes while
    there are enough cores); the workers get every other allowed core. None with fewer than 2 cores,
    or more than `owned` (the partition's own core count, when known: a wider set is shared)."""
    cores = sorted(set(allowed))
    if len(cores) < 2 or (owned and len(cores) > owned):
        return None
    home = cores[instance % len(cores)]
    return CorePlan(home, tuple(c for c in cores if c != home))


def thread_ids() -> frozenset[int]:
    """This process's thread ids (diffed around a session's creation to find its worker threads)."""
    return frozenset(int(t) for t in os.listdir("/proc/self/task"))


class ThreadPlacement:
    """Keeps `plan_cores` applied to this process's main thread and one session's worker threads."""

    def __init__(self, instance: int, worker_tids: Sequence[int], owned: int | None = None):
        self.instance, self.worker_tids, self.owned = instance, tuple(worker_tids), owned
        self.left: frozenset[int] | None = None  # the main thread's cores as this placement left them
        self.workers: tuple[int, ...] = ()        # the worker threads' cores now (none: nothing pinned)

    def keep(self) -> None:
        """At the start of an execution (from the main thread): re-plan if the partition's cores
        changed. The main thread's set alone does not show every change: re-pinned to its home core
        only (the elastic sets' both-busy state), it kept the set this placement gave it while the
        workers lost their cores, and the wide session stayed in use with its 2 threads on 1 core."""
        current = frozenset(os.sched_getaffinity(0))
        if current == self.left and not self._workers_moved():
            return
        if self.left is None:  # first call: drop the threads that only lived while the session loaded
            self.worker_tids = tuple(t for t in self.worker_tids if os.path.exists(f"/proc/self/task/{t}"))
        plan = plan_cores(current, self.instance, self.owned)
        if plan is None:
            self.left, self.workers = current, ()
            return
        for tid in self.worker_tids:
            try:
                os.sched_setaffinity(tid, plan.workers)
            except OSError:  # a thread that exited: ONNX Runtime keeps its pool for the session's life
                continue
        os.sched_setaffinity(0, {plan.home})
        self.left, self.workers = frozenset({plan.home}), plan.workers

    def _workers_moved(self) -> bool:
        """A worker thread no longer runs on the cores this placement gave the workers (one syscall)."""
        if not self.workers:
            return False
        for tid in self.worker_tids:
            try:
                return frozenset(os.sched_getaffinity(tid)) != frozenset(self.workers)
            except OSError:  # a thread that exited: ask the next one
                continue
        return False
