"""One partition -> its pods: Deployment, Services, PodDisruptionBudget, HorizontalPodAutoscaler,
NetworkPolicy.

Pure functions of the parsed serving.toml and the partition plan `contracts.partition_plan` makes
for one node of `[kubernetes] node_cpus` CPUs, so a partition gets the same whole cores, ONNX
Runtime threads, ports and (on a GPU) MPS limits in a pod as on a host. The tritonserver arguments
come from the launcher's own `partition_server_settings` (for the pod's plan: addresses 0.0.0.0, the
pod's CPUs and threads, the image's paths); what differs: the admin key, a fixed decoy
that the preloaded request guard replaces with the Secret's key from the environment before Triton
reads its arguments (as the host's launcher does: no key is rendered, and none is on the command
line, which /proc/1/cmdline shows to every process of the node), strict readiness, exit-on-error
and the exit timeout (`pod_server_settings` says why).
"""
from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from serving.runtime.launcher import partition_server_settings, with_server_overrides
from serving.runtime.native import preload_variables, wanted_helpers
from serving.runtime.server import SERVER_STACK_LIMIT_BYTES, ServerSettings
from contracts.onnx_sessions import keep_onnxruntime_offline
from contracts.shared_memory import SHARED_MEMORY_DIR, TRITON_REGION_PREFIX
from contracts.partition_plan import PartitionPlan, PlannedPartition, plan_partitions
from serving.runtime.security import ARGV_DECOY_ENV, ARGV_SECRET_ENV, AdminKey
from contracts.scale_out_spec import DNS_LABEL
from contracts.serving_spec import CpuPlacement, ServingSpec

from k8s_deploy.errors import DeployConfigError
from serving.runtime.supervisor import RestartPolicy

#: NVIDIA's container for Triton 2.51.0 (the release this project pins: nvidia-pytriton 0.7.0's server).
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
TRITON_VERSION = "2.51.0"
CONTAINER = "tritonserver"
PART_OF = "triton-model-serving"
#: The init container copies the model repository image's /opt/serving here (an emptyDir).
SERVING_ROOT = PurePosixPath("/serving")
#: Where the model-repository image (deploy/image/Dockerfile) holds it all: the models, and beside them
#: what every pod needs whatever it serves (IMAGE_SHARED).
IMAGE_ROOT = PurePosixPath("/opt/serving")
IMAGE_SHARED = ("backends", "lib", "python", "site-packages")
MODEL_REPOSITORY = SERVING_ROOT / "models"
#: Triton's backends (symlinked) plus the project's Python-based `onnxruntime_cpu` backend.
BACKEND_DIR = SERVING_ROOT / "backends"
#: The Python backend stub's packages (onnxruntime, numpy, tokenizers) and the project's `serving`.
PYTHONPATH = f"{SERVING_ROOT / 'site-packages'}:{SERVING_ROOT / 'python'}"
#: The Secret every pod reads the admin key from; created by the operator, never rendered.
ADMIN_SECRET, ADMIN_SECRET_KEY = "triton-admin-key", "admin-key"
#: What the rendered arguments carry where the admin key goes (it passes AdminKey's own checks): the
#: request guard puts the Secret's key (SERVING_ARGV_SECRET) in its place inside tritonserver, so
#: Triton checks the real key while /proc/1/cmdline shows this. Public on purpose: it unlocks nothing.
ARGV_KEY_DECOY = "pod0admin0key0decoy0replaced0by0the0request0guard"
#: The preloaded helpers (serving.runtime.native): the image's build stage compiles them into
#: /opt/serving/lib, which the init container copies here with the rest.
NATIVE_LIBRARY_DIR = SERVING_ROOT / "lib"
#: Python-backend stubs talk to the server through /dev/shm; a container's default is 64 MiB.
SHM_SIZE_MB = 256
#: The root filesystem is read-only (`readOnlyRootFilesystem`); what tritonserver writes goes to these
#: emptyDirs: /dev/shm (the stubs' IPC) and /tmp (Triton's Python backend makes a python_env_* folder
#: per Python-based backend there). Nothing else: tests/integration/test_read_only_root.py serves
#: with every other mount read-only.
WRITABLE_PATHS = ("/tmp", "/dev/shm")
TMP_SIZE_MB = 64
PROBE_PERIOD_S = 5


