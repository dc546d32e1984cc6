"""How long a lowest-priority request can wait under sustained higher-priority load: the bound.

Why a bound exists at all (Triton 2.51 semantics, read in triton-inference-server/core):
- With per-level queue policies Triton disables batch pre-fetching: the dynamic batcher forms a
  batch only when a model instance is idle, as a prefix of its queue in priority order (all of
  level 1, then level 2 first-in first-out, ...), stopping at the first request that would push
  the batch past `max_batch_size` (expired requests are rejected on the way).
- A level's `max_queue_size` counts requests; a full level answers 503/UNAVAILABLE at once.

So a batch formed while the levels above the lowest are saturated holds at most
H = sum(max_queue_size x max_request_batch_size) of their items, and the rest of the batch,
R = max_batch_size - H, is left to the lowest level. If R >= the lowest level's request size s
(the invariant `ServingSpec.check_lowest_priority_progress` enforces), every batch formed while a
lowest-level request X waits either contains X or takes at least one request, and at least
R - s + 1 items, queued ahead of X. X is therefore in one of the first

    n + 1 batches formed after it is queued,  n = min(A, ceil(A * s / (R - s + 1)))

where A <= max_queue_size - 1 requests are ahead of X. In time, with one instance and T the
execution time of a full batch: X completes within (n + 2) * T + max_queue_delay (the batch
running when X arrives, n batches ahead, its own; the batch window applies only when the queue
cannot fill a batch, i.e. once, for X's own batch). Pure functions; no server needed.

Caveat stated in docs/priorities.md: the bound assumes callers keep `max_request_batch_size` per
level (model_client does) and that variable-shape inputs are ragged-batched (Triton ends a batch
at a shape change otherwise).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import ConfigError, ServingError
from contracts.layout import SERVING_CONFIG
from contracts.sequence_buckets import MAX_INPUT_DIMS_PARAMETER
from contracts.serving_spec import ModelSpec, ServingSpec, load_serving_spec


@dataclass(frozen=True)
class ProgressBound:
    """The starvation bound of one model's lowest priority level (see the module docstring)."""

    model: str
    level: str
    max_batch_size: int
    instances: int
    #: Items the higher levels can hold at once: sum of max_queue_size x max_request_batch_size.
    higher_items: int
    #: Largest lowest-level request (items).
    request_items: int
    #: Lowest-level requests that can be queued ahead of a newly queued one.
    requests_ahead: int

    def __post_init__(self) -> None:
        if self.reserved_items < self.request_items:
            raise ConfigError(
                f"model `{self.model}`: max_batch_size {self.max_batch_size} - higher-level items "
                f"{self.higher_items} = {self.reserved_items} < {self.level} request size {self.request_items}: "
                "no progress guarantee (allowed: higher items + request size <= max_batch_size)."
            )
        if self.instances < 1 or self.requests_ahead < 0:
            raise ConfigError(f"model `{self.model}`: instances must be >= 1 and requests_ahead >= 0.")

    @property
    def reserved_items(self) -> int:
        """Slots of every batch the higher levels can never take."""
        return self.max_batch_size - self.higher_items

    @property
    def items_taken_per_batch(self) -> int:
        """Lowest-level items ahead of X that every batch without X takes, at least."""
        return self.reserved_items - self.request_items + 1

    @property
    def batches_ahead(self) -> int:
        """n: batches formed after X is queued that may still not contain X."""
        items_ahead = self.requests_ahead * self.request_items
        return min(self.requests_ahead, math.ceil(items_ahead / self.items_taken_per_batch))

    @property
    def batches(self) -> int:
        """X is in one of the first `batches` batches formed after it is queued."""
        return self.batches_ahead + 1

    def latest_completion_s(self, execution_s: float, max_queue_delay_s: float) -> float:
        """Queue wait plus execution of X, given a full batch's execution time (measured)."""
        if execution_s < 0 or max_queue_delay_s < 0:
            raise ConfigError("execution_s and max_queue_delay_s must be >= 0.")
        return (math.ceil(self.batches / self.instances) + 1) * execution_s + max_queue_delay_s


def lowest_priority_progress_bound(
    spec: ServingSpec, model: str | ModelSpec, requests_ahead: int | None = None
) -> ProgressBound:
    """The bound for `model` (a name in `spec`, or a ModelSpec as served, e.g. with the measured
    max_batch_size). `requests_ahead` defaults to the worst case, a full lowest-level queue."""
    model_spec = spec.model(model) if isinstance(model, str) else model
    priorities = spec.priorities_for(model_spec)  # with the model's own queue sizes
    if len(priorities) < 2:
        raise ConfigError("a single priority level cannot be starved by another: no bound to compute.")
    *higher, lowest = sorted(priorities, key=lambda p: p.level)
    worst_ahead = lowest.queue.max_queue_size - 1
    if requests_ahead is not None and not 0 <= requests_ahead <= worst_ahead:
        raise ConfigError(f"requests_ahead = {requests_ahead}: allowed 0..{worst_ahead} (the queue holds {worst_ahead + 1}).")
    return ProgressBound(
        model=model_spec.name,
        level=lowest.name,
        max_batch_size=model_spec.max_batch_size,
        instances=model_spec.instance_count,
        higher_items=sum(p.queued_items for p in higher),
        request_items=lowest.max_request_batch_size,
        requests_ahead=worst_ahead if requests_ahead is None else requests_ahead,
    )


