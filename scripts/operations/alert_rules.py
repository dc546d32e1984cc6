"""Prometheus alert rules for Triton, with the thresholds of the field report (section 8.2).

The field report's rules: accelerator utilisation below 30% for 5 minutes (waste: investigate),
P99 above 80% of the SLA (early warning), accelerator memory above 90% (OOM is near), error rate
above 0.5% (critical) and a queue that keeps growing (critical: overload is near). Each GPU rule
has a CPU twin on the metrics Triton publishes with `--allow-cpu-metrics=true`, so the same rules
protect a CPU-only host. `TritonTargetDown` is added: a dead partition publishes no metric at all,
so every other rule would stay silent.

`render_alert_rules` is pure; `python -m operations.alert_rules` rewrites the committed
alert_rules.yml (a unit test keeps the two equal) and alert_rules_test.yml holds promtool tests.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from contracts.layout import SERVING_CONFIG
from contracts.serving_spec import NAME_PATTERN, ServingSpec, load_serving_spec
from operations.errors import MonitorConfigError
from serving.generation.metrics import KV_BLOCKS_FREE, KV_BLOCKS_USED, RUNNING_SLOTS, SEQUENCES_RUNNING, SEQUENCES_WAITING

RULES_PATH = Path(__file__).with_name("alert_rules.yml")
RULES_TEST_PATH = Path(__file__).with_name("alert_rules_test.yml")
#: Labels that identify one model on one partition (Triton's own plus the scrape's).
MODEL_LABELS = "job, instance, partition, model, version"
_DURATION = re.compile(r"^[1-9][0-9]*[smh]$")


def duration_seconds(duration: str) -> int:
    """Seconds of a duration of the form `AlertThresholds` takes ('30s', '5m', '1h')."""
    if not isinstance(duration, str) or not _DURATION.fullmatch(duration):
        raise MonitorConfigError(f"{duration!r}: expected a Prometheus duration such as '30s', '5m' or '1h'.")
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


#: A series every generation model exports: marks decoupled models whose request duration is a
#: whole generation, not a latency to hold against the SLA.
GENERATION_MARKER = SEQUENCES_RUNNING.name


@dataclass(frozen=True)
class AlertThresholds:
    """When each alert fires. Defaults are the field report's numbers; the SLA is the service's."""

    #: The P99 latency the service promises; the alert warns at `sla_warning_fraction` of it.
    p99_sla_ms: float = 100.0
    sla_warning_fraction: float = 0.80
    latency_for: str = "2m"
    low_utilisation: float = 0.30
    low_utilisation_for: str = "5m"
    memory_fraction: float = 0.90
    memory_for: str = "2m"
    error_rate: float = 0.005
    error_rate_window: str = "5m"
    error_rate_for: str = "1m"
    #: ... and at least this many of the window's requests failed: a share alone paged on one failure
    #: among a few requests (one 500 in 20 requests over 5 minutes is 5%, ten times the threshold).
    error_rate_min_failures: int = 5
    #: Growing = positive slope over the window, for `queue_growth_for`, with at least this many waiting.
    queue_growth_window: str = "2m"
    queue_growth_for: str = "3m"
    queue_min_depth: int = 2
    #: Backlogged = at least this many waiting at every evaluation for `queue_backlog_for`. Why beside
    #: "growing": a queue stops growing once it is full (its max_queue_size) or once closed-loop
    #: clients plateau, so "growing" never fired for a queue that filled within a minute and stayed
    #: full, nor for one that stays deep.
    #: The depth is the highest priority level's queue cap, so a full realtime queue alone fires it:
    #: `AlertThresholds.for_serving` reads it from serving.toml (the shared `[priorities.*]` cap, and
    #: a model's own `[models.<name>] max_queue_size` in `queue_backlog_depth_by_model`). The default
    #: stands for a model no serving config names (thresholds made without one).
    queue_backlog_depth: int = 24
    queue_backlog_depth_by_model: Mapping[str, int] = field(default_factory=dict)
    queue_backlog_for: str = "5m"
    target_down_for: str = "1m"
    #: Generation models (serving/generation/metrics.py): KV blocks in use above this share of all blocks.
    kv_usage_fraction: float = 0.90
    kv_usage_for: str = "2m"
    #: (Their wait queue is backlogged, for `queue_backlog_for`, at a whole running batch's worth of
    #: sequences: the depth is each model's own `llm_running_slots` gauge, its `options.max_running`.)
    job: str = "triton"
    #: The supervisor's own endpoint (serving.runtime.supervisor_metrics): restarts and crash loops.
    supervisor_job: str = "serving_supervisor"
    #: A partition restarted this often within `restart_window` is unstable (warning).
    restart_warning_count: int = 2
    #: A model the supervisor found not ready at its partition's start, for this long.
    model_not_ready_for: str = "1m"
    #: The supervisor's state files unwritable this long (a write is retried every tick, ~0.2 s).
    state_unwritten_for: str = "2m"
    restart_window: str = "10m"
    partition_down_for: str = "2m"
    #: Padding efficiency (real / computed tokens, the backend's custom metrics) below this ...
    padding_efficiency: float = 0.50
    padding_window: str = "5m"
    #: ... for this long: the batches of a text model are mostly padding.
    padding_for: str = "10m"

    def __post_init__(self) -> None:
        if not 0 < self.p99_sla_ms <= 600_000:
            raise MonitorConfigError(f"p99_sla_ms = {self.p99_sla_ms!r}: expected milliseconds in (0, 600000].")
        for name in ("sla_warning_fraction", "low_utilisation", "memory_fraction", "error_rate", "padding_efficiency",
                     "kv_usage_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise MonitorConfigError(f"{name} = {value!r}: expected a fraction strictly between 0 and 1.")
        for name in ("latency_for", "low_utilisation_for", "memory_for", "error_rate_window",
                     "error_rate_for", "queue_growth_window", "queue_growth_for", "queue_backlog_for", "target_down_for",
                     "restart_window", "partition_down_for", "model_not_ready_for", "state_unwritten_for", "padding_window",
                     "padding_for",
                     "kv_usage_for"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _DURATION.fullmatch(value):
                raise MonitorConfigError(f"{name} = {value!r}: expected a Prometheus duration such as '30s', '5m' or '1h'.")
        depths = {"queue_min_depth": self.queue_min_depth, "queue_backlog_depth": self.queue_backlog_depth,
                  **{f"queue_backlog_depth_by_model[{model!r}]": depth for model, depth in dict(self.queue_backlog_depth_by_model).items()}}
        for name, value in depths.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MonitorConfigError(f"{name} = {value!r}: expected an integer >= 1.")
        odd = sorted(str(model) for model in self.queue_backlog_depth_by_model if not NAME_PATTERN.fullmatch(str(model)))
        if odd:
            raise MonitorConfigError(f"queue_backlog_depth_by_model names {odd}: expected model names as serving.toml allows "
                                     f"(pattern {NAME_PATTERN.pattern}).")
        for name in ("job", "supervisor_job"):
            if not re.fullmatch(r"^[a-zA-Z_][a-zA-Z0-9_-]*$", getattr(self, name)):
                raise MonitorConfigError(f"{name} = {getattr(self, name)!r}: expected a Prometheus job name (letters, digits, _ and -).")
        for name in ("restart_warning_count", "error_rate_min_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MonitorConfigError(f"{name} = {value!r}: expected an integer >= 1.")

    @classmethod
    def for_serving(cls, spec: ServingSpec, **settings: Any) -> "AlertThresholds":
        """The thresholds for what `spec` serves: each model's backlog depth is its own highest
        priority level's queue cap (`ServingSpec.priorities_for`), named per model where it differs
        from the shared one. Without priority levels the queues have no cap and the default stands."""
        if not spec.priorities:
            return cls(**settings)

        def realtime_cap(levels) -> int:
            return min(levels, key=lambda level: level.level).queue.max_queue_size

        shared = realtime_cap(spec.priorities)
        own = {model.name: realtime_cap(spec.priorities_for(model)) for model in spec.models}
        return cls(queue_backlog_depth=shared, queue_backlog_depth_by_model={m: d for m, d in own.items() if d != shared},
                   **settings)

    @property
    def p99_warning_seconds(self) -> float:
        return round(self.p99_sla_ms * self.sla_warning_fraction / 1000.0, 6)


def _rule(name: str, expr: str, duration: str, severity: str, resource: str, summary: str, description: str,
          **labels: str) -> dict[str, Any]:
    """One rule; `labels` beyond severity and resource tell apart the rules of one alert name (promtool's
    lint refuses two of one name and labels), and routing can read them."""
    return {
        "alert": name, "expr": expr, "for": duration,
        "labels": {"severity": severity, "resource": resource, **labels},
        "annotations": {"summary": summary, "description": description},
    }


def _pod_cpu_memory_rules(t: AlertThresholds, container: str) -> list[dict[str, Any]]:
    """The CPU and memory rules for pods. Triton's nv_cpu_* metrics read /proc/stat and /proc/meminfo,
    which in a container describe the whole node, not the pod: its memory rule would stay silent
    until the pod is OOM-killed at its own limit. These read the container's usage (cAdvisor) against
    its limits (kube-state-metrics), both of which kube-prometheus-stack scrapes."""
    by_pod = f'container="{container}"'

    def limit(resource: str) -> str:
        return f'max by (namespace, pod) (kube_pod_container_resource_limits{{{by_pod}, resource="{resource}"}})'

    util_pct, mem_pct = f"{t.low_utilisation:.0%}", f"{t.memory_fraction:.0%}"
    return [
        # Only while the pod serves, as on a host: a pod that serves nothing (a partition that sees
        # traffic only in overload) is idle, not over-provisioned, and fired this forever.
        _rule("TritonCpuUtilisationLow",
              f"sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{{{by_pod}}}[{t.low_utilisation_for}])) "
              f"/ {limit('cpu')} < {t.low_utilisation} and on (namespace, pod) sum by (namespace, pod) "
              f"(rate(nv_inference_request_success[{t.low_utilisation_for}])) > 0", t.low_utilisation_for,
              "info", "cpu", f"Pod CPU utilisation below {util_pct} of its limit for {t.low_utilisation_for}",
              "Pod {{ $labels.pod }} uses {{ $value | humanizePercentage }} of its CPUs: "
              "capacity is idle (larger batches, fewer replicas, or a lower HPA target)."),
        _rule("TritonCpuMemoryHigh",
              f"max by (namespace, pod) (container_memory_working_set_bytes{{{by_pod}}}) / {limit('memory')} "
              f"> {t.memory_fraction}", t.memory_for, "warning", "cpu", f"Pod memory above {mem_pct} of its limit",
              "Pod {{ $labels.pod }} is at {{ $value | humanizePercentage }} of its memory limit: the kubelet "
              "OOM-kills it at 100%."),
    ]


def _served_failures(function: str, window: str, by: str, model_matcher: str) -> str:
    """PromQL: `function` (rate or increase) of the requests that failed on the server's side, per `by`."""
    def selector(*matchers: str) -> str:
        given = [m for m in (*matchers, model_matcher) if m]
        return "{" + ",".join(given) + "}" if given else ""

    isolated = selector('reason="framework_failure"')
    return (f"sum by ({by}) ({function}(nv_inference_request_failure{selector()}[{window}]) or "
            f"{function}(serving_rejected_requests_total{isolated}[{window}]))")


