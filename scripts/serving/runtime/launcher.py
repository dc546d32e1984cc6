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
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from serving.runtime.cpu_shares import CpuWeight, detect_weight_method, plan_cpu_weights
from contracts.errors import ServerStartError
from contracts.layout import RunLayout
from contracts.partition_plan import Mechanism, PartitionPlan, PlannedPartition
from serving.runtime.security import AdminKey, launcher_admin_key, restricted_api_flags
from serving.runtime.server import ServerSettings, TritonInstallation, TritonServerProcess
from contracts.serving_spec import ServingSpec
from contracts.supervisor_state import PartitionStatus

MPS_CONTROL = "nvidia-cuda-mps-control"


def with_server_overrides(spec: ServingSpec, host: str | None = None, http_port: int | None = None,
                          grpc_port: int | None = None, metrics_port: int | None = None,
                          allow_non_loopback: bool = False, supervisor_metrics_port: int | None = None) -> ServingSpec:
    """The spec with command-line overrides of `[server]` (the base ports partitions derive from)."""
    overrides = {k: v for k, v in {"host": host, "http_port": http_port, "grpc_port": grpc_port,
                                   "metrics_port": metrics_port, "allow_non_loopback": allow_non_loopback,
                                   "supervisor_metrics_port": supervisor_metrics_port}.items() if v}
    return replace(spec, server=replace(spec.server, **overrides)) if overrides else spec


def partition_server_settings(plan: PartitionPlan, partition: PlannedPartition, repository: Path, backend_dir: Path,
                              log_verbose: int = 0, gpu_metrics: bool = False,
                              admin_key: AdminKey | None = None) -> ServerSettings:
    """The ONE place a partition's tritonserver flags are decided (add security flags here); the
    Kubernetes renderer (deploy/k8s_deploy) takes its container arguments from here too, passing a
    placeholder `admin_key` that the pod fills from a Secret. The server-wide values (condition-wait
    cap, HTTP gzip level, rate limiter, latency-summary quantiles) come from the `plan`, the one
    place serving.toml's `[server]` reaches a partition."""
    return ServerSettings(
        model_repository=Path(repository), backend_dir=Path(backend_dir), host=partition.host,
        http_port=partition.http_port, grpc_port=partition.grpc_port, metrics_port=partition.metrics_port,
        models=partition.models, log_verbose=log_verbose, gpu_metrics=gpu_metrics,
        # model-repository, shared-memory, logging and trace APIs need the admin key (serving.runtime.security)
        restricted=restricted_api_flags(admin_key or launcher_admin_key()), cond_wait_cap_us=plan.cond_wait_cap_us,
        http_gzip_level=plan.http_gzip_level, rate_limit=plan.rate_limit,
        latency_summary_quantiles=plan.latency_summary_quantiles, max_input_bytes=plan.max_input_bytes,
    )


def mps_environment(layout: RunLayout) -> dict[str, str]:
    """Where the MPS daemon and its clients meet (both must see the same pipe directory)."""
    return {"CUDA_MPS_PIPE_DIRECTORY": str(layout.mps_pipe), "CUDA_MPS_LOG_DIRECTORY": str(layout.mps_log)}


def mps_client_environment(layout: RunLayout) -> dict[str, str]:
    """An MPS client's environment: the daemon's pipe and log directories, and CUDA_VISIBLE_DEVICES
    emptied of meaning: NVIDIA's MPS docs say the daemon (started with it) remaps the devices and
    clients must not set it again, so a value inherited from the launcher's shell is dropped here
    (an empty string would hide every GPU, so the variable is removed by the process start)."""
    env = dict(mps_environment(layout))
    env[UNSET_IN_CHILD] = "CUDA_VISIBLE_DEVICES"
    return env


#: A marker in a partition's extra environment: the named variable is removed before exec.
UNSET_IN_CHILD = "SERVING_UNSET_ENV"


def partition_server_process(installation: TritonInstallation, plan: PartitionPlan, partition: PlannedPartition,
                             repository: Path, layout: RunLayout, cpu_weight: CpuWeight | None = None) -> TritonServerProcess:
    """A (not yet started) tritonserver for one partition, with the plan's mechanism applied:
    pinned to its cores (CPU sets, or every core with CPU shares, plus its `cpu_weight`), or
    the MPS environment on a GPU."""
    env = partition.environment()
    pin = None
    if partition.gpu:  # an MPS client: its share is the thread percentage, not a CPU set
        env.update(mps_client_environment(layout))
    else:  # CPU sets / shares; on a GPU host too, for a partition without GPU models
        pin = partition.cpus
    settings = partition_server_settings(plan, partition, repository, layout.backends, gpu_metrics=partition.gpu)
    return TritonServerProcess(installation, settings, layout.partition_log(partition.name), extra_env=env,
                               preexec_cpus=pin, cpu_weight=cpu_weight if plan.mechanism is Mechanism.CPU_SHARES else None)


