"""The one probe for an NVIDIA GPU, used by the partition plan (MPS or CPU sets), the build
(TensorRT engines, device-memory sizing) and the GPU check.

Why one: two probes with different rules (one required a `GPU ` line, the other the word GPU
anywhere) could disagree about the same machine, so the build would make engines the serving
plan then ignores. `CUDA_VISIBLE_DEVICES` is honoured: empty or "-1" hides every GPU, a list of
indices or UUIDs keeps the listed ones, as the CUDA runtime does.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence


@dataclass(frozen=True)
class GpuProbe:
    present: bool
    detail: str
    #: `nvidia-smi -L` lines of the GPUs this process may use (after CUDA_VISIBLE_DEVICES).
    gpus: tuple[str, ...] = ()


def visible_gpus(listed: tuple[str, ...], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The `nvidia-smi -L` lines CUDA_VISIBLE_DEVICES leaves visible (unset: all of them)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return listed
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    if not wanted or wanted[0] == "-1":
        return ()
    kept = []
    for token in wanted:
        if token.isdigit():
            if int(token) < len(listed):
                kept.append(listed[int(token)])
            else:
                break  # CUDA stops at the first invalid index
        else:
            match = [line for line in listed if token in line]
            if not match:
                break
            kept.append(match[0])
    return tuple(dict.fromkeys(kept))


def detect_nvidia_gpu(environ: Mapping[str, str] | None = None) -> GpuProbe:
    """Is there an NVIDIA GPU this process can use? (`nvidia-smi -L` lists one that
    CUDA_VISIBLE_DEVICES leaves visible.)"""
    environ = os.environ if environ is None else environ
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuProbe(False, "no NVIDIA GPU: nvidia-smi is not installed")
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuProbe(False, f"no NVIDIA GPU: nvidia-smi -L failed ({exc})")
    listed = tuple(line for line in out.stdout.splitlines() if line.startswith("GPU "))
    if out.returncode != 0 or not listed:
        return GpuProbe(False, f"no NVIDIA GPU: nvidia-smi -L exited {out.returncode} listing none")
    gpus = visible_gpus(listed, environ)
    if not gpus:
        return GpuProbe(False, f"no usable NVIDIA GPU: CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES')!r} "
                               f"hides all {len(listed)} listed")
    return GpuProbe(True, gpus[0], gpus)


# ------------------------------------------------------------------ the CPU
#: The SIMD flags every figure is stated with (/proc/cpuinfo's names -> how reports print them): AVX2
#: only, AVX-512, and the INT8 dot products (VNNI, AMX) that decide INT8 speed.
SIMD_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI", "avx_vnni": "AVX-VNNI",
              "amx_int8": "AMX-INT8"}


@dataclass(frozen=True)
class CpuInfo:
    """This host's CPU as every report states it beside a figure (model, CPUs, SIMD flags): the one
    description the build report, the perf suite and the peer comparison print."""

    model: str
    logical_cpus: int
    flags: frozenset[str]
    #: Hardware threads per core (2 with SMT), where /proc/cpuinfo says (`siblings` / `cpu cores`).
    threads_per_core: int = 1

    @property
    def int8_dot_product(self) -> bool:
        """VNNI/AMX: INT8 dot products in hardware (without them u8s8 products can saturate)."""
        return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & self.flags)

    @property
    def simd(self) -> tuple[str, ...]:
        """The SIMD_FLAGS present, as reports print them."""
        return tuple(name for flag, name in SIMD_FLAGS.items() if flag in self.flags)

    def describe(self, usable_cpus: int | None = None) -> str:
        """e.g. "AMD EPYC, 2 logical CPUs (2 usable), SIMD: AVX2, AVX-512"; `usable_cpus`: the CPUs
        this process may run on (its affinity), where that matters to the figure."""
        usable = "" if usable_cpus is None else f" ({usable_cpus} usable)"
        return (f"{self.model}, {self.logical_cpus} logical CPUs{usable}, "
                f"SIMD: {', '.join(self.simd) or 'none of AVX2/AVX-512'}")


def cpu_info_from_text(cpuinfo: str, logical_cpus: int) -> CpuInfo:
    """Parse /proc/cpuinfo text (pure: tested on captured text)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    siblings, cores = fields.get("siblings", ""), fields.get("cpu cores", "")
    threads = int(siblings) // int(cores) if siblings.isdigit() and cores.isdigit() and int(cores) > 0 else 1
    return CpuInfo(fields.get("model name", "unknown CPU"), logical_cpus, frozenset(fields.get("flags", "").split()),
                   max(1, threads))


def read_cpu_info() -> CpuInfo:
    import platform

    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return CpuInfo(platform.processor() or platform.machine(), os.cpu_count() or 1, frozenset())
    return cpu_info_from_text(text, os.cpu_count() or 1)