@dataclass(frozen=True)
class DeployPlan:
    """What is rendered: the spec, its partitions planned for one node, CPU or GPU pods."""

    spec: ServingSpec
    plan: PartitionPlan
    gpu: bool

    def autoscaling(self, partition: str):
        return next(p.autoscaling for p in self.spec.effective_partitions if p.name == partition)

    @property
    def gpu_partitions(self) -> tuple[PlannedPartition, ...]:
        """The partitions whose pods take a GPU share: in GPU pods, those holding a `device = "gpu"`
        model, as a GPU host starts MPS only for those (a partition of CPU models gains nothing from
        a GPU share, and each one costs a replica of the device plugin's)."""
        on_gpu = set(self.spec.gpu_partitions()) if self.gpu else set()
        return tuple(p for p in self.plan.partitions if p.name in on_gpu)


#: The longest name DNS_LABEL (what Kubernetes allows a Service's name) takes; a partition's longest
#: is `triton-<partition>-metrics` (its start, "triton-", makes the label a DNS-1035 one too).
MAX_SERVICE_NAME = 63
#: The shortest `drain_s` for a partition serving a model that streams its answers: Triton's default
#: 10 s cut four 1,000-token streams at ~231 tokens each (2026-12-06, docs/generation.md); the
#: committed config's LLM partition has 120 s for its ~65-95 s longest answer.
MIN_STREAMING_DRAIN_S = 60


def streaming_models(spec: ServingSpec, partition: str | None = None) -> tuple[str, ...]:
    """The models (of `partition`, default every one) whose recipe streams their answers (decoupled
    generation: `Recipe.streams_answers`)."""
    from model_build.recipes.registry import RECIPES

    return tuple(m.name for m in spec.models if (partition is None or spec.partition_of(m) == partition)
                 and m.recipe in RECIPES and RECIPES[m.recipe].streams_answers)


def check_deployable_partitions(spec: ServingSpec) -> None:
    """What serving.toml allows but a cluster does not: partition names that make no valid Kubernetes
    names, and a partition whose streaming models would be cut mid-answer by a short drain."""
    for part in spec.effective_partitions:
        bad = [name for name in (resource_name(part.name), f"{resource_name(part.name)}-metrics")
               if not DNS_LABEL.fullmatch(name)]
        if bad:
            raise DeployConfigError(
                f"`partitions.{part.name}`: its Service `{bad[0]}` is no valid Kubernetes name (a DNS-1035 label: "
                f"at most {MAX_SERVICE_NAME} characters, ending in a letter or digit); allowed partition names of at "
                f"most {MAX_SERVICE_NAME - len(resource_name('')) - len('-metrics')} characters that do not end in '_'.")
        streaming = list(streaming_models(spec, part.name))
        if streaming and part.autoscaling.drain_s < MIN_STREAMING_DRAIN_S:
            raise DeployConfigError(
                f"`partitions.{part.name}.autoscaling.drain_s` = {part.autoscaling.drain_s}: the partition serves "
                f"{streaming}, whose answers stream for up to minutes, and a terminating pod would cut them without a "
                f"final response; allowed >= {MIN_STREAMING_DRAIN_S} (its longest answer at its running slots: "
                f"docs/scale-out.md).")


def plan_deployment(spec: ServingSpec, gpu: bool = False) -> DeployPlan:
    """Partitions planned as on a host of `node_cpus` CPUs, listening on all pod addresses."""
    spec.check_autoscaling_targets()
    check_deployable_partitions(spec)
    in_pod = with_server_overrides(spec, host="0.0.0.0", allow_non_loopback=True)
    plan = plan_partitions(in_pod, spec.kubernetes.node_cpus, gpu, placement=CpuPlacement.CPU_SETS,
                           gpu_partitions=spec.gpu_partitions())
    return DeployPlan(spec, plan, gpu)


def resource_name(partition: str) -> str:
    """`triton-<partition>`: partition names allow '_', Kubernetes names do not."""
    return "triton-" + partition.replace("_", "-")


