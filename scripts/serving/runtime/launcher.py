"""Turn a partition plan into tritonserver processes: flags, environment, pinning, MPS, manifest.

One code path for every host; only the mechanism differs (see `contracts.partition_plan`):
- CPU sets: each server is pinned to its partition's cores (sched_setaffinity before exec, so
  the Python-backend stubs it forks inherit the set) and told its ONNX Runtime thread count.
- CUDA MPS: the MPS control daemon is started first, with its pipe and log directories under the
  run directory, and each server gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. Without a GPU this branch is never taken, and forcing it
  fails with one line instead of pretending.

The supervisor (`serving.runtime.supervisor`) owns the processes; this module only builds them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from serving.runtime.cpu_shares import CpuWeight, detect_weight_method, plan_cpu_weights
from contracts.errors import ServerStartError
from contracts.partition_plan import Mechanism, PartitionPlan, PlannedPartition
from serving.runtime.security import AdminKey, launcher_admin_key, restricted_api_flags
from serving.runtime.server import ServerSettings, TritonInstallation, TritonServerProcess
from contracts.serving_spec import ServingSpec

MPS_CONTROL = "nvidia-cuda-mps-control"


@dataclass(frozen=True)
class RunLayout:
    """Where one `make serve` keeps its runtime files (default: <project>/run)."""

    run_dir: Path

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def backends(self) -> Path:
        return self.run_dir / "backends"

    @property
    def manifest(self) -> Path:
        return self.run_dir / "manifest.json"

    @property
    def supervisor_pid(self) -> Path:
        return self.run_dir / "supervisor.pid"

    @property
    def supervisor_state(self) -> Path:
        return self.run_dir / "supervisor.json"

    @property
    def supervisor_log(self) -> Path:
        return self.logs / "supervisor.log"

    @property
    def mps_pipe(self) -> Path:
        return self.run_dir / "mps" / "pipe"

    @property
    def mps_log(self) -> Path:
        return self.run_dir / "mps" / "log"

    def partition_log(self, partition: str) -> Path:
        return self.logs / f"tritonserver-{partition}.log"


def with_server_overrides(spec: ServingSpec, host: str | None = None, http_port: int | None = None,
                          grpc_port: int | None = None, metrics_port: int | None = None,
                          allow_non_loopback: bool = False, supervisor_metrics_port: int | None = None) -> ServingSpec:
    """The spec with command-line overrides of `[server]` (the base ports partitions derive from)."""
    overrides = {k: v for k, v in {"host": host, "http_port": http_port, "grpc_port": grpc_port,
                                   "metrics_port": metrics_port, "allow_non_loopback": allow_non_loopback,
                                   "supervisor_metrics_port": supervisor_metrics_port}.items() if v}
    return replace(spec, server=replace(spec.server, **overrides)) if overrides else spec


def partition_server_settings(partition: PlannedPartition, repository: Path, backend_dir: Path,
                              log_verbose: int = 0, gpu_metrics: bool = False,
                              admin_key: AdminKey | None = None, cond_wait_cap_us: int = 10000) -> ServerSettings:
    """The ONE place a partition's tritonserver flags are decided (add security flags here); the
    Kubernetes renderer (deploy/k8s_deploy) takes its container arguments from here too, passing a
    placeholder `admin_key` that the pod fills from a Secret."""
    return ServerSettings(
        model_repository=Path(repository), backend_dir=Path(backend_dir), host=partition.host,
        http_port=partition.http_port, grpc_port=partition.grpc_port, metrics_port=partition.metrics_port,
        models=partition.models, log_verbose=log_verbose, gpu_metrics=gpu_metrics,
        # model-repository, shared-memory, logging and trace APIs need the admin key (serving.runtime.security)
        restricted=restricted_api_flags(admin_key or launcher_admin_key()), cond_wait_cap_us=cond_wait_cap_us,
    )


def mps_environment(layout: RunLayout) -> dict[str, str]:
    """Where the MPS daemon and its clients meet (both must see the same pipe directory)."""
    return {"CUDA_MPS_PIPE_DIRECTORY": str(layout.mps_pipe), "CUDA_MPS_LOG_DIRECTORY": str(layout.mps_log)}


def partition_server_process(installation: TritonInstallation, plan: PartitionPlan, partition: PlannedPartition,
                             repository: Path, layout: RunLayout, cpu_weight: CpuWeight | None = None) -> TritonServerProcess:
    """A (not yet started) tritonserver for one partition, with the plan's mechanism applied:
    pinned to its cores (CPU sets, or every core with CPU shares, plus its `cpu_weight`), or
    the MPS environment on a GPU."""
    env = partition.environment()
    pin = None
    if plan.mechanism.pins or plan.mechanism is Mechanism.CPU_SHARES:
        pin = partition.cpus
    else:
        env.update(mps_environment(layout))
    settings = partition_server_settings(partition, repository, layout.backends,
                                         gpu_metrics=plan.mechanism is Mechanism.CUDA_MPS,
                                         cond_wait_cap_us=plan.cond_wait_cap_us)
    return TritonServerProcess(installation, settings, layout.partition_log(partition.name), extra_env=env,
                               preexec_cpus=pin, cpu_weight=cpu_weight if plan.mechanism is Mechanism.CPU_SHARES else None)


def plan_cpu_weights_for_this_host(plan: PartitionPlan, run_id: str) -> tuple[dict[str, CpuWeight], str]:
    """Each partition's CPU weight under a CPU-shares plan ({} otherwise), and how it is enforced."""
    if plan.mechanism is not Mechanism.CPU_SHARES:
        return {}, ""
    method, root, why = detect_weight_method(run_id)
    weights = plan_cpu_weights({p.name: p.compute_share for p in plan.partitions}, method, root)
    return weights, f"{method.value} ({why})"


