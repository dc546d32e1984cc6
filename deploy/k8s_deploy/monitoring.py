"""What watches the pods and feeds the autoscaler: ServiceMonitor, PrometheusRule, prometheus-adapter.

- The ServiceMonitor scrapes every partition's metrics Service with `job` = the alert rules' job and
  a `partition` label, so the rules of scripts/operations/alert_rules.yml apply unchanged.
- The PrometheusRule's groups ARE `operations.alert_rules.render_alert_rules` (one generator).
- prometheus-adapter turns NVIDIA's k8s-onprem queue-time query into a per-pod custom metric: a
  pod's queue time per request (µs) in the last minute, over all its models' requests,
  sum(increase(nv_inference_queue_duration_us[1m])) / clamp_min(sum(increase(nv_inference_request_success[1m])), 1),
  with the adapter's `<<.LabelMatchers>>` (namespace and pod names) and `by (<<.GroupBy>>)` (pod).
  NVIDIA's chart writes `avg(delta(...) / (1 + delta(...)))`, the mean over models: a pod serves
  several models, and each idle one counts 0, so a `main` pod whose text requests queue 60 ms read
  15 ms (one busy model of four) and scaled out at 4x its target. Summed before dividing, each
  request weighs the same. Both counters only grow, so `increase` (which Prometheus documents for
  counters) keeps a restarted server's reset from reading as a negative queue time, and
  `clamp_min(..., 1)` keeps an idle pod at 0 without biasing a quiet one low (two 30 ms waits in the
  window read 30 ms, not 20).
- The window is 1 minute, four scrape intervals, where NVIDIA's chart has 30 s: `increase` needs two
  samples in its window, and with a 15-s scrape one late or missed scrape left a 30-s window with
  one, the pod without a value for a scrape interval and the HPA without its metric.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Sequence

from operations.alert_rules import AlertThresholds, duration_seconds, render_alert_rules
from contracts.serving_spec import ServingSpec
from serving.generation.metrics import SEQUENCES_WAITING

from k8s_deploy.errors import DeployConfigError
from k8s_deploy.workload import CONTAINER, PART_OF, streaming_models

#: The custom metric the HPAs read (per pod, microseconds).
QUEUE_METRIC = "triton_queue_time_per_request_us"
#: The custom metric the HPA of a partition serving a generation model reads too (per pod, sequences
#: waiting for a running slot, averaged over the window): such a model's requests never queue in
#: Triton's batcher, so the queue time does not see its load.
WAITING_METRIC = "triton_llm_sequences_waiting"
SCRAPE_INTERVAL = "15s"
#: Four scrape intervals (module docstring; NVIDIA's chart has 30 s); the local rehearsal shortens
#: it (tests/integration/test_scaling_signal.py).
QUEUE_WINDOW = "1m"
_QUERY = ("sum(increase(nv_inference_queue_duration_us{{{m}}}[{w}])) by ({g})"
          "/clamp_min(sum(increase(nv_inference_request_success{{{m}}}[{w}])) by ({g}),1)")
_WAITING_QUERY = "sum(avg_over_time(" + SEQUENCES_WAITING.name + "{{{m}}}[{w}])) by ({g})"


def adapter_metrics_query(window: str = QUEUE_WINDOW, streaming_models: Sequence[str] = ()) -> str:
    """The adapter's `metricsQuery` template (Go template placeholders left in). The models that stream
    their answers are left out: their requests pass Triton's queue at once and count as successes when
    they end, so they diluted a pod's queue time (a review, 2026-12-07)."""
    left_out = f',model!~"{"|".join(sorted(streaming_models))}"' if streaming_models else ""
    return _QUERY.format(m=f"<<.LabelMatchers>>{left_out}", w=window, g="<<.GroupBy>>")


def adapter_waiting_query(window: str = QUEUE_WINDOW) -> str:
    """The adapter's `metricsQuery` for WAITING_METRIC: a pod's waiting sequences, averaged over the window."""
    return _WAITING_QUERY.format(m="<<.LabelMatchers>>", w=window, g="<<.GroupBy>>")


def substitute_adapter_template(template: str, namespace: str, pods: Sequence[str], group_by: str = "pod") -> str:
    """What prometheus-adapter sends Prometheus for one HPA's pods: `<<.LabelMatchers>>` becomes
    `namespace="<ns>",pod=~"<pod>|<pod>"` and `<<.GroupBy>>` the pod label."""
    if not pods:
        raise DeployConfigError("substitute_adapter_template: `pods` is empty: the adapter always names at least one pod.")
    matchers = f'namespace="{namespace}",pod=~"{"|".join(pods)}"'
    return template.replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", group_by)


def render_adapter_rules(spec: ServingSpec, window: str = QUEUE_WINDOW) -> list[dict[str, Any]]:
    """prometheus-adapter `rules.custom` entries (its Helm chart's values): the queue time per request
    of every pod, and the waiting sequences where a generation model is served."""
    namespace = spec.kubernetes.namespace
    resources = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
    streaming = streaming_models(spec)
    rules = [{
        "seriesQuery": f'nv_inference_queue_duration_us{{namespace="{namespace}",pod!=""}}',
        "resources": resources,
        "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
        "metricsQuery": adapter_metrics_query(window, streaming),
    }]
    if streaming:
        rules.append({
            "seriesQuery": f'{SEQUENCES_WAITING.name}{{namespace="{namespace}",pod!=""}}',
            "resources": copy.deepcopy(resources),  # its own mapping: a shared one is written as a YAML alias
            "name": {"matches": f"^{SEQUENCES_WAITING.name}$", "as": WAITING_METRIC},
            "metricsQuery": adapter_waiting_query(window),
        })
    return rules


def render_adapter_values(spec: ServingSpec) -> dict[str, Any]:
    """Values for the prometheus-community/prometheus-adapter chart: only our rule, no defaults."""
    return {"rules": {"default": False, "custom": render_adapter_rules(spec)}}


def monitoring_labels(spec: ServingSpec) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": PART_OF, "release": spec.kubernetes.prometheus_release}


def render_service_monitor(spec: ServingSpec, thresholds: AlertThresholds) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "tritonserver", "labels": monitoring_labels(spec)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/component": "metrics"}},
            # job = the metrics Service's `monitoring-job` label = the alert rules' job ("triton").
            "jobLabel": "monitoring-job",
            "targetLabels": ["partition"],
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": SCRAPE_INTERVAL, "scheme": "http"}],
        },
    }


def render_prometheus_rule(spec: ServingSpec, thresholds: AlertThresholds) -> dict[str, Any]:
    """The host's rules for pods: per-pod CPU and memory; no supervisor (the kubelet restarts pods). A
    pod's metrics port opens only once its models are loaded, which the startup probe allows
    `startup_allowance_s`, and the ServiceMonitor scrapes pods that are not ready yet: TritonTargetDown
    waits that long beyond the host's `target_down_for` (it paged at every rollout whose models took
    over a minute to load; a review, 2026-12-07). A pod that never comes up is the kubelet's to restart
    and kube-prometheus-stack's KubePodCrashLooping / KubeDeploymentReplicasMismatch to report."""
    grace = spec.kubernetes.startup_allowance_s + duration_seconds(thresholds.target_down_for)
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "tritonserver-alerts", "labels": monitoring_labels(spec)},
        "spec": render_alert_rules(dataclasses.replace(thresholds, target_down_for=f"{grace}s"), pod_container=CONTAINER),
    }