def served_error_share(window: str, by: str = MODEL_LABELS, model_matcher: str = "") -> str:
    """PromQL: the share of a model's requests that failed on the server's side, per `by`.

    Triton 2.51 counts a request the `onnxruntime_cpu` backend answers with an error as a success
    (`nv_inference_request_success`; a review sent five 400s and saw success +5, failure +0), so
    Triton's failure counter alone missed every request the backend isolated after an ONNX Runtime
    failure. Those are added from the backend's own counter, `serving_rejected_requests_total
    {reason="framework_failure"}` (already inside Triton's successes, so the total stays success +
    failure); its `invalid_input` requests are the callers' mistakes (400) and stay out, as Triton's
    own 400s do. `or`: a model without the backend's counter (an ensemble, the LLM) keeps Triton's."""
    model = "{" + model_matcher + "}" if model_matcher else ""
    total = (f"(sum by ({by}) (rate(nv_inference_request_success{model}[{window}])) + "
             f"sum by ({by}) (rate(nv_inference_request_failure{model}[{window}])))")
    return f"{_served_failures('rate', window, by, model_matcher)} / {total}"


def served_error_rule_expr(t: AlertThresholds) -> str:
    """PromQL of TritonErrorRateHigh: the share above `error_rate` with at least `error_rate_min_failures`
    failed requests in the window (the same failures the share counts)."""
    return (f"{served_error_share(t.error_rate_window)} > {t.error_rate} and "
            f"{_served_failures('increase', t.error_rate_window, MODEL_LABELS, '')} >= {t.error_rate_min_failures}")