def plan_cpu_weights_for_this_host(plan: PartitionPlan, run_id: str) -> tuple[dict[str, CpuWeight], str]:
    """Each partition's CPU weight under a CPU-shares plan ({} otherwise), and how it is enforced."""
    if plan.mechanism is not Mechanism.CPU_SHARES:
        return {}, ""
    method, root, why = detect_weight_method(run_id)
    weights = plan_cpu_weights({p.name: p.compute_share for p in plan.partitions}, method, root)
    return weights, f"{method.value} ({why})"


#: What happens without the MPS control binary (docs/gpu.md, "Partitions on a GPU host"): the GPU
#: partitions still start and share the GPU by time slicing; their shares are not enforced.
MPS_FALLBACK = ("GPU partitions start without MPS: they share the GPU by time slicing and their compute_share / memory_mb "
                "are NOT enforced (install the CUDA driver utilities for {control}; docs/partitions.md)")


def start_mps_daemon(layout: RunLayout, timeout_s: float = 10.0) -> str | None:
    """`nvidia-cuda-mps-control -d` with pipe/log directories under the run directory (CUDA_VISIBLE_DEVICES,
    if set, is seen by the daemon only). Returns None when it runs, or the one-line fallback when the
    control binary is missing; a daemon that fails or does not come up in `timeout_s` is an error."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        return f"{MPS_CONTROL} is not on PATH: " + MPS_FALLBACK.format(control=MPS_CONTROL)
    layout.mps_pipe.mkdir(parents=True, exist_ok=True)
    layout.mps_log.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **mps_environment(layout)}
    try:
        done = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ServerStartError(f"{MPS_CONTROL} -d did not return within {timeout_s:.0f} s (a hung MPS daemon start; "
                               f"see {layout.mps_log / 'control.log'} and `nvidia-smi -q | grep -i mps`).") from None
    if done.returncode != 0:
        raise ServerStartError(f"{MPS_CONTROL} -d failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    deadline = time.monotonic() + timeout_s
    while not (layout.mps_pipe / "control").exists():
        if time.monotonic() > deadline:
            raise ServerStartError(f"the MPS control daemon did not create {layout.mps_pipe / 'control'} within {timeout_s:.0f} s; "
                                   f"see {layout.mps_log / 'control.log'}.")
        time.sleep(0.1)
    return None


def stop_mps_daemon(layout: RunLayout, timeout_s: float = 20.0) -> bool:
    """Send `quit` to the daemon this run started; True if one answered."""
    control = shutil.which(MPS_CONTROL)
    if control is None or not (layout.mps_pipe / "control").exists():
        return False
    env = {**os.environ, **mps_environment(layout)}
    try:
        done = subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:  # a daemon that does not answer `quit`: reported, never a hang of `make stop`
        print(f"[stop] the MPS control daemon did not answer `quit` within {timeout_s:.0f} s; see {layout.mps_log}", flush=True)
        return False
    return done.returncode == 0


def build_manifest(plan: PartitionPlan, layout: RunLayout, processes: Mapping[str, PartitionStatus],
                   supervisor_metrics: str | None = None) -> dict[str, Any]:
    """run/manifest.json: model -> its partition's endpoints; partition -> endpoints, pid, resources;
    the supervisor's own metrics endpoint (restarts, crash loops) when it serves one.

    `processes`: each partition's status as the supervisor records it (a partition not in it is
    listed with state "unknown").
    """
    planned = plan.to_dict()["partitions"]
    partitions = {}
    for part in plan.partitions:
        live = processes.get(part.name, PartitionStatus(state="unknown"))
        partitions[part.name] = {
            **planned[part.name], "pid": live.pid, "state": live.state,
            "restarts": live.restarts, "log": str(layout.partition_log(part.name)),
            "mechanism": plan.mechanism.value,
        }
    models = {m: {**part.endpoints, "partition": part.name} for part in plan.partitions for m in part.models}
    manifest = {"mechanism": plan.mechanism.value, "partitions": partitions, "models": models}
    if supervisor_metrics:
        manifest["supervisor"] = {"metrics": supervisor_metrics}
    return manifest
