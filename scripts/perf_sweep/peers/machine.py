"""The machine and software every figure of a peer run belongs to: the CPU (model, cores, the
SIMD flags that decide INT8 speed), the load the machine carried, and each environment's versions.

`cpu_record` and `busy_cores_between` are pure (tested on captured inputs); the rest reads this
host. The CPU is read as everywhere else in the project (contracts.devices.read_cpu_info).
"""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from contracts.devices import SIMD_FLAGS, CpuInfo, read_cpu_info
from contracts.layout import PROJECT_ROOT
from contracts.processes import cpu_idle_and_total
from perf_sweep.peers.plan import machine_settled

#: Distributions whose versions are recorded for each interpreter.
MAIN_PACKAGES = ("onnxruntime", "numpy", "tokenizers", "aiohttp", "nvidia-pytriton", "tritonclient")
PEER_PACKAGES = ("onnxruntime", "numpy", "tokenizers", "fastapi", "uvicorn", "infinity-emb", "torch",
                 "sentence-transformers", "transformers")


def cpu_record(cpu: CpuInfo, usable_cpus: int) -> dict[str, object]:
    """The run's `machine.cpu` (model, logical CPUs, threads per core, each SIMD flag present or not)
    and its one-line description, from contracts.devices' reading of this host's CPU."""
    return {"model": cpu.model, "cpus": cpu.logical_cpus, "threads_per_core": cpu.threads_per_core,
            "flags": {flag: flag in cpu.flags for flag in SIMD_FLAGS}, "description": cpu.describe(usable_cpus)}


def read_machine() -> dict[str, object]:
    usable = len(os.sched_getaffinity(0))
    cpu = cpu_record(read_cpu_info(), usable)
    return {"cpu": cpu, "usable_cpus": usable, "description": cpu.pop("description"), "host": platform.node(),
            "kernel": platform.release(), "python": sys.version.split()[0], "load_average": os.getloadavg()[0],
            "commit": source_revision(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}


def source_revision(root: Path = PROJECT_ROOT) -> str:
    """`git rev-parse --short HEAD` of the checkout, "+ uncommitted changes" when its tracked files
    differ, or "unknown" outside a git checkout (an unpacked image)."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return head.stdout.strip() + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git did not answer)"


_VERSIONS_SNIPPET = (
    "import json, sys\nfrom importlib import metadata\nout = {}\nfor name in sys.argv[1:]:\n"
    "    try:\n        out[name] = metadata.version(name)\n    except metadata.PackageNotFoundError:\n"
    "        out[name] = None\nprint(json.dumps(out))"
)


def package_versions(python: Path | str, packages: Sequence[str]) -> dict[str, str | None]:
    """Versions of `packages` as the interpreter `python` sees them (None: not installed)."""
    try:
        done = subprocess.run([str(python), "-c", _VERSIONS_SNIPPET, *packages], capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def triton_version(http_url: str) -> str | None:
    """The server version a Triton endpoint reports at /v2 (e.g. 2.51.0)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{http_url}/v2", timeout=5) as response:
            return json.loads(response.read()).get("version")
    except (OSError, ValueError):
        return None


#: Seconds between two readings of /proc/stat while waiting for a quiet machine.
QUIET_SAMPLE_S = 0.5


def cpu_jiffies(stat_text: str) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat's first line (idle and iowait are not busy)."""
    idle, total = cpu_idle_and_total(stat_text)["cpu"]
    return total - idle, total


def busy_fraction_between(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all CPUs' time that was busy between two (busy, total) readings; NaN when none passed."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else math.nan


def busy_cores_between(before: tuple[int, int], after: tuple[int, int], cpus: int) -> float:
    """Cores busy on average between two (busy, total) readings of all `cpus`."""
    fraction = busy_fraction_between(before, after)
    return 0.0 if math.isnan(fraction) else cpus * fraction


def read_cpu_jiffies() -> tuple[int, int]:
    with open("/proc/stat") as f:
        return cpu_jiffies(f.read())


def busy_cores(interval_s: float = QUIET_SAMPLE_S) -> float:
    """Cores of this machine busy on average over the next `interval_s` (every process, ours too)."""
    before = read_cpu_jiffies()
    time.sleep(interval_s)
    return busy_cores_between(before, read_cpu_jiffies(), os.cpu_count() or 1)


@dataclass(frozen=True)
class QuietWait:
    """How long a level waited for the machine, and how busy it was when the level started."""

    waited_s: float
    busy_cores: float
    quiet: bool


def wait_until_quiet(baseline_busy_cores: float, margin_cores: float, timeout_s: float,
                     sample: Callable[[], float] = busy_cores) -> QuietWait:
    """Sample busy cores until `machine_settled` (or `timeout_s`): the previous level's load has left."""
    started, readings = time.monotonic(), []
    while True:
        readings.append(sample())
        waited, settled = time.monotonic() - started, machine_settled(readings, baseline_busy_cores, margin_cores)
        if settled or waited >= timeout_s:
            return QuietWait(round(waited, 1), round(readings[-1], 2), settled)


@dataclass(frozen=True)
class HostParallelism:
    """How much faster one ONNX Runtime call of the served text encoder runs on every core than on
    one, measured just before a level's window.

    The KVM hosts of these machines go through spells, minutes long, in which a session with a
    thread per core is no faster than a 1-thread one, although each vCPU alone computes at full
    speed and two 1-thread processes side by side get twice the work done (measured:
    docs/performance.md, "The host's spells"). A target measured in such a spell loses what its
    threads would have gained (one process with a thread per core: all of it; this project at c=1:
    its wide session's lead), so every level records the host's state, and a verdict whose target
    and peer were measured in different states says so."""

    one_thread_ms: float
    all_threads_ms: float
    threads: int

    @property
    def speedup(self) -> float:
        return self.one_thread_ms / self.all_threads_ms if self.all_threads_ms > 0 else float("nan")


class ParallelismProbe:
    """Two sessions of one ONNX file (1 thread, and `threads` spinning within a call as the backend's
    wide session does), timed in alternation on the same feeds: `runs` calls each, medians. About
    0.1 s for the text encoder at 64 tokens; nothing runs between probes."""

    def __init__(self, onnx_file: Path, feeds: Mapping[str, object], threads: int, runs: int = 9):
        from contracts.onnx_sessions import served_session

        if threads < 2 or runs < 1:
            raise ValueError(f"a parallelism probe needs threads >= 2 and runs >= 1, got {threads} and {runs}.")
        self.threads, self.runs, self.feeds = threads, runs, dict(feeds)
        self.one = served_session(onnx_file, 1)
        self.all = served_session(onnx_file, threads, spin_within_run=True)

    def measure(self) -> HostParallelism:
        times: dict[int, list[float]] = {1: [], self.threads: []}
        for session in (self.one, self.all):
            session.run(None, self.feeds)  # warm: the first call after a pause pays for the caches
        for _ in range(self.runs):
            for threads, session in ((1, self.one), (self.threads, self.all)):
                start = time.perf_counter()
                session.run(None, self.feeds)
                times[threads].append(time.perf_counter() - start)
        return HostParallelism(round(1e3 * statistics.median(times[1]), 3),
                               round(1e3 * statistics.median(times[self.threads]), 3), self.threads)