#: One alert per host, not per partition: every partition's server exports the same host-wide CPU
#: figure under its own `instance` (host:port), and Prometheus adds `partition`.
_HOST_OF_INSTANCE = '"host", "$1", "instance", "(.*):[0-9]+"'


def render_alert_rules(t: AlertThresholds, pod_container: str | None = None) -> dict[str, Any]:
    """The rule file as a mapping (groups -> rules), ready for YAML. With `pod_container` (the server's
    container name), the rules for a Kubernetes deployment: CPU and memory per pod against its limits
    (`_pod_cpu_memory_rules`), and no rules on the supervisor's own metrics (a cluster has no
    supervisor: the kubelet restarts pods, and kube-state-metrics' KubePodCrashLooping covers loops)."""
    util_pct, mem_pct = f"{t.low_utilisation:.0%}", f"{t.memory_fraction:.0%}"
    rules = [
        _rule("TritonGpuUtilisationLow", f"nv_gpu_utilization < {t.low_utilisation}", t.low_utilisation_for,
              "info", "gpu", f"GPU utilisation below {util_pct} for {t.low_utilisation_for}",
              "GPU {{ $labels.gpu_uuid }} on {{ $labels.instance }} is {{ $value | humanizePercentage }} busy: "
              "capacity is idle (larger batches, more models per GPU, or fewer GPUs)."),
        # Per host, and only while it serves: an idle host is not over-provisioned, it is idle (this fired
        # forever on a quiet host, once per partition).
        _rule("TritonCpuUtilisationLow",
              f"max by (job, host) (label_replace(nv_cpu_utilization, {_HOST_OF_INSTANCE})) < {t.low_utilisation} "
              f"and on (job, host) sum by (job, host) (label_replace(rate(nv_inference_request_success"
              f"[{t.low_utilisation_for}]), {_HOST_OF_INSTANCE})) > 0",
              t.low_utilisation_for, "info", "cpu", f"CPU utilisation below {util_pct} for {t.low_utilisation_for}",
              "Host {{ $labels.host }} serves at {{ $value | humanizePercentage }} CPU busy: "
              "capacity is idle (larger batches or fewer partitions)."),
        # A generation model's request lasts until its last token (seconds, by design), so the models
        # that export the generation metrics are left to their own time-to-first-token and
        # inter-token panels instead of raising this alert whenever they serve.
        _rule("TritonP99LatencyNearSla",
              f'nv_inference_request_summary_us{{quantile="0.99"}} / 1e6 > {t.p99_warning_seconds}'
              f" unless on (instance, model, version) {GENERATION_MARKER}", t.latency_for,
              "warning", "latency",
              f"P99 above {t.sla_warning_fraction:.0%} of the {t.p99_sla_ms:g} ms SLA",
              "{{ $labels.model }} v{{ $labels.version }} on {{ $labels.instance }}: P99 {{ $value | humanizeDuration }} "
              "(queue or compute time is growing; see the dashboard's queue and batch panels)."),
        _rule("TritonGpuMemoryHigh", f"nv_gpu_memory_used_bytes / nv_gpu_memory_total_bytes > {t.memory_fraction}",
              t.memory_for, "warning", "gpu", f"GPU memory above {mem_pct}",
              "GPU {{ $labels.gpu_uuid }} on {{ $labels.instance }} is {{ $value | humanizePercentage }} full: "
              "an out-of-memory failure is near."),
        _rule("TritonCpuMemoryHigh", f"nv_cpu_memory_used_bytes / nv_cpu_memory_total_bytes > {t.memory_fraction}",
              t.memory_for, "warning", "cpu", f"Host memory above {mem_pct}",
              "Host of {{ $labels.instance }} is {{ $value | humanizePercentage }} full: an out-of-memory failure is near."),
        _rule("TritonErrorRateHigh", served_error_rule_expr(t), t.error_rate_for,
              "critical", "errors", f"Error rate above {t.error_rate:.1%}",
              "{{ $labels.model }} v{{ $labels.version }} on {{ $labels.instance }} fails "
              "{{ $value | humanizePercentage }} of requests: look at the server log now."),
        *queue_rules(t),
        _rule("TritonTargetDown", f'up{{job="{t.job}"}} == 0', t.target_down_for, "critical", "availability",
              "Triton metrics endpoint down",
              "{{ $labels.instance }} (partition {{ $labels.partition }}) does not answer scrapes: the server is down or hung."),
    ]
    if pod_container:
        pod_rules = {r["alert"]: r for r in _pod_cpu_memory_rules(t, pod_container)}
        rules = [pod_rules.get(r["alert"], r) for r in rules]
    groups = [{"name": "triton-field-report", "rules": rules}, {"name": "serving-batching", "rules": batching_rules(t)},
              {"name": "llm-generation", "rules": generation_rules(t)}]
    if not pod_container:
        groups.append({"name": "serving-supervisor", "rules": supervisor_rules(t)})
    return {"groups": groups}