def selector_labels(partition: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": resource_name(partition)}


def common_labels(partition: str) -> dict[str, str]:
    return {**selector_labels(partition), "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/version": TRITON_VERSION, "partition": partition}


def pod_server_settings(deploy: DeployPlan, part: PlannedPartition, gpu: bool) -> ServerSettings:
    """The launcher's settings for this partition of the pod's plan (its own addresses, CPUs and
    threads; the image's paths), with the key's decoy (ARGV_KEY_DECOY).

    Three flags differ from a host's: a pod has no launcher checking each model's readiness and no
    supervisor, so `--strict-readiness=true` (the pod is Ready only while every model is; Triton's
    default) and `--exit-on-error=true` (a model that fails to load ends the server, and the kubelet
    restarts the pod: CrashLoopBackOff, visible, instead of a Ready pod failing every request); and
    pods end routinely (scale-down, rollouts), so `--exit-timeout-secs` is the partition's `drain_s`
    (`[partitions.<name>.autoscaling]`), long enough for its longest stream."""
    settings = partition_server_settings(deploy.plan, part, MODEL_REPOSITORY, BACKEND_DIR, gpu_metrics=gpu,
                                         admin_key=AdminKey(ARGV_KEY_DECOY, "k8s_deploy decoy"))
    return dataclasses.replace(settings, strict_readiness=True, exit_on_error=True,
                               exit_timeout_secs=deploy.autoscaling(part.name).drain_s)


def server_args(deploy: DeployPlan, part: PlannedPartition, gpu: bool) -> list[str]:
    """tritonserver's arguments in the pod (`pod_server_settings`)."""
    return pod_server_settings(deploy, part, gpu).to_args_list()


#: The container's command: the admin key from the Secret must have the form the host's launcher
#: requires (serving.runtime.security.KEY_PATTERN: it goes into Triton's `--*-restricted-*` flags,
#: where a ',' ':' or '=' would change their meaning); Triton's threads run with the stack limit a
#: host's launcher sets (serving.runtime.server.SERVER_STACK_LIMIT_BYTES; Kubernetes has no ulimit
#: field and containers inherit 8 MiB, with which a ~4 MiB HTTP body crashed the server:
#: docs/operations.md); then the server replaces the shell. The request guard, preloaded, takes the
#: key from SERVING_ARGV_SECRET into Triton's arguments and drops both variables from the server's
#: environment, so the backend stubs and every model's Python code do not inherit the key. A restarted
#: container (the kubelet after a crash, or the liveness probe) first removes what a killed server
#: left in the pod's memory-backed /dev/shm, which outlives the container: the backend's IPC regions
#: (1 MiB and more each) and the instances' activity files count against the pod's memory and the
#: volume's sizeLimit. Only as the container's first process (pid 1: a pid namespace of its own, so no
#: other server shares that volume); elsewhere (a host, a test) /dev/shm is shared and the runtime
#: removes a server's files by its pid.
SERVER_COMMAND = ["sh", "-c",
                  f'if [ "$$" -eq 1 ]; then rm -f {TRITON_REGION_PREFIX}* {SHARED_MEMORY_DIR}/serving-*-activity; fi; '
                  f'case "${ARGV_SECRET_ENV}" in *[!A-Za-z0-9_-]*) n=0 ;; *) n=${{#{ARGV_SECRET_ENV}}} ;; esac; '
                  f'if [ "$n" -lt 24 ] || [ "$n" -gt 256 ]; then echo "[serving] the admin key (Secret {ADMIN_SECRET}, '
                  f'key {ADMIN_SECRET_KEY}) must be 24-256 characters of A-Z a-z 0-9 _ - (make admin-key makes one)" >&2; '
                  f'exit 1; fi; '
                  f'ulimit -s {SERVER_STACK_LIMIT_BYTES // 1024} || echo "[serving] could not raise the stack limit '
                  f'(hard limit $(ulimit -Hs) KiB): HTTP bodies of a few MiB may crash the server" >&2; '
                  f'exec tritonserver "$@"', "tritonserver"]
#: The prefix of every command the kubelet runs in the container (the liveness probe, preStop): an
#: exec gets the container's whole environment, the admin key included, and its /proc/<pid>/environ
#: is readable by every process of the same user, model code too (the request guard keeps the key
#: out of tritonserver's own environment, not out of theirs).
WITHOUT_KEY = ["env", "-u", ARGV_SECRET_ENV, "-u", ARGV_DECOY_ENV]
#: Seconds a terminating pod keeps serving while its endpoint is removed from the Services (the
#: kubelet runs preStop before SIGTERM; Triton stops taking new work at SIGTERM).
PRE_STOP_SLEEP_S = 5
#: Beyond preStop and Triton's --exit-timeout-secs: unloading the models once the in-flight requests
#: are done, before the kubelet's SIGKILL.
TERMINATION_SLACK_S = 15


def termination_grace_s(settings: ServerSettings) -> int:
    """preStop's sleep, then Triton's --exit-timeout-secs (the server's own setting) to finish
    in-flight requests, plus TERMINATION_SLACK_S."""
    return PRE_STOP_SLEEP_S + settings.exit_timeout_secs + TERMINATION_SLACK_S


def container_env(plan: PartitionPlan, part: PlannedPartition) -> list[dict[str, Any]]:
    """The partition's variables, the stub's PYTHONPATH, ONNX Runtime's telemetry opt-out, the
    preloaded helpers as the host's servers get them (the condition-wait cap that keeps Triton
    2.51's batcher from stalling, the gzip level, the request guard and its per-input limit), and
    the admin key from the Secret for the guard to put in place of the arguments' decoy."""
    env = [{"name": k, "value": v} for k, v in sorted(part.environment().items())]
    env.append({"name": "PYTHONPATH", "value": PYTHONPATH})
    # ONNX Runtime's telemetry off in every backend stub, as on a host (contracts.onnx_sessions)
    env += [{"name": k, "value": v} for k, v in keep_onnxruntime_offline({}).items()]
    helpers = preload_variables(wanted_helpers(plan.cond_wait_cap_us, plan.http_gzip_level),
                                lambda helper: NATIVE_LIBRARY_DIR / helper.library.name,
                                max_input_bytes=plan.max_input_bytes)
    env += [{"name": k, "value": v} for k, v in helpers.items()]
    env.append({"name": ARGV_DECOY_ENV, "value": ARGV_KEY_DECOY})
    env.append({"name": ARGV_SECRET_ENV, "valueFrom": {"secretKeyRef": {"name": ADMIN_SECRET, "key": ADMIN_SECRET_KEY}}})
    return env


def container_resources(deploy: DeployPlan, part: PlannedPartition) -> dict[str, Any]:
    """requests == limits, whole CPUs: Guaranteed QoS, so the static CPU manager pins exclusive cores."""
    quantities = {"cpu": str(part.intra_op_threads),
                  "memory": f"{part.memory_mb + deploy.spec.kubernetes.memory_overhead_mb}Mi"}
    if part in deploy.gpu_partitions:
        quantities[deploy.spec.kubernetes.gpu_resource] = "1"
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _http_probe(path: str, period_s: float, timeout_s: float, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": max(1, int(period_s)),
            "timeoutSeconds": max(1, int(timeout_s)), "failureThreshold": failures}


def liveness_probe(part: PlannedPartition) -> dict[str, Any]:
    """The supervisor's hang detection (period, timeout, failures) and its stub watch, as one exec
    probe (serving.runtime.pod_liveness): /v2/health/live answered, and every ready model with the
    backend stubs its config asks for. Triton keeps a model whose stub died READY and fails the
    requests that reach it; a host's supervisor reloads it, a pod's kubelet restarts the container."""
    policy = RestartPolicy()
    command = [*WITHOUT_KEY, "python3", "-m", "serving.runtime.pod_liveness", "--port", str(part.http_port), "--models",
               ",".join(part.models), "--backends", str(BACKEND_DIR), "--timeout-s", str(policy.liveness_timeout_s * 0.75)]
    return {"exec": {"command": command}, "periodSeconds": max(1, int(policy.liveness_interval_s)),
            "timeoutSeconds": max(1, int(policy.liveness_timeout_s)), "failureThreshold": policy.liveness_failures}


def container_probes(deploy: DeployPlan, part: PlannedPartition) -> dict[str, Any]:
    """Startup allowance for loading models; liveness as the supervisor's hang detection and stub
    watch; readiness."""
    startup_failures = math.ceil(deploy.spec.kubernetes.startup_allowance_s / PROBE_PERIOD_S)
    return {
        "startupProbe": _http_probe("/v2/health/ready", PROBE_PERIOD_S, 2, startup_failures),
        "livenessProbe": liveness_probe(part),
        "readinessProbe": _http_probe("/v2/health/ready", PROBE_PERIOD_S, 2, 2),
    }


#: Both containers: no privilege escalation, no capability, nothing written outside the emptyDirs.
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def render_container(deploy: DeployPlan, part: PlannedPartition) -> dict[str, Any]:
    return {
        "name": CONTAINER, "image": TRITON_IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": SERVER_COMMAND, "args": server_args(deploy, part, deploy.gpu), "env": container_env(deploy.plan, part),
        "ports": [{"name": "http", "containerPort": part.http_port, "protocol": "TCP"},
                  {"name": "grpc", "containerPort": part.grpc_port, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": part.metrics_port, "protocol": "TCP"}],
        "resources": container_resources(deploy, part),
        **container_probes(deploy, part),
        "lifecycle": {"preStop": {"exec": {"command": [*WITHOUT_KEY, "sleep", str(PRE_STOP_SLEEP_S)]}}},
        "volumeMounts": [{"name": "serving", "mountPath": str(SERVING_ROOT), "readOnly": True},
                         {"name": "tmp", "mountPath": WRITABLE_PATHS[0]}, {"name": "dshm", "mountPath": WRITABLE_PATHS[1]}],
        "securityContext": CONTAINER_SECURITY,
    }


def init_copy_script(part: PlannedPartition) -> str:
    """What the init container runs: the backends, helpers and packages, and of the models only the
    partition's own (every pod copied every model: ~800 MB, the LLM's 516 MB into pods that never load it;
    a review, 2026-12-07)."""
    shared = " ".join(str(IMAGE_ROOT / d) for d in IMAGE_SHARED)
    models = " ".join(shlex.quote(str(IMAGE_ROOT / "models" / m)) for m in part.models)
    return f"mkdir -p {MODEL_REPOSITORY} && cp -a {shared} {SERVING_ROOT}/ && cp -a {models} {MODEL_REPOSITORY}/"


def render_init_container(deploy: DeployPlan, part: PlannedPartition) -> dict[str, Any]:
    """Copies the partition's models, the backends and the stub packages into the shared emptyDir."""
    return {
        "name": "model-repository", "image": deploy.spec.kubernetes.model_repository_image,
        "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", init_copy_script(part)],
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        "volumeMounts": [{"name": "serving", "mountPath": str(SERVING_ROOT)}],
        "securityContext": CONTAINER_SECURITY,  # `cp` writes only into the emptyDir
    }


def render_deployment(deploy: DeployPlan, part: PlannedPartition) -> dict[str, Any]:
    """No `replicas`: the HPA owns the count (an applied value would reset it on every apply)."""
    pod_spec: dict[str, Any] = {
        "initContainers": [render_init_container(deploy, part)],
        "containers": [render_container(deploy, part)],
        "volumes": [{"name": "serving", "emptyDir": {}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": f"{TMP_SIZE_MB}Mi"}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_SIZE_MB}Mi"}}],
        "terminationGracePeriodSeconds": termination_grace_s(pod_server_settings(deploy, part, deploy.gpu)),
        # Model code has no use for the Kubernetes API: no service-account token in the pods.
        "automountServiceAccountToken": False,
        # The NVIDIA image's non-root user.
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                               "labelSelector": {"matchLabels": selector_labels(part.name)}}}]}},
    }
    cluster = deploy.spec.kubernetes
    if cluster.image_pull_secrets:  # the model-repository image usually lives in a private registry
        pod_spec["imagePullSecrets"] = [{"name": name} for name in cluster.image_pull_secrets]
    if cluster.priority_class_name:
        pod_spec["priorityClassName"] = cluster.priority_class_name
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": resource_name(part.name), "labels": common_labels(part.name)},
        "spec": {
            "selector": {"matchLabels": selector_labels(part.name)},
            "revisionHistoryLimit": 5,
            # Keep serving capacity during a rollout: add the new pod before removing an old one.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": common_labels(part.name)}, "spec": pod_spec},
        },
    }


