"""Plan how the machine is split between partitions: a pure function of serving.toml and the host.

Each `[partitions.<name>]` in serving.toml becomes one tritonserver process with a compute share,
a memory cap and its own ports. What a share *means* depends on the host (the mechanism):

- CPU shares (no NVIDIA GPU; `[placement] cpu = "shares"`): every partition may use every core and
  the share is its weight when partitions compete (serving.runtime.cpu_shares); each model instance
  runs one ONNX Runtime thread per core (`PlannedPartition.intra_op_threads`, the one source: no
  thread count is typed anywhere else).
- CPU sets (`[placement] cpu = "cpu_sets"`): the share becomes a set of whole cores the process is
  pinned to, and the thread budget is the size of that set.
- Elastic CPU sets (`"elastic"`, the default): the same home cores, lent by an idle partition to
  the busy ones while it stays idle (serving.runtime.elastic_cpus, applied by the supervisor).
- CUDA MPS (NVIDIA GPU): the share becomes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and the memory cap
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; the CPU set is still derived (host threads) but not pinned.

Nothing here starts a process or reads the machine; `detect_nvidia_gpu` is the one probe and the
launcher passes its answer in, so the plan is tested without hardware.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from contracts.devices import (  # noqa: F401 (GpuProbe, detect_nvidia_gpu re-exported)
    GpuProbe, cpus_by_core, detect_nvidia_gpu, read_cpu_quota, read_thread_siblings,
)
from contracts.errors import ConfigError, find_named
# the variables a partition's server gets (their one reader is contracts.partition_env)
from contracts.partition_env import (  # noqa: F401 (re-exported)
    HOME_CORE_OFFSETS_ENV, INTRA_OP_THREADS_ENV, PARTITION_ENV, home_core_offsets_value,
)
from contracts.serving_spec import (
    DEFAULT_LATENCY_SUMMARY_QUANTILES, DEFAULT_MAX_INPUT_BYTES, DEFAULT_RATE_LIMIT, GZIP_OFF, CpuPlacement, ServingSpec,
)


class Mechanism(str, Enum):
    """How a partition's compute share is enforced."""

    ELASTIC_CPU_SETS = "elastic_cpu_sets"
    CPU_SHARES = "cpu_shares"
    CPU_SETS = "cpu_sets"
    CUDA_MPS = "cuda_mps"

    @property
    def pins(self) -> bool:
        """Partitions are pinned to CPU sets (their home cores; elastic sets may lend them)."""
        return self in (Mechanism.CPU_SETS, Mechanism.ELASTIC_CPU_SETS)


def round_half_up(value: float) -> int:
    return int(value + 0.5)


