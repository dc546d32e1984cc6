"""The generation model's custom metrics: names, help texts and histogram buckets, in one place.

The Triton model publishes them through serving.backend.stub_metrics (summed in the stub, sent once
a second: a metric call is a round trip to the server, ~15 per decode step before); the alert rules
(scripts/operations/alert_rules.py) and the Grafana dashboard read the same names from here, so a
renamed metric cannot silently break an alert. Each carries Triton's `model` / `version` labels.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricDef:
    name: str
    kind: str  # "gauge" | "counter" | "histogram"
    help: str
    buckets: tuple[float, ...] = ()
    labels: tuple[str, ...] = ()  # besides Triton's model / version


SEQUENCES_RUNNING = MetricDef("llm_sequences_running", "gauge", "Sequences in the running batch (prefilling or decoding)")
SEQUENCES_WAITING = MetricDef("llm_sequences_waiting", "gauge", "Requests in the wait queue (all priority levels)")
#: What the backlog alert holds the wait queue against (operations.alert_rules): published by the
#: model itself, so the alert follows each model's own setting instead of a copy of it.
RUNNING_SLOTS = MetricDef("llm_running_slots", "gauge", "Sequences the running batch holds at most (options.max_running)")
KV_BLOCKS_USED = MetricDef("llm_kv_blocks_used", "gauge", "KV cache blocks referenced by sequences")
KV_BLOCKS_FREE = MetricDef("llm_kv_blocks_free", "gauge", "KV cache blocks free or evictable (cached prefix, unreferenced)")
PREFIX_LOOKUP_TOKENS = MetricDef("llm_prefix_cache_lookup_tokens_total", "counter", "Prompt tokens looked up in the prefix cache")
PREFIX_HIT_TOKENS = MetricDef("llm_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from shared prefix blocks")
TOKENS_GENERATED = MetricDef("llm_generated_tokens_total", "counter", "Output tokens generated")
REQUESTS_FINISHED = MetricDef("llm_requests_finished_total", "counter", "Finished requests, by finish reason (label `reason`)",
                             labels=("reason",))
REQUESTS_REJECTED = MetricDef("llm_requests_rejected_total", "counter", "Rejected requests, by reason (label `reason`: invalid, queue_full, queue_timeout)",
                             labels=("reason",))
PREEMPTIONS = MetricDef("llm_preemptions_total", "counter", "Running sequences preempted and recomputed later, by reason "
                        "(label `reason`: kv_blocks = the KV cache ran out, priority = a realtime request took the place)",
                        labels=("reason",))
TIME_TO_FIRST_TOKEN = MetricDef("llm_time_to_first_token_seconds", "histogram", "Arrival to first output token",
                                (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0))
INTER_TOKEN_LATENCY = MetricDef("llm_inter_token_latency_seconds", "histogram", "Time between consecutive output tokens of a sequence",
                                (0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2))

ALL_METRICS = (SEQUENCES_RUNNING, SEQUENCES_WAITING, RUNNING_SLOTS, KV_BLOCKS_USED, KV_BLOCKS_FREE, PREFIX_LOOKUP_TOKENS, PREFIX_HIT_TOKENS,
               TOKENS_GENERATED, REQUESTS_FINISHED, REQUESTS_REJECTED, PREEMPTIONS, TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY)


def family_table() -> dict[str, tuple[str, str, tuple[float, ...] | None, tuple[str, ...]]]:
    """ALL_METRICS as a serving.backend.stub_metrics family table."""
    return {d.name: (d.kind, d.help, d.buckets or None, d.labels) for d in ALL_METRICS}