def render_services(part: PlannedPartition, metrics_job: str) -> list[dict[str, Any]]:
    """Inference (HTTP + gRPC) for clients; metrics on its own Service, which the ServiceMonitor selects."""
    name = resource_name(part.name)
    inference = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {**common_labels(part.name), "app.kubernetes.io/component": "inference"}},
        "spec": {"type": "ClusterIP", "selector": selector_labels(part.name), "ports": [
            {"name": "http", "port": part.http_port, "targetPort": "http", "protocol": "TCP"},
            {"name": "grpc", "port": part.grpc_port, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"}]},
    }
    metrics = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{name}-metrics", "labels": {
            **common_labels(part.name), "app.kubernetes.io/component": "metrics", "monitoring-job": metrics_job}},
        "spec": {"type": "ClusterIP", "selector": selector_labels(part.name), "ports": [
            {"name": "metrics", "port": part.metrics_port, "targetPort": "metrics", "protocol": "TCP"}]},
    }
    return [inference, metrics]


def render_pdb(part: PlannedPartition) -> dict[str, Any]:
    """At most one pod of a partition evicted at a time (node drains, cluster upgrades)."""
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": resource_name(part.name), "labels": common_labels(part.name)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(part.name)}},
    }


def render_hpa(deploy: DeployPlan, part: PlannedPartition, metric_name: str,
               waiting_metric: str | None = None) -> dict[str, Any]:
    """autoscaling/v2 on the adapter's per-pod queue time per request (µs), averaged over the pods; for
    a partition serving a generation model also on `waiting_metric`, its sequences waiting for a
    running slot per pod (the HPA follows whichever asks for more pods)."""
    scaling = deploy.autoscaling(part.name)

    def per_pod(name: str, target: int) -> dict[str, Any]:
        return {"type": "Pods", "pods": {"metric": {"name": name}, "target": {"type": "AverageValue", "averageValue": str(target)}}}

    metrics = [per_pod(metric_name, scaling.target_queue_us)]
    if waiting_metric and streaming_models(deploy.spec, part.name):
        metrics.append(per_pod(waiting_metric, scaling.target_waiting_sequences))
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": resource_name(part.name), "labels": common_labels(part.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": resource_name(part.name)},
            "minReplicas": scaling.min_replicas, "maxReplicas": scaling.max_replicas,
            "metrics": metrics,
            "behavior": {
                "scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_stabilization_s,
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
                "scaleUp": {"stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 30}]},
            },
        },
    }