def largest_remainder(quotas: Sequence[float], total: int) -> list[int]:
    """Whole numbers for fractional `quotas`: each gets the whole part of its quota, and what is left
    of `total` goes one each to the largest remainders (ties: the earlier quota). One rule for every
    share of cores: the partitions' home cores (`cores_for_shares`) and the idle cores an elastic
    partition lends (serving.runtime.elastic_cpus)."""
    counts = [int(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[:max(0, total - sum(counts))]:
        counts[i] += 1
    return counts


def cores_for_shares(shares_percent: Sequence[int], cpu_count: int) -> tuple[int, ...]:
    """Whole cores for partitions that split one host's `cpu_count` cores, in the shares' order.

    Why not each share rounded on its own: that over-books odd core counts (50/50 on 3 cores is
    2 + 2). Here the shares' total (at most 100%) sets how many cores are
    handed out (the nearest count), then each share gets the whole part of its quota and the cores
    left go to the largest remainders (ties: the partition declared first), and every partition gets
    at least one core, taken from the one with most. So 50/50 on 3 cores is 2 + 1, 1/99 on 16 is
    1 + 15, and a plan fails only with more partitions than cores (`ConfigError`, raised by the
    caller with the partitions' names: this returns () then).
    """
    if not shares_percent or len(shares_percent) > cpu_count:
        return ()
    quotas = [share * cpu_count / 100 for share in shares_percent]
    counts = largest_remainder(quotas, min(cpu_count, max(len(quotas), round_half_up(sum(quotas)))))
    for i, count in enumerate(counts):
        if count == 0:
            richest = max(range(len(counts)), key=lambda j: (counts[j], -j))
            counts[richest] -= 1
            counts[i] = 1
    return tuple(counts)


@dataclass(frozen=True)
class PlannedPartition:
    """One tritonserver process: what it serves, where it listens, what it may use."""

    name: str
    index: int
    models: tuple[str, ...]
    compute_share: int
    memory_mb: int
    cpus: tuple[int, ...]
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    #: MPS settings; None on a CPU-sets plan and for a partition without GPU models.
    mps_active_thread_percentage: int | None = None
    mps_pinned_device_mem_limit: str | None = None

    def __post_init__(self) -> None:
        if not self.cpus:
            raise ConfigError(f"partition {self.name!r} has an empty CPU set: allowed one or more cores.")
        if not self.models:
            raise ConfigError(f"partition {self.name!r} serves no model.")

    #: Every core the partition may ever run on: its home cores (`cpus`), or every partition's home
    #: cores when elastic CPU sets may lend it the others (every core under CPU shares). Empty: `cpus`.
    reachable_cpus: tuple[int, ...] = ()
    #: At most this many ONNX Runtime threads per instance: a cgroup CPU quota rounded up (0: none).
    thread_cap: int = 0
    #: (model, instance count) of the partition's models in declaration order: where each model's
    #: instances start taking turns for a home core (contracts.partition_env.HOME_CORE_OFFSETS_ENV).
    instances: tuple[tuple[str, int], ...] = ()

    @property
    def gpu(self) -> bool:
        """Holds GPU models: an MPS client (not pinned). Otherwise pinned like on a CPU host."""
        return self.mps_active_thread_percentage is not None

    @property
    def runs_on(self) -> tuple[int, ...]:
        """Every core the partition may run on (`reachable_cpus`, or its home cores)."""
        return self.reachable_cpus or self.cpus

    @property
    def intra_op_threads(self) -> int:
        """ONNX Runtime intra-op threads per model instance: one per core the partition may run on.
        Measured here (2 cores, 2 instances, threads do not spin when idle): 2 threads per instance
        gave the lone text request 14.7 ms instead of 26.7 ms with 1, at the same throughput under
        load; the instances time-share the cores when both are busy. Under a CPU quota (`thread_cap`)
        no more threads than the quota's CPUs: more only burn the quota and get the server throttled."""
        return min(len(self.runs_on), self.thread_cap) if self.thread_cap else len(self.runs_on)

    @property
    def memory_budget_bytes(self) -> int:
        return self.memory_mb * 1024 * 1024

    @property
    def endpoints(self) -> dict[str, str]:
        return {
            "http": f"{self.host}:{self.http_port}",
            "grpc": f"{self.host}:{self.grpc_port}",
            "metrics": f"http://{self.host}:{self.metrics_port}/metrics",
        }

    def environment(self) -> dict[str, str]:
        """Variables this partition's tritonserver gets on top of the launcher's environment."""
        env = {INTRA_OP_THREADS_ENV: str(self.intra_op_threads), PARTITION_ENV: self.name}
        if self.instances:
            env[HOME_CORE_OFFSETS_ENV] = home_core_offsets_value(self.instances)
        if self.mps_active_thread_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(self.mps_active_thread_percentage)
        if self.mps_pinned_device_mem_limit is not None:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = self.mps_pinned_device_mem_limit
        return env


@dataclass(frozen=True)
class PartitionPlan:
    mechanism: Mechanism
    cpu_count: int
    partitions: tuple[PlannedPartition, ...]
    #: `[server] cond_wait_cap_us` and `http_gzip_level`, for every partition's server (serving.runtime.native).
    cond_wait_cap_us: int = 10000
    http_gzip_level: int | str = GZIP_OFF
    #: `[server] rate_limit` and `latency_summary_quantiles`, for every partition's server.
    rate_limit: str = DEFAULT_RATE_LIMIT
    latency_summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_LATENCY_SUMMARY_QUANTILES
    #: `[server] max_input_bytes`: the request guard's per-input limit in every partition's server.
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    #: What the plan did other than serving.toml asked, in words (`serving serve` prints them).
    notes: tuple[str, ...] = ()
    #: The host's CPUs in the order home cores were handed out (a physical core's threads together):
    #: idle cores are lent in this order too (serving.runtime.elastic_cpus.lend_idle_cores).
    core_order: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        ports = [p for part in self.partitions for p in (part.http_port, part.grpc_port, part.metrics_port)]
        clashes = sorted({p for p in ports if ports.count(p) > 1})
        if clashes:
            raise ConfigError(
                f"partition ports {clashes} are used twice: every partition needs its own HTTP, gRPC and metrics "
                f"ports (set [server] partition_port_stride >= 3 or give distinct ports)."
            )
        if self.mechanism.pins:
            used = [c for part in self.partitions for c in part.cpus]
            if len(used) != len(set(used)):
                raise ConfigError(f"CPU sets overlap: {[(p.name, p.cpus) for p in self.partitions]}; allowed disjoint sets.")

    def partition(self, name: str) -> PlannedPartition:
        return find_named(self.partitions, name, "partition")

    def partition_of(self, model: str) -> PlannedPartition:
        for part in self.partitions:
            if model in part.models:
                return part
        raise ConfigError(f"model {model!r} is in no partition; planned: {[p.name for p in self.partitions]}.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism.value,
            "cpu_count": self.cpu_count,
            "partitions": {
                p.name: {
                    **p.endpoints, "models": list(p.models), "compute_share": p.compute_share,
                    "memory_mb": p.memory_mb, "cpus": list(p.cpus), "reachable_cpus": list(p.runs_on), "intra_op_threads": p.intra_op_threads,
                    **({"mps": {k: v for k, v in p.environment().items() if k.startswith("CUDA_MPS")}}
                       if p.gpu else {}),
                }
                for p in self.partitions
            },
        }


def partition_ports(part, index: int, server) -> dict[str, int]:
    """A partition's ports: explicit ones, else `[server]`'s base ports + index x stride."""
    offset = index * server.partition_port_stride
    ports = {
        "http_port": part.http_port or server.http_port + offset,
        "grpc_port": part.grpc_port or server.grpc_port + offset,
        "metrics_port": part.metrics_port or server.metrics_port + offset,
    }
    for key, port in ports.items():
        if port > 65535:
            raise ConfigError(f"partition {part.name!r} derives {key} = {port}: allowed at most 65535; set it explicitly.")
    return ports


def _check_supervisor_port(planned, supervisor_port: int) -> None:
    used = {port for p in planned for port in (p.http_port, p.grpc_port, p.metrics_port)}
    if supervisor_port in used:
        raise ConfigError(
            f"`server.supervisor_metrics_port` = {supervisor_port} is also a partition's port: "
            f"allowed a port no partition uses (partitions use {sorted(used)})."
        )


def plan_partitions(
    spec: ServingSpec, cpu_count: int, gpu_present: bool, available_cpus: Sequence[int] | None = None,
    placement: CpuPlacement | None = None, gpu_partitions: Sequence[str] | None = None,
    cpu_quota: float | None = None,
) -> PartitionPlan:
    """Derive every partition's CPU set, thread count, ports and (on a GPU) MPS settings.

    With CPU shares every partition's set is every core. With CPU sets (and for the host threads
    of an MPS plan) cores are handed out in declaration order, contiguously, as `cores_for_shares`
    apportions them; a plan with more partitions than cores is rejected (partitions never share a
    core), but for elastic sets, the default, which then share every core as CPU shares do (the plan's
    `notes` say so: a 1-CPU host serves the default serving.toml). `available_cpus` are the core ids
    this process may use (default 0..cpu_count-1); `placement` overrides `[placement] cpu` (Kubernetes
    pods get their own CPUs). `gpu_partitions`: the partitions that get CUDA MPS when `gpu_present`
    (default: every one, as the Kubernetes GPU overlay renders them); the others keep their CPU sets.
    With none, a GPU host plans exactly as a CPU host (CPU models gain nothing from MPS and would
    lose their pinning). `cpu_quota`: the CPUs a cgroup quota allows (None: none), which caps the
    threads per instance.
    """
    if isinstance(cpu_count, bool) or not isinstance(cpu_count, int) or cpu_count < 1:
        raise ConfigError(f"cpu_count = {cpu_count!r}: allowed a positive integer.")
    cpu_ids = list(available_cpus) if available_cpus is not None else list(range(cpu_count))
    if len(cpu_ids) != cpu_count:
        raise ConfigError(f"available_cpus {cpu_ids} does not have cpu_count = {cpu_count} entries.")
    declared = spec.effective_partitions
    on_gpu = set(p.name for p in declared) if gpu_partitions is None else set(gpu_partitions)
    gpu_present = gpu_present and bool(on_gpu)
    mechanism, counts, notes = _cpu_mechanism(declared, spec.placement.cpu if placement is None else placement,
                                              cpu_count, gpu_present)
    server = spec.server
    home = _home_cores(cpu_ids, counts) if counts else [tuple(sorted(cpu_ids))] * len(declared)
    lendable = tuple(sorted(c for cpus in home for c in cpus)) if mechanism is Mechanism.ELASTIC_CPU_SETS else ()
    thread_cap = max(1, math.ceil(cpu_quota - 1e-9)) if cpu_quota else 0
    planned = []
    for index, part in enumerate(declared):
        models = spec.models_in_partition(part.name)
        planned.append(PlannedPartition(
            name=part.name, index=index, models=tuple(m.name for m in models),
            compute_share=part.compute_share, memory_mb=part.memory_mb, cpus=home[index], host=server.host,
            **partition_ports(part, index, server),
            reachable_cpus=lendable or home[index], thread_cap=thread_cap,
            instances=tuple((m.name, m.instance_count) for m in models),
            mps_active_thread_percentage=part.compute_share if gpu_present and part.name in on_gpu else None,
            mps_pinned_device_mem_limit=f"0={part.memory_mb}M" if gpu_present and part.name in on_gpu else None,
        ))
    _check_supervisor_port(planned, server.supervisor_metrics_port)
    return PartitionPlan(mechanism=mechanism, cpu_count=cpu_count, partitions=tuple(planned),
                         cond_wait_cap_us=server.cond_wait_cap_us, http_gzip_level=server.http_gzip_level,
                         rate_limit=server.rate_limit, latency_summary_quantiles=server.latency_summary_quantiles,
                         max_input_bytes=server.max_input_bytes, notes=notes, core_order=tuple(cpu_ids))


def _cpu_mechanism(declared, placement: CpuPlacement, cpu_count: int,
                   gpu_present: bool) -> tuple[Mechanism, tuple[int, ...], tuple[str, ...]]:
    """(mechanism, home core count per partition or () when every partition shares every core, notes)."""
    if placement is CpuPlacement.SHARES and not gpu_present:
        return Mechanism.CPU_SHARES, (), ()
    counts = cores_for_shares([p.compute_share for p in declared], cpu_count)
    if counts:
        return (Mechanism.CUDA_MPS if gpu_present else Mechanism.ELASTIC_CPU_SETS if placement is CpuPlacement.ELASTIC
                else Mechanism.CPU_SETS), counts, ()
    names = [p.name for p in declared]
    if placement is CpuPlacement.ELASTIC and not gpu_present:
        return Mechanism.CPU_SHARES, (), (
            f"{len(declared)} partitions {names} on {cpu_count} core(s): too few for a home core each, so they share "
            f"every core as with `placement.cpu = \"shares\"` (their compute shares are their weights)",)
    raise ConfigError(
        f"{len(declared)} partitions {names} need a core each, but this host has {cpu_count}: "
        f"with `placement.cpu = \"{placement.value}\"` allowed at most {cpu_count} partitions (partitions never "
        f"share a home core); merge partitions or use `placement.cpu = \"shares\"`.")


def _home_cores(cpu_ids: Sequence[int], counts: Sequence[int]) -> list[tuple[int, ...]]:
    """Contiguous runs of `cpu_ids` (in their order: `plan_for_this_host` puts a core's threads side by
    side), `counts` long each, each sorted."""
    home, first = [], 0
    for count in counts:
        home.append(tuple(sorted(cpu_ids[first:first + count])))
        first += count
    return home


def plan_for_this_host(spec: ServingSpec, force_cpu: bool = False) -> tuple[PartitionPlan, GpuProbe]:
    """The plan for the machine this runs on: the cores this process may use, and its GPU if any."""
    allowed = sorted(os.sched_getaffinity(0))
    cpus = list(cpus_by_core(allowed, read_thread_siblings(allowed)))  # a core's threads in one partition
    gpu = GpuProbe(False, "CPU sets requested explicitly") if force_cpu else detect_nvidia_gpu()
    return plan_partitions(spec, len(cpus), gpu.present, cpus, gpu_partitions=spec.gpu_partitions(),
                           cpu_quota=read_cpu_quota()), gpu