@dataclass(frozen=True)
class ServedModelFacts:
    """What a rendered config.pbtxt says that the bound depends on."""

    max_batch_size: int
    is_ensemble: bool
    #: Variable-shape inputs without `allow_ragged_batch`: Triton ends a batch at a shape change,
    #: so a higher-priority request of another shape can keep lower ones out: no bound.
    equal_shape_inputs: tuple[str, ...]
    #: {priority level: max_queue_size} as rendered.
    queue_sizes: tuple[tuple[int, int], ...]
    #: A decoupled generation model: no Triton batcher; its own scheduler orders by priority.
    is_decoupled: bool = False
    #: The equal-shape inputs are declared so (the config's `max_input_dims`: a brought ONNX file whose
    #: variable axes are not padded token sequences, recipe onnx_file), not a config that forgot ragged batching.
    equal_shapes_declared: bool = False


def served_model_facts(config_path: str | Path) -> ServedModelFacts:
    """Read a rendered config.pbtxt (the served max_batch_size may be below the serving.toml cap)."""
    from contracts.model_config import read_model_config

    config = read_model_config(Path(config_path).parent)
    equal_shape = tuple(
        t.name for t in config.input if any(d < 0 for d in t.dims) and not t.allow_ragged_batch
    )
    queues = tuple(sorted((int(k), int(v.max_queue_size)) for k, v in config.dynamic_batching.priority_queue_policy.items()))
    return ServedModelFacts(int(config.max_batch_size), config.platform == "ensemble", equal_shape, queues,
                            config.model_transaction_policy.decoupled, MAX_INPUT_DIMS_PARAMETER in config.parameters)


def describe_bound(bound: ProgressBound, execution_ms: float | None, max_queue_delay_us: int) -> str:
    text = (
        f"{bound.model}: max_batch_size {bound.max_batch_size}; higher levels hold <= {bound.higher_items} items, "
        f"{bound.reserved_items} reserved for `{bound.level}`; a {bound.level} request is in one of the first "
        f"{bound.batches} batches formed after it is queued"
    )
    if execution_ms is not None:
        latest = bound.latest_completion_s(execution_ms / 1000, max_queue_delay_us / 1e6)
        text += f"; completes within {latest * 1000:.0f} ms at {execution_ms:g} ms per full batch"
    return text


def describe_served_model(spec: ServingSpec, model: ModelSpec, repository: Path, execution_ms: float | None) -> str:
    """One line per model: the bound for the served config if it is built, else for the cap."""
    from dataclasses import replace

    config_path = repository / model.name / "config.pbtxt"
    served = model
    if config_path.exists():
        facts = served_model_facts(config_path)
        if facts.is_ensemble:
            return f"{model.name}: ensemble (no batcher of its own): its bound is the sum of its steps' bounds"
        if facts.is_decoupled:
            return (f"{model.name}: decoupled generation model (no Triton batcher): its own scheduler admits realtime "
                    "first into free slots (docs/generation.md)")
        if facts.equal_shape_inputs:
            declared = (" (declared by its max_input_dims: the bound holds only among requests of one shape)"
                        if facts.equal_shapes_declared else "")
            return (f"{model.name}: NO bound: inputs {list(facts.equal_shape_inputs)} have variable shapes without "
                    f"allow_ragged_batch, and Triton ends a batch at a shape change{declared}")
        served = replace(model, max_batch_size=facts.max_batch_size)
    delay = model.max_queue_delay_microseconds
    delay = spec.batching.max_queue_delay_microseconds if delay is None else delay
    note = "" if config_path.exists() else " (not built: serving.toml cap)"
    return describe_bound(lowest_priority_progress_bound(spec, served), execution_ms, delay) + note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.starvation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=SERVING_CONFIG)
    parser.add_argument("--execution-ms", type=float, help="measured execution time of a full batch (for a time bound)")
    args = parser.parse_args(argv)
    try:
        spec = load_serving_spec(args.config)
        for model in spec.models:
            print(describe_served_model(spec, model, args.config.resolve().parent, args.execution_ms))
    except ServingError as exc:
        print(f"contracts.starvation: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