#: The namespace label the API server sets on every namespace (Kubernetes >= 1.22): selects one by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def render_network_policy(spec: ServingSpec, part: PlannedPartition) -> dict[str, Any]:
    """Who may reach a partition's pods: clients on the inference ports, Prometheus on metrics, no one else.

    Without one, every pod of the cluster reached every port (Kubernetes admits all traffic to a pod
    no policy selects): a compromised pod anywhere could send a partition's server what it liked.
    Admitted: the inference ports (by the container ports' names) from the pods of the serving
    namespace and of `[kubernetes] client_namespaces`; the metrics port from
    `[kubernetes] prometheus_namespace`. Egress: none. Triton, the backend stubs and the model code
    call nothing outside the pod (the stubs talk to the server through /dev/shm, the liveness probe
    over loopback, which no policy governs), so model code that tried to send data out is refused.
    The kubelet's probes come from the node, which a NetworkPolicy does not restrict. Enforced only
    where the cluster's network plugin implements NetworkPolicy (Calico, Cilium, ...)."""
    k8s = spec.kubernetes
    clients: list[dict[str, Any]] = [{"podSelector": {}}]
    if k8s.client_namespaces:
        clients.append({"namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(k8s.client_namespaces)}]}})
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": resource_name(part.name), "labels": common_labels(part.name)},
        "spec": {
            "podSelector": {"matchLabels": selector_labels(part.name)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": clients, "ports": [{"port": "http", "protocol": "TCP"}, {"port": "grpc", "protocol": "TCP"}]},
                {"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: k8s.prometheus_namespace}}}],
                 "ports": [{"port": "metrics", "protocol": "TCP"}]},
            ],
            "egress": [],
        },
    }