def queue_backlog_selectors(t: AlertThresholds) -> list[tuple[str, int]]:
    """(label matcher, depth) pairs: the models of each own depth together, the rest at the shared
    depth ("" matches every model when none has its own)."""
    own = dict(t.queue_backlog_depth_by_model)
    by_depth: dict[int, list[str]] = {}
    for model, depth in sorted(own.items()):
        by_depth.setdefault(depth, []).append(model)
    rest = f'{{model!~"{"|".join(sorted(own))}"}}' if own else ""
    return [*((f'{{model=~"{"|".join(models)}"}}', depth) for depth, models in sorted(by_depth.items())), (rest, t.queue_backlog_depth)]


def queue_rules(t: AlertThresholds) -> list[dict[str, Any]]:
    """A model's queue: growing (arrivals exceed capacity) and backlogged (full, or deep and flat). The
    backlog rule comes once per depth (one alert name): each model is held to its own realtime cap,
    and the alert's text names that number."""
    pending = "nv_inference_pending_request_count"
    return [
        _rule("TritonQueueDepthGrowing",
              f"deriv({pending}[{t.queue_growth_window}]) > 0 and {pending} >= {t.queue_min_depth}",
              t.queue_growth_for, "critical", "queue", "Request queue keeps growing",
              "{{ $labels.model }} on {{ $labels.instance }}: the queue grows by {{ printf \"%.2f\" $value }} "
              "requests/s: arrivals exceed capacity, overload is near."),
        *(_rule("TritonQueueBacklogged", f"{pending}{selector} >= {depth}",
                t.queue_backlog_for, "warning", "queue", f"Request queue at {depth} or more for {t.queue_backlog_for}",
                "{{ $labels.model }} on {{ $labels.instance }}: {{ $value }} requests waiting, never fewer than "
                f"{depth} for {t.queue_backlog_for}: the model is saturated (a full queue answers 503); "
                "add capacity or shed load.", queue_cap=str(depth))
          for selector, depth in queue_backlog_selectors(t)),
    ]


