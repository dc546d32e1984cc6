"""serving.toml's scale-out tables: [partitions.<name>.autoscaling] and [kubernetes]."""
from __future__ import annotations

import copy

import pytest

from conftest import TWO_PRIORITY_LEVELS
from contracts.errors import ConfigError
from contracts.scale_out_spec import Autoscaling, KubernetesSettings
from contracts.serving_spec import serving_spec_from_dict

BASE = {
    "priorities": TWO_PRIORITY_LEVELS,
    "batching": {"default_priority": "batch", "max_queue_delay_microseconds": 10000},
    "models": {"m": {"recipe": "digit_cnn", "partition": "p"}},
    "partitions": {"p": {"compute_share": 50, "memory_mb": 512}},
}


def spec_with(autoscaling=None, kubernetes=None, **model):
    data = copy.deepcopy(BASE)
    if autoscaling is not None:
        data["partitions"]["p"]["autoscaling"] = autoscaling
    if kubernetes is not None:
        data["kubernetes"] = kubernetes
    data["models"]["m"].update(model)
    return serving_spec_from_dict(data)


def test_a_partition_without_an_autoscaling_table_gets_the_defaults_and_old_files_still_load():
    spec = spec_with()
    assert spec.partitions[0].autoscaling == Autoscaling(partition="p")
    assert spec.kubernetes == KubernetesSettings()


def test_the_autoscaling_table_is_read_into_the_partition():
    spec = spec_with({"min_replicas": 2, "max_replicas": 6, "target_queue_us": 20000, "scale_down_stabilization_s": 120})
    scaling = spec.partitions[0].autoscaling
    assert (scaling.min_replicas, scaling.max_replicas, scaling.target_queue_us, scaling.scale_down_stabilization_s) == (2, 6, 20000, 120)


def test_max_replicas_below_min_replicas_is_rejected_naming_both():
    with pytest.raises(ConfigError, match=r"`partitions.p.autoscaling.max_replicas` = 1 is below `min_replicas` = 3"):
        spec_with({"min_replicas": 3, "max_replicas": 1})


@pytest.mark.parametrize("key, value, allowed", [
    ("min_replicas", 0, "between 1 and 1000"), ("max_replicas", 1001, "between 1 and 1000"),
    ("scale_down_stabilization_s", 3601, "between 0 and 3600"), ("target_queue_us", True, "between 1 and 60000000"),
])
def test_out_of_range_autoscaling_values_name_the_field_value_and_range(key, value, allowed):
    with pytest.raises(ConfigError, match=rf"`partitions.p.autoscaling.{key}` = {value!r}: allowed an integer {allowed}"):
        spec_with({key: value})


def test_unknown_autoscaling_keys_are_rejected_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"`partitions.p.autoscaling` has unknown keys \['target_cpu'\]; allowed: \[.*min_replicas"):
        spec_with({"target_cpu": 80})


def test_a_queue_target_within_the_batching_window_is_rejected_since_idle_pods_already_queue_that_long():
    from k8s_deploy.workload import plan_deployment

    with pytest.raises(ConfigError, match=r"`partitions.p.autoscaling.target_queue_us` = 10000 is not above the batching "
                                          r"window of its models \(10000 us"):
        spec_with({"target_queue_us": 10000}).check_autoscaling_targets()
    with pytest.raises(ConfigError, match=r"= 15000 is not above the batching window of its models \(20000 us"):
        plan_deployment(spec_with({"target_queue_us": 15000}, max_queue_delay_microseconds=20000))
    assert spec_with({"target_queue_us": 10001}).partitions[0].autoscaling.target_queue_us == 10001


@pytest.mark.parametrize("kubernetes, message", [
    ({"namespace": "Triton_NS"}, r"`kubernetes.namespace` = 'Triton_NS': allowed a DNS-1123 label"),
    ({"node_cpus": 0}, r"`kubernetes.node_cpus` = 0: allowed an integer between 1 and 1024"),
    ({"gpu_resource": "amd.com/gpu"}, r"`kubernetes.gpu_resource` = 'amd.com/gpu': allowed 'nvidia.com/gpu'"),
    ({"model_repository_image": "repo/img:tag; rm -rf /"}, r"`kubernetes.model_repository_image` = .*: allowed an image reference"),
    ({"replicas": 3}, r"`kubernetes` has unknown keys \['replicas'\]"),
    ({"prometheus_namespace": "Monitoring"}, r"`kubernetes.prometheus_namespace` = 'Monitoring': allowed a namespace name"),
    ({"client_namespaces": "shop"}, r"`kubernetes.client_namespaces` = 'shop': allowed a list of distinct namespace names"),
    ({"client_namespaces": ["shop", "shop"]}, r"`kubernetes.client_namespaces` = \('shop', 'shop'\): allowed a list of distinct"),
    ({"client_namespaces": ["shop", "Bad_NS"]}, r"allowed a list of distinct namespace names \(DNS-1123 labels\)"),
    ({"image_pull_secrets": ["Regcred"]}, r"`kubernetes.image_pull_secrets` = \('Regcred',\): allowed a list of distinct Secret names"),
    ({"image_pull_secrets": "regcred"}, r"`kubernetes.image_pull_secrets` = 'regcred': allowed a list of distinct"),
    ({"priority_class_name": "High Priority"}, r"`kubernetes.priority_class_name` = 'High Priority': allowed a PriorityClass"),
])
def test_invalid_kubernetes_settings_name_the_field_and_what_is_allowed(kubernetes, message):
    with pytest.raises(ConfigError, match=message):
        spec_with(kubernetes=kubernetes)


def test_a_mig_slice_is_an_allowed_gpu_resource():
    assert spec_with(kubernetes={"gpu_resource": "nvidia.com/mig-3g.40gb"}).kubernetes.gpu_resource == "nvidia.com/mig-3g.40gb"


def test_client_namespaces_are_read_as_a_tuple_and_default_to_none():
    assert KubernetesSettings().client_namespaces == ()
    spec = spec_with(kubernetes={"client_namespaces": ["shop", "ingress-nginx"], "prometheus_namespace": "observability"})
    assert spec.kubernetes.client_namespaces == ("shop", "ingress-nginx")
    assert spec.kubernetes.prometheus_namespace == "observability"
    hash(spec.kubernetes)  # frozen and hashable, like every other settings object
