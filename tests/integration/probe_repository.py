"""A throw-away model repository of `batch_probe` models for queueing tests.

The real models answer in about a millisecond, so their queues cannot be filled on purpose. The
probe (tests/integration/models/batch_probe/1/model.py) sleeps a fixed time per batch and reports
each request's execution, so queue sizes, timeouts and priorities can be tested exactly. Each
probe's config.pbtxt is rendered by contracts.model_config from a validated ServingSpec, the same
path the served models take (dynamic batcher, two priority levels, REJECT queue policies).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from contracts.model_config import TensorSpec, render_python_model_config, write_model_config
from contracts.serving_spec import ServingSpec, serving_spec_from_dict

PROBE_MODEL_PY = Path(__file__).parent / "models" / "batch_probe" / "1" / "model.py"
PROBE_INPUTS = (TensorSpec("tag", "TYPE_FP32", (1,)),)
PROBE_OUTPUTS = (
    TensorSpec("tag_out", "TYPE_FP32", (1,)),
    TensorSpec("execution", "TYPE_INT64", (1,)),
    TensorSpec("start_ns", "TYPE_INT64", (1,)),
    TensorSpec("batch_items", "TYPE_INT64", (1,)),
    TensorSpec("tagged_items", "TYPE_INT64", (1,)),
)


@dataclass(frozen=True)
class ProbeModel:
    """One probe model: its batch size, per-level queue sizes and how long a batch takes."""

    name: str
    max_batch_size: int
    realtime_queue: int
    batch_queue: int
    sleep_ms: int
    max_queue_delay_us: int = 0
    realtime_timeout_us: int = 2_000_000
    batch_timeout_us: int = 10_000_000

    def serving_spec(self) -> ServingSpec:
        """Validated like serving.toml (so the starvation invariant holds for every probe)."""
        return serving_spec_from_dict({
            "priorities": {
                "realtime": {"level": 1, "max_queue_size": self.realtime_queue, "max_request_batch_size": 1,
                             "default_timeout_microseconds": self.realtime_timeout_us},
                "batch": {"level": 2, "max_queue_size": self.batch_queue, "max_request_batch_size": 1,
                          "default_timeout_microseconds": self.batch_timeout_us},
            },
            "batching": {"default_priority": "batch", "max_queue_delay_microseconds": self.max_queue_delay_us},
            "models": {self.name: {"recipe": "batch_probe", "max_batch_size": self.max_batch_size}},
        })


def write_probe_repository(dest: Path, probes: tuple[ProbeModel, ...]) -> Path:
    for probe in probes:
        spec = probe.serving_spec()
        model_dir = Path(dest) / probe.name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROBE_MODEL_PY, model_dir / "1" / "model.py")
        config = render_python_model_config(spec.model(probe.name), spec, PROBE_INPUTS, PROBE_OUTPUTS,
                                          parameters={"sleep_ms": str(probe.sleep_ms)})
        write_model_config(model_dir, config)
    return Path(dest)