def start_mps_daemon(layout: RunLayout, timeout_s: float = 10.0) -> None:
    """`nvidia-cuda-mps-control -d` with pipe/log directories under the run directory."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        raise ServerStartError(f"a GPU plan needs CUDA MPS but {MPS_CONTROL} is not on PATH (install the CUDA driver utilities).")
    layout.mps_pipe.mkdir(parents=True, exist_ok=True)
    layout.mps_log.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **mps_environment(layout)}
    done = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise ServerStartError(f"{MPS_CONTROL} -d failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    deadline = time.monotonic() + timeout_s
    while not (layout.mps_pipe / "control").exists():
        if time.monotonic() > deadline:
            raise ServerStartError(f"the MPS control daemon did not create {layout.mps_pipe / 'control'} within {timeout_s:.0f} s; "
                                   f"see {layout.mps_log / 'control.log'}.")
        time.sleep(0.1)


def stop_mps_daemon(layout: RunLayout, timeout_s: float = 20.0) -> bool:
    """Send `quit` to the daemon this run started; True if one answered."""
    control = shutil.which(MPS_CONTROL)
    if control is None or not (layout.mps_pipe / "control").exists():
        return False
    env = {**os.environ, **mps_environment(layout)}
    done = subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True, timeout=timeout_s)
    return done.returncode == 0


def build_manifest(plan: PartitionPlan, layout: RunLayout, processes: Mapping[str, Mapping[str, Any]],
                   supervisor_metrics: str | None = None) -> dict[str, Any]:
    """run/manifest.json: model -> its partition's endpoints; partition -> endpoints, pid, resources;
    the supervisor's own metrics endpoint (restarts, crash loops) when it serves one.

    `processes` maps a partition name to {"pid": ..., "state": ..., "restarts": ...}.
    """
    planned = plan.to_dict()["partitions"]
    partitions = {}
    for part in plan.partitions:
        live = processes.get(part.name, {})
        partitions[part.name] = {
            **planned[part.name], "pid": live.get("pid"), "state": live.get("state", "unknown"),
            "restarts": live.get("restarts", 0), "log": str(layout.partition_log(part.name)),
            "mechanism": plan.mechanism.value,
        }
    models = {m: {**part.endpoints, "partition": part.name} for part in plan.partitions for m in part.models}
    manifest = {"mechanism": plan.mechanism.value, "partitions": partitions, "models": models}
    if supervisor_metrics:
        manifest["supervisor"] = {"metrics": supervisor_metrics}
    return manifest