def batching_rules(t: AlertThresholds) -> list[dict[str, Any]]:
    """Alerts on the onnxruntime_cpu backend's own batch metrics (serving/backend/metrics.py)."""
    real = f"sum by ({MODEL_LABELS}) (rate(serving_batch_real_tokens_total[{t.padding_window}]))"
    computed = f"sum by ({MODEL_LABELS}) (rate(serving_batch_computed_tokens_total[{t.padding_window}]))"
    return [
        _rule("ServingPaddingEfficiencyLow", f"{real} / {computed} < {t.padding_efficiency}", t.padding_for, "warning",
              "batching", f"Padding efficiency below {t.padding_efficiency:.0%} for {t.padding_for}",
              "{{ $labels.model }} on {{ $labels.instance }}: only {{ $value | humanizePercentage }} of the tokens it "
              "computes are real; the rest is padding. Check the sequence-length buckets "
              "(serving_batch_bucket_calls_total) against the traffic's lengths (`make padding-report`)."),
    ]


def supervisor_rules(t: AlertThresholds) -> list[dict[str, Any]]:
    """Alerts on what only the supervisor knows: a partition that keeps dying (docs/operations.md)."""
    return [
        _rule("ServingPartitionCrashLooping", "serving_partition_crash_loop == 1", "0m", "critical", "availability",
              "Partition in a crash loop: the supervisor gave up fast restarts",
              "Partition {{ $labels.partition }} spent its restart budget and is retried only every few minutes: "
              "its models are down between attempts. Read `make status` and the partition's log (a request or a "
              "model that crashes the server?)."),
        _rule("ServingPartitionRestarting",
              f"increase(serving_partition_restarts_total[{t.restart_window}]) >= {t.restart_warning_count}", "0m",
              "warning", "availability", f"Partition restarted {t.restart_warning_count}+ times in {t.restart_window}",
              "Partition {{ $labels.partition }} restarted {{ $value | printf \"%.0f\" }} times in "
              f"{t.restart_window}: it is unstable; the crash loop is near."),
        _rule("ServingPartitionDown", "serving_partition_up == 0", t.partition_down_for, "critical", "availability",
              f"Partition not ready for {t.partition_down_for}",
              "Partition {{ $labels.partition }} is not serving (state in `make status`)."),
        _rule("ServingModelNotReady", "serving_model_ready == 0", t.model_not_ready_for, "critical", "availability",
              "Model failed to load",
              "Model {{ $labels.model }} in partition {{ $labels.partition }} is not ready: its requests fail (404) while "
              "the partition and its other models serve. Read the partition log for the reason (a missing or corrupt "
              "model file?), fix it, then `make stop && make serve` (or load it through the repository API)."),
        _rule("ServingModelStubsUnhealed", "serving_model_stubs_unhealed == 1", "0m", "warning", "availability",
              "A dead backend stub is not being reloaded",
              "Model {{ $labels.model }} in partition {{ $labels.partition }} lost a backend stub that the supervisor no "
              "longer reloads (reload budget spent, or no admin key): the requests reaching that instance fail. "
              "`make status` says which; find why the stub dies (partition log), then restart the partition."),
        _rule("ServingSupervisorStateUnwritten", "serving_supervisor_state_unwritten == 1", t.state_unwritten_for,
              "warning", "disk", f"The supervisor cannot write its state for {t.state_unwritten_for}",
              "{{ $labels.instance }}: writing run/supervisor.json or run/manifest.json fails (a full or read-only "
              "disk?). Serving goes on, but `make status`, `make stop` and clients that read the manifest see stale "
              "state. The supervisor log names the error: free the disk; it writes again at its next tick."),
        _rule("ServingSupervisorDown", f'up{{job="{t.supervisor_job}"}} == 0', t.target_down_for, "critical",
              "availability", "Supervisor metrics endpoint down",
              "{{ $labels.instance }}: the supervisor is gone, so crashed partitions are no longer restarted."),
    ]


