"""The scale-out part of serving.toml: replicas per partition and the Kubernetes target.

`[partitions.<name>.autoscaling]` says how many copies of a partition may run and when to add
one (the average queue time per request, Triton's `nv_inference_queue_duration_us` over
`nv_inference_request_success`, that a HorizontalPodAutoscaler holds each pod to);
`[kubernetes]` says what the cluster's nodes look like. Both only feed `k8s_deploy` (deploy/),
which renders the manifests; `make serve` ignores them. Frozen and validated like the rest of
`contracts.serving_spec`: an error names the field, the value and what is allowed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from contracts.errors import ConfigError

#: A Kubernetes namespace is a DNS-1123 label.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: An OCI image reference without spaces or shell characters: [registry/]path[:tag][@digest].
IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$")
#: Extended resource names the NVIDIA device plugin advertises: whole or MPS-shared GPUs, MIG slices.
GPU_RESOURCE = re.compile(r"^nvidia\.com/(gpu|mig-[0-9]+g\.[0-9]+gb)$")
#: The HPA's stabilisation window may be at most one hour (autoscaling/v2 validation).
MAX_STABILIZATION_S = 3600
#: A pod's drain: at most an hour (a node drain or rollout waits this long per pod).
MAX_DRAIN_S = 3600


#: Names of most Kubernetes objects (Secrets, PriorityClasses): DNS-1123 subdomains.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _is_dns_subdomain(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 253 and DNS_SUBDOMAIN.fullmatch(value) is not None


def _distinct_names(field_name: str, value: Any, is_name: Any, allowed: str) -> None:
    """A list of names (a tuple once loaded), each passing `is_name`, none twice; else an error naming the field."""
    if not isinstance(value, tuple) or not all(map(is_name, value)) or len(set(value)) != len(value):
        raise ConfigError(f"`{field_name}` = {value!r}: allowed a list of distinct {allowed}.")


def _is_dns_label(value: Any) -> bool:
    return isinstance(value, str) and DNS_LABEL.fullmatch(value) is not None


def _dns_label(field_name: str, value: Any, allowed: str) -> None:
    """Kubernetes names and label values: a DNS-1123 label, else an error naming the field and `allowed`."""
    if not _is_dns_label(value):
        raise ConfigError(f"`{field_name}` = {value!r}: allowed {allowed}.")


def _int_in(field_name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"`{field_name}` = {value!r}: allowed an integer between {low} and {high}.")
    return value


@dataclass(frozen=True)
class Autoscaling:
    """How many replicas of one partition may run, and the queue time that adds one.

    The HPA's desired count is ceil(current x average queue time per request / target_queue_us),
    clamped to [min_replicas, max_replicas]; scale-down waits `scale_down_stabilization_s` (the
    highest recommendation in that window wins), scale-up acts at once.
    """

    min_replicas: int = 1
    max_replicas: int = 4
    #: Average queue time per request (microseconds) each pod is held to. It must exceed the
    #: batching window of the partition's models: a lightly loaded server already holds each
    #: request up to that window (measured here: ~10 ms per request at 10 ms windows, 19-23 ms saturated).
    target_queue_us: int = 15_000
    scale_down_stabilization_s: int = 300
    #: How long a terminating pod (scale-down, a rollout, a node drain) finishes the requests it holds:
    #: Triton's `--exit-timeout-secs` in the pod, and with preStop's sleep and some slack its
    #: terminationGracePeriodSeconds. Triton's own default, 10 s, cut streams of a generative model
    #: mid-answer, without a final response (measured 2026-12-06: four 1,000-token streams ended at
    #: ~231 tokens each): a partition serving one must cover its longest stream. A host's `make stop`
    #: keeps 10 s (an operator's stop; an idle keep-alive HTTP client holds Triton's stop this long).
    drain_s: int = 10
    #: For a partition serving a generation model: the sequences each pod may have waiting for a free
    #: running slot (`llm_sequences_waiting`, averaged over a minute) before the HPA adds pods. Its
    #: requests never queue in Triton's batcher (the model schedules them itself), so the queue time
    #: above does not see its load. Any waiting sequence means every slot is busy.
    target_waiting_sequences: int = 1
    #: Set by `ServingSpec` for messages: which partition this belongs to.
    partition: str = "<partition>"

    def __post_init__(self) -> None:
        where = f"partitions.{self.partition}.autoscaling"
        _int_in(f"{where}.min_replicas", self.min_replicas, 1, 1000)
        _int_in(f"{where}.max_replicas", self.max_replicas, 1, 1000)
        if self.max_replicas < self.min_replicas:
            raise ConfigError(
                f"`{where}.max_replicas` = {self.max_replicas} is below `min_replicas` = {self.min_replicas}: "
                f"allowed max_replicas >= min_replicas."
            )
        _int_in(f"{where}.target_queue_us", self.target_queue_us, 1, 60_000_000)
        _int_in(f"{where}.scale_down_stabilization_s", self.scale_down_stabilization_s, 0, MAX_STABILIZATION_S)
        _int_in(f"{where}.drain_s", self.drain_s, 1, MAX_DRAIN_S)
        _int_in(f"{where}.target_waiting_sequences", self.target_waiting_sequences, 1, 10_000)


#: What a `[partitions.<name>.autoscaling]` table may hold: Autoscaling's fields, less the one set for messages.
_AUTOSCALING_KEYS = {f.name for f in fields(Autoscaling)} - {"partition"}


@dataclass(frozen=True)
class KubernetesSettings:
    """The cluster the partitions are deployed to (see docs/scale-out.md)."""

    namespace: str = "triton-serving"
    #: Whole CPUs one node can give these pods (its allocatable CPUs): a partition's compute_share
    #: becomes whole CPUs of it, as on a host (contracts.partition_plan), so requests == limits are
    #: integers and the static CPU manager pins each pod to exclusive cores.
    node_cpus: int = 8
    #: Container memory = the partition's memory_mb (its models' budget) + this: tritonserver itself,
    #: one Python-backend stub process per model instance, and the memory-backed /dev/shm.
    memory_overhead_mb: int = 1024
    #: How long a pod may take to load its models before the startup probe gives up.
    startup_allowance_s: int = 300
    #: The image an init container copies the built model repository (and the Python backend's
    #: packages) from; deploy/image/Dockerfile builds it.
    model_repository_image: str = "triton-model-serving/model-repository:0.1.0"
    #: What a GPU partition requests (gpu overlay): `nvidia.com/gpu` = one MPS replica of a GPU
    #: shared by the NVIDIA device plugin; `nvidia.com/mig-<g>g.<m>gb` = one MIG slice.
    gpu_resource: str = "nvidia.com/gpu"
    #: The `release` label the Prometheus Operator's Prometheus selects ServiceMonitors and rules by.
    prometheus_release: str = "kube-prometheus-stack"
    #: The namespace Prometheus runs in: the only one whose pods the rendered NetworkPolicy lets reach
    #: a pod's metrics port (kube-prometheus-stack's usual namespace).
    prometheus_namespace: str = "monitoring"
    #: Namespaces whose pods may call the inference ports (HTTP and gRPC), besides `namespace`'s own
    #: pods: your clients', an ingress controller's. Every other pod of the cluster is refused.
    client_namespaces: tuple[str, ...] = ()
    #: Secrets (type kubernetes.io/dockerconfigjson, in `namespace`) the pods pull their images with: the
    #: model-repository image usually lives in a private registry.
    image_pull_secrets: tuple[str, ...] = ()
    #: The pods' PriorityClass ("" = the cluster's default): serving pods that must not be preempted
    #: by batch jobs when a node fills.
    priority_class_name: str = ""

    def __post_init__(self) -> None:
        _dns_label("kubernetes.namespace", self.namespace,
                   "a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)")
        _int_in("kubernetes.node_cpus", self.node_cpus, 1, 1024)
        _int_in("kubernetes.memory_overhead_mb", self.memory_overhead_mb, 0, 1 << 20)
        _int_in("kubernetes.startup_allowance_s", self.startup_allowance_s, 10, 3600)
        if not isinstance(self.model_repository_image, str) or not IMAGE_REF.fullmatch(self.model_repository_image):
            raise ConfigError(f"`kubernetes.model_repository_image` = {self.model_repository_image!r}: allowed an "
                              f"image reference like 'registry.example.com/team/model-repository:1.0'.")
        if not isinstance(self.gpu_resource, str) or not GPU_RESOURCE.fullmatch(self.gpu_resource):
            raise ConfigError(f"`kubernetes.gpu_resource` = {self.gpu_resource!r}: allowed 'nvidia.com/gpu' (MPS "
                              f"replica) or a MIG slice such as 'nvidia.com/mig-3g.40gb'.")
        _dns_label("kubernetes.prometheus_release", self.prometheus_release, "a label value (lowercase letters, digits and '-')")
        _dns_label("kubernetes.prometheus_namespace", self.prometheus_namespace,
                   "a namespace name (a DNS-1123 label: lowercase letters, digits and '-')")
        _distinct_names("kubernetes.client_namespaces", self.client_namespaces, _is_dns_label,
                        "namespace names (DNS-1123 labels), e.g. [\"shop\", \"ingress-nginx\"]; [] admits only the pods "
                        "of `kubernetes.namespace`")
        _distinct_names("kubernetes.image_pull_secrets", self.image_pull_secrets, _is_dns_subdomain,
                        "Secret names (DNS-1123 subdomains), e.g. [\"registry-credentials\"]")
        if self.priority_class_name != "" and not _is_dns_subdomain(self.priority_class_name):
            raise ConfigError(f"`kubernetes.priority_class_name` = {self.priority_class_name!r}: allowed a PriorityClass "
                              f"name (a DNS-1123 subdomain), or \"\" for the cluster's default.")


#: What a `[kubernetes]` table may hold: KubernetesSettings' fields.
_KUBERNETES_KEYS = {f.name for f in fields(KubernetesSettings)}
#: Lists of names: arrays in TOML, tuples in the frozen settings.
_KUBERNETES_LISTS = ("client_namespaces", "image_pull_secrets")


def autoscaling_from_table(partition: str, table: Any) -> Autoscaling:
    if not isinstance(table, dict):
        raise ConfigError(f"`partitions.{partition}.autoscaling` = {table!r}: allowed a table.")
    unknown = set(table) - _AUTOSCALING_KEYS
    if unknown:
        raise ConfigError(f"`partitions.{partition}.autoscaling` has unknown keys {sorted(unknown)}; "
                          f"allowed: {sorted(_AUTOSCALING_KEYS)}.")
    return Autoscaling(partition=partition, **table)


def kubernetes_from_table(table: Any) -> KubernetesSettings:
    if not isinstance(table, dict):
        raise ConfigError(f"`kubernetes` = {table!r}: allowed a table.")
    unknown = set(table) - _KUBERNETES_KEYS
    if unknown:
        raise ConfigError(f"`kubernetes` has unknown keys {sorted(unknown)}; allowed: {sorted(_KUBERNETES_KEYS)}.")
    table = {k: tuple(v) if k in _KUBERNETES_LISTS and isinstance(v, list) else v for k, v in table.items()}
    return KubernetesSettings(**table)
