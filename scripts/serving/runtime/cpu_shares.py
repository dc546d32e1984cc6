"""Soft CPU shares: every partition may use every core, and its `compute_share` is its WEIGHT when
partitions compete (what Kubernetes does with CPU requests).

Why not disjoint CPU sets by default: on a small host they waste the machine. With 2 cores and
two partitions, pinning gives the main models one core while the fallback partition (which sees
traffic only in overload) keeps the other idle. With shares, an idle partition costs nothing: the
busy one runs on every core; when both are busy each gets its share of the CPU time, and the
kernel's scheduler still wakes a lightly loaded partition's threads ahead of a saturating one's
(docs/partitions.md has the measured trade-off against CPU sets).

How a weight is enforced, first that works on this host (`detect_weight_method`):
1. cgroup v2 `cpu.weight` (1..10000) in a child of this process's cgroup with the cpu controller;
2. cgroup v1 `cpu.shares` (2..262144) under the cpu controller's mount;
3. process niceness (no privileges needed; raising niceness is always allowed): the partition with
   the largest share runs at nice 0 and the others at the nice step whose CFS weight ratio is
   closest to their share ratio (each nice step is x1.25).
The plan is pure (`plan_cpu_weights`, one `CpuWeight` a partition); `apply_in_child` runs between fork and exec of a server, so
the server and every backend stub it forks inherit the cgroup and the niceness.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Mapping

from contracts.devices import cgroup_memberships

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroup v1 cpu.shares of a 100% share (the kernel default is 1024 per group).
V1_SHARES_PER_100 = 1024
NICE_STEP_RATIO = 1.25


class WeightMethod(str, Enum):
    CGROUP_V2 = "cgroup_v2_cpu_weight"
    CGROUP_V1 = "cgroup_v1_cpu_shares"
    NICE = "nice"


@dataclass(frozen=True)
class CpuWeight:
    """How one partition's weight is applied: a cgroup directory to join, or a niceness."""

    partition: str
    share: int
    method: WeightMethod
    cgroup_dir: Path | None = None
    cgroup_value: int | None = None
    nice: int = 0

    def describe(self) -> str:
        if self.method is WeightMethod.NICE:
            return f"nice {self.nice}"
        knob = "cpu.weight" if self.method is WeightMethod.CGROUP_V2 else "cpu.shares"
        return f"{knob} {self.cgroup_value} in {self.cgroup_dir}"


def nice_levels(shares: Mapping[str, int]) -> dict[str, int]:
    """Niceness per partition: 0 for the largest share, +1 per x1.25 below it (at most 19)."""
    top = max(shares.values())
    return {name: min(19, round(math.log(top / share) / math.log(NICE_STEP_RATIO))) for name, share in shares.items()}


def v2_weight(share: int) -> int:
    """cpu.weight for a share in percent: 100% -> 10000 would dwarf other groups; use share x 100
    so that 50% -> 5000, 1% -> 100 (the kernel default for a group)."""
    return max(1, min(10000, share * 100))


def v1_shares(share: int) -> int:
    return max(2, min(262144, share * V1_SHARES_PER_100 // 100))


def plan_cpu_weights(shares: Mapping[str, int], method: WeightMethod, group_root: Path | None) -> dict[str, CpuWeight]:
    """The weight of each partition under `method` (pure: no file is touched)."""
    if method is WeightMethod.NICE:
        return {n: CpuWeight(n, s, method, nice=lvl) for (n, s), lvl in zip(shares.items(), nice_levels(shares).values())}
    if group_root is None:
        raise ValueError(f"{method.value} needs the cgroup directory to create partition groups in.")
    value = v2_weight if method is WeightMethod.CGROUP_V2 else v1_shares
    return {n: CpuWeight(n, s, method, cgroup_dir=group_root / n, cgroup_value=value(s)) for n, s in shares.items()}


def own_cgroups(proc_self_cgroup: str) -> tuple[Path | None, Path | None]:
    """(this process's cgroup v2 directory, its group in the v1 cpu hierarchy) from /proc/self/cgroup's
    text (pure). The partitions' groups go below this process's own: at the hierarchy's root (as v1
    groups were made until a review, 2026-12-08) they escaped a CPU quota the server was started under."""
    v2 = v1 = None
    for group in cgroup_memberships(proc_self_cgroup):
        if group.v2:
            v2 = Path(group.directory(CGROUP_ROOT))
        elif "cpu" in group.controllers:
            v1 = Path(group.directory(CGROUP_ROOT))
    return v2, v1


def _own_cgroups() -> tuple[Path | None, Path | None]:
    try:
        return own_cgroups(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None, None


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def detect_weight_method(run_id: str) -> tuple[WeightMethod, Path | None, str]:
    """(method, the directory partition groups go in, why) for this host and user."""
    v2, own_v1 = _own_cgroups()
    if (CGROUP_ROOT / "cgroup.controllers").exists() and v2 is not None:
        try:  # children get cpu.weight only if this group hands the cpu controller down
            delegated = "cpu" in (v2 / "cgroup.subtree_control").read_text().split()
        except OSError:
            delegated = False
        if delegated and _writable_dir(v2):
            return WeightMethod.CGROUP_V2, v2 / f"triton-serving-{run_id}", "cgroup v2 with the cpu controller delegated"
    # its own v1 group; in a container without a cgroup namespace that path is the host's, and the
    # container's own group is mounted at the hierarchy's root
    v1 = own_v1 if own_v1 is not None and own_v1.is_dir() else CGROUP_ROOT / "cpu"
    if (v1 / "cpu.shares").exists() and _writable_dir(v1):
        return WeightMethod.CGROUP_V1, v1 / f"triton-serving-{run_id}", "cgroup v1 cpu controller, writable"
    return WeightMethod.NICE, None, "no writable cgroup cpu controller (not root, or not delegated): niceness instead"


def create_cpu_groups(weights: Mapping[str, CpuWeight]) -> None:
    """Create each partition's cgroup and write its weight (cgroup methods only)."""
    for weight in weights.values():
        if weight.cgroup_dir is None:
            continue
        if weight.method is WeightMethod.CGROUP_V2:
            # cgroup v2 gives a group's children cpu.weight only when the group hands the cpu
            # controller down: the run's own group (parent of the partitions') must enable it
            weight.cgroup_dir.parent.mkdir(exist_ok=True)
            (weight.cgroup_dir.parent / "cgroup.subtree_control").write_text("+cpu\n")
        weight.cgroup_dir.mkdir(parents=True, exist_ok=True)
        knob = "cpu.weight" if weight.method is WeightMethod.CGROUP_V2 else "cpu.shares"
        (weight.cgroup_dir / knob).write_text(f"{weight.cgroup_value}\n")


def apply_in_child(weight: CpuWeight) -> None:
    """Between fork and exec of a partition's server: join its cgroup, or raise its niceness."""
    if weight.cgroup_dir is not None:
        (weight.cgroup_dir / "cgroup.procs").write_text(f"{os.getpid()}\n")
    elif weight.nice:
        os.nice(weight.nice)


def remove_cpu_groups(weights: Mapping[str, CpuWeight]) -> list[str]:
    """Remove the partition cgroups (and their parent) once their processes are gone; what failed."""
    failed = []
    parents = set()
    for weight in weights.values():
        if weight.cgroup_dir is None:
            continue
        parents.add(weight.cgroup_dir.parent)
        try:
            weight.cgroup_dir.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:  # still holds a process (a stub that has not exited yet)
            failed.append(f"{weight.cgroup_dir}: {exc.strerror}")
    for parent in parents:
        try:
            parent.rmdir()
        except OSError:
            pass
    return failed
