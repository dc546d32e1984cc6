"""GPU partitions: what the `gpu` overlay changes, and the NVIDIA device plugin's MPS sharing.

On a GPU host the launcher starts one CUDA MPS daemon and gives each partition
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = compute_share and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = memory_mb.
On Kubernetes the NVIDIA device plugin runs the MPS daemon instead: with
`sharing.mps.resources[].replicas = R` it advertises each GPU as R `nvidia.com/gpu` replicas of
1/R of its SMs and memory each, and a pod may take exactly one. So every GPU partition must have the
same share, 100/R percent; unequal shares need MIG slices (`[kubernetes] gpu_resource`). The pods
keep the plan's MPS variables (the same limits, or lower), but not the pipe directory: the device
plugin mounts its own.
"""
from __future__ import annotations

from typing import Any

from contracts.partition_plan import PlannedPartition

from k8s_deploy.errors import DeployConfigError
from k8s_deploy.workload import CONTAINER, DeployPlan, container_env, container_resources, resource_name, server_args

MPS_RESOURCE = "nvidia.com/gpu"
#: Where the GPU Operator's device plugin reads its sharing configuration from.
DEVICE_PLUGIN_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_CONFIG = "triton-mps-sharing"


def uses_mps(deploy: DeployPlan) -> bool:
    return deploy.spec.kubernetes.gpu_resource == MPS_RESOURCE


def mps_replicas(deploy: DeployPlan) -> int:
    """R such that each GPU partition's compute_share is one replica of 100/R percent."""
    shares = {p.name: p.compute_share for p in deploy.gpu_partitions}
    distinct = set(shares.values())
    share = distinct.pop() if len(distinct) == 1 else None
    if share is None or 100 % share:
        raise DeployConfigError(
            f"`partitions.*.compute_share` = {shares}: the NVIDIA device plugin's MPS sharing splits a GPU into equal "
            f"replicas (one per pod), so GPU partitions need one common share that divides 100 (e.g. 50, 25, 20); "
            f"allowed: equal shares, or MIG slices via `kubernetes.gpu_resource` = 'nvidia.com/mig-<g>g.<m>gb'."
        )
    return 100 // share


def render_gpu_patch(deploy: DeployPlan, part: PlannedPartition) -> dict[str, Any]:
    """A strategic-merge patch of one partition's Deployment: GPU flags, MPS limits, one GPU share."""
    if part not in deploy.gpu_partitions:
        raise DeployConfigError(f"render_gpu_patch: partition {part.name!r} holds no `device = \"gpu\"` model of a GPU "
                                f"deploy plan (plan_deployment(spec, gpu=True)): it takes no GPU share.")
    container: dict[str, Any] = {"name": CONTAINER, "args": server_args(deploy, part, gpu=True),
                                 "resources": container_resources(deploy, part)}
    if uses_mps(deploy):
        container["env"] = container_env(deploy.plan, part)
    else:  # MIG: the slice is the limit; MPS variables would only confuse the CUDA runtime
        container["env"] = [e for e in container_env(deploy.plan, part) if not e["name"].startswith("CUDA_MPS")]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": resource_name(part.name)},
        "spec": {"template": {"spec": {
            "containers": [container],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }}},
    }


def render_device_plugin_config(deploy: DeployPlan) -> dict[str, Any]:
    """The ConfigMap the GPU Operator's device plugin reads (`devicePlugin.config.name`)."""
    import yaml

    config = {"version": "v1", "sharing": {"mps": {"resources": [{"name": MPS_RESOURCE, "replicas": mps_replicas(deploy)}]}}}
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIG, "namespace": DEVICE_PLUGIN_NAMESPACE},
        "data": {"triton-mps": yaml.safe_dump(config, sort_keys=False)},
    }