def generation_rules(t: AlertThresholds) -> list[dict[str, Any]]:
    """The generation model's own pressure signals: its KV cache and its wait queue live inside the
    model (Triton's pending-request count stays 0 for a decoupled model that accepts at once)."""
    used, free, waiting, slots = KV_BLOCKS_USED.name, KV_BLOCKS_FREE.name, SEQUENCES_WAITING.name, RUNNING_SLOTS.name
    return [
        _rule("LlmKvCacheNearlyFull", f"{used} / ({used} + {free}) > {t.kv_usage_fraction}", t.kv_usage_for, "warning", "kv_cache",
              f"KV cache above {t.kv_usage_fraction:.0%} of its blocks",
              "{{ $labels.model }} on {{ $labels.instance }} uses {{ $value | humanizePercentage }} of its KV blocks: new "
              "sequences wait and running ones get preempted (recomputed); add memory, lower max_context or use INT8 KV."),
        _rule("LlmWaitQueueGrowing", f"deriv({waiting}[{t.queue_growth_window}]) > 0 and {waiting} >= {t.queue_min_depth}",
              t.queue_growth_for, "critical", "queue", "Generation wait queue keeps growing",
              "{{ $labels.model }} on {{ $labels.instance }}: waiting sequences grow by {{ printf \"%.2f\" $value }}/s: "
              "arrivals exceed decode capacity; a full queue answers 503 next."),
        # one-to-one on every label (both gauges come from the same model and scrape): the alert keeps
        # them all, the namespace and pod a cluster's routing reads included
        _rule("LlmWaitQueueBacklogged", f"{waiting} >= {slots}", t.queue_backlog_for, "warning", "queue",
              f"Generation wait queue at a running batch's worth or more for {t.queue_backlog_for}",
              "{{ $labels.model }} on {{ $labels.instance }}: {{ $value }} sequences waiting, never fewer than its "
              f"running slots (max_running) for {t.queue_backlog_for}: decode capacity is saturated; add replicas or shed load."),
    ]