# ------------------------------------------------------------------ CPU topology
def parse_cpu_list(text: str) -> tuple[int, ...]:
    """A kernel CPU list ("0,4", "0-3,8") as sorted CPU numbers; () for text that is not one."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        if not first.strip().isdigit() or (last and not last.strip().isdigit()):
            return ()
        cpus.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(cpus))


def cpus_by_core(cpus: "Sequence[int]", siblings: "Mapping[int, Sequence[int]]") -> tuple[int, ...]:
    """`cpus` ordered so that the hardware threads of one physical core stand together, the cores in the
    order of their first CPU (pure). Why: partitions take contiguous runs of this order as their home
    cores, and on an SMT host the kernel numbers a core's two threads N/2 apart (0 and 4 of 8), so runs
    of CPU numbers gave each partition one thread of every core: the partitions shared every core.
    `siblings`: each CPU's thread siblings (itself included); a CPU without an entry is a core alone."""
    wanted, ordered = set(cpus), []
    for cpu in sorted(wanted):
        if cpu not in ordered:
            ordered += [c for c in sorted({cpu, *siblings.get(cpu, ())}) if c in wanted and c not in ordered]
    return tuple(ordered)


def read_thread_siblings(cpus: "Sequence[int]") -> dict[int, tuple[int, ...]]:
    """Each CPU's thread siblings from /sys (Linux); a CPU whose file cannot be read is left out."""
    found = {cpu: _read_text(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") for cpu in cpus}
    return {cpu: parse_cpu_list(text) for cpu, text in found.items() if text is not None}


def _read_text(path: str) -> str | None:
    """A small kernel file's text, stripped; None when it cannot be read (not Linux, no such CPU or group)."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ------------------------------------------------------------------ CPU quota
CGROUP_MOUNT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class CgroupMembership:
    """One line of /proc/self/cgroup: a hierarchy (v2's is "0", with no controllers), its controllers and
    this process's group in it. The CPU quota below and the partitions' CPU-share groups
    (serving.runtime.cpu_shares) read the same lines."""

    hierarchy: str
    controllers: tuple[str, ...]
    path: str

    @property
    def v2(self) -> bool:
        return self.hierarchy == "0" and not self.controllers

    def directory(self, mount: str | os.PathLike[str] = CGROUP_MOUNT, depth: int | None = None) -> str:
        """The group's directory (or, with `depth`, its ancestor that many levels below the hierarchy's
        root): below the mount for v2, below the controllers' mount for v1."""
        root = os.fspath(mount) if self.v2 else f"{os.fspath(mount)}/{','.join(self.controllers)}"
        return "/".join([root, *self.parts[:depth]])

    @property
    def parts(self) -> list[str]:
        return [p for p in self.path.split("/") if p]


def cgroup_memberships(proc_self_cgroup: str) -> list[CgroupMembership]:
    """The lines of /proc/self/cgroup's text (pure)."""
    found = []
    for line in proc_self_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        found.append(CgroupMembership(hierarchy, tuple(c for c in controllers.split(",") if c), path))
    return found


def cpu_quota_from_cgroups(proc_self_cgroup: str, read: "Callable[[str], str | None]",
                           mount: str = CGROUP_MOUNT) -> float | None:
    """The CPUs a cgroup CPU quota lets this process use (the tightest of its group and the groups
    above it), or None without one. cgroup v2: `cpu.max` ("max 100000" or "<quota> <period>"); v1:
    `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none). Why: a container without the static CPU
    manager (Kubernetes' default) may run on every CPU of its node while its CPU limit is a quota;
    a thread per CPU then burns the quota and the container is throttled. `proc_self_cgroup` is
    /proc/self/cgroup's text, `read(path)` a file's text or None (pure: tested on made-up files)."""
    limits = []
    for group in cgroup_memberships(proc_self_cgroup):
        if not group.v2 and "cpu" not in group.controllers:
            continue
        for depth in range(len(group.parts), -1, -1):  # in a container its own group is the mount's root
            here = group.directory(mount, depth)
            if group.v2:
                limits += _cpus(*(read(f"{here}/cpu.max") or "").split()[:2])
            else:
                limits += _cpus(read(f"{here}/cpu.cfs_quota_us") or "", read(f"{here}/cpu.cfs_period_us") or "")
    return min(limits) if limits else None


def _cpus(quota: str = "", period: str = "") -> list[float]:
    """[quota / period] when both are positive counts (v2 writes "max" and v1 -1 for no quota), else []."""
    try:
        allowed, every = int(quota), int(period)
    except ValueError:
        return []
    return [allowed / every] if allowed > 0 and every > 0 else []


def read_cpu_quota() -> float | None:
    """This process's CPU quota in CPUs (`cpu_quota_from_cgroups` on this host's files), None without one."""
    return cpu_quota_from_cgroups(_read_text("/proc/self/cgroup") or "", _read_text)


# ------------------------------------------------------------------ TensorRT
@dataclass(frozen=True)
class TensorRTAvailability:
    available: bool
    reason: str


def detect_tensorrt() -> TensorRTAvailability:
    """Real detection, cheapest check first: a GPU the driver lists, libcuda, then a TensorRT builder."""
    gpu = detect_nvidia_gpu()
    if not gpu.present:
        return TensorRTAvailability(False, gpu.detail)
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return TensorRTAvailability(False, f"the CUDA driver library does not load ({exc})")
    try:
        import tensorrt as trt
    except ImportError:
        return TensorRTAvailability(False, "the `tensorrt` Python package is not installed")
    try:
        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    except Exception as exc:  # TensorRT raises plain exceptions (TypeError/RuntimeError) here
        return TensorRTAvailability(False, f"TensorRT {trt.__version__} cannot create a builder ({exc})")
    if builder is None:
        return TensorRTAvailability(False, f"TensorRT {trt.__version__} cannot create a builder")
    return TensorRTAvailability(True, f"TensorRT {trt.__version__}; {gpu.detail}")