def alert_rules_yaml(thresholds: AlertThresholds) -> str:
    import yaml

    header = ("# Generated by `python -m operations.alert_rules` from serving.toml's queue caps: edit "
              "operations/alert_rules.py or serving.toml, not this file.\n")
    return header + yaml.safe_dump(render_alert_rules(thresholds), sort_keys=False, width=1000)


def thresholds_for_config(serving_config: Path = SERVING_CONFIG, sla_ms: float | None = None) -> AlertThresholds:
    """`AlertThresholds.for_serving` of a serving.toml, its errors as MonitorConfigError (the CLIs' one kind)."""
    try:  # read for its queue sizes, not to bind: a host `serve --allow-non-loopback` accepts is fine here
        spec = load_serving_spec(serving_config, allow_non_loopback=True)
    except (ValueError, OSError) as exc:  # ConfigError, and a file that is not UTF-8 text
        raise MonitorConfigError(f"the alert rules' serving config {serving_config}: {exc}") from None
    return AlertThresholds.for_serving(spec, **({} if sla_ms is None else {"p99_sla_ms": sla_ms}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="operations.alert_rules", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sla-ms", type=float, default=AlertThresholds.p99_sla_ms, help="P99 SLA in milliseconds")
    parser.add_argument("--config", type=Path, default=SERVING_CONFIG,
                        help="the serving.toml whose queue caps the backlog alert holds each model to (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=RULES_PATH)
    args = parser.parse_args(argv)
    try:
        text = alert_rules_yaml(thresholds_for_config(args.config, args.sla_ms))
    except MonitorConfigError as exc:
        print(f"operations.alert_rules: error: {exc}", file=sys.stderr)
        return 2
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
