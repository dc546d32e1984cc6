"""Layer sensitivity, the fewest layers to keep in higher precision, and the precision plan.

Method: each quantizable layer is quantized ON ITS OWN (every other layer stays FP32) in a
fake-quantized graph (compute layers with TensorRT's symmetric scheme, the lossier of the
schemes used, so one ranking serves both graphs; embedding tables with per-row INT8), and the model's own metric is measured on real evaluation data (classifier:
top-1 on the test split; embedder: mean cosine to the FP32 embeddings on held-out texts). Layers
are ranked most harmful first. The selection then keeps the top-k layers in higher precision for
k = 0, 1, 2, ... and evaluates the REAL graph each time, stopping at the first k that meets the
budget: the fewest layers under that ranking, checked on the graph that will be served.

Scores are cached in a JSON file keyed by everything that determines them (graph bytes, scheme,
calibration ranges, evaluation data), so a rebuild with the same inputs measures nothing again.
Pure except `SensitivityCache`, which reads and writes its file.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from contracts.layout import write_text_atomically
from model_build.errors import BudgetExceededError, BuildError
from model_build.int8.quant_types import ActivationScheme, LayerKind, Precision, QuantizableLayer


@dataclass(frozen=True)
class Budget:
    """The accuracy or fidelity a variant must keep, e.g. `top1_drop_points <= 0.5`."""

    metric: str
    limit: float
    higher_is_better: bool

    def met(self, value: float) -> bool:
        return value >= self.limit if self.higher_is_better else value <= self.limit

    def describe(self) -> str:
        return f"{self.metric} {'>=' if self.higher_is_better else '<='} {self.limit:g}"

    def check(self, value: float, what: str) -> None:
        """Fail the build, naming the metric, the value and the budget."""
        if not self.met(value):
            raise BudgetExceededError(f"{what}: {self.metric} = {value:.4f} misses its budget ({self.describe()}).")

    def degradation(self, value: float) -> float:
        """How far `value` is on the wrong side of perfect (bigger = worse), for ranking."""
        return -value if self.higher_is_better else value


#: Defaults of issue 3: the classifier may lose at most half a point of top-1; the embedder's
#: INT8 vectors must keep a mean cosine of at least 0.99 to the FP32 ones.
CLASSIFIER_BUDGET = Budget("top1_drop_points", 0.5, higher_is_better=False)
EMBEDDER_BUDGET = Budget("mean_cosine", 0.99, higher_is_better=True)


@dataclass(frozen=True)
class Measurement:
    """A candidate graph measured against the FP32 reference."""

    value: float  # the budget metric
    #: A continuous output error (lower is better) that orders candidates the metric cannot tell
    #: apart (a few hundred test images often give the same top-1 for many layers).
    error: float
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LayerSensitivity:
    layer: str
    value: float
    error: float


def rank_by_sensitivity(sensitivities: Sequence[LayerSensitivity], budget: Budget) -> tuple[LayerSensitivity, ...]:
    """Most harmful first: worst budget metric, then largest output error, then name (stable)."""
    return tuple(sorted(sensitivities, key=lambda s: (-budget.degradation(s.value), -s.error, s.layer)))


@dataclass(frozen=True)
class Selection:
    """The layers kept in higher precision and what the chosen graph measured."""

    high_precision: tuple[str, ...]
    measurement: Measurement
    #: (k, budget metric) for every k tried, in order.
    trials: tuple[tuple[int, float], ...]


def choose_fewest_high_precision(
    ranked: Sequence[str],
    evaluate: Callable[[tuple[str, ...]], Measurement],
    budget: Budget,
    what: str,
) -> Selection:
    """Smallest k such that keeping `ranked[:k]` in higher precision meets the budget.

    `evaluate(high_precision_layers)` measures the real graph. If even every layer kept in higher
    precision misses (only possible when the metric itself is unreachable), the build fails.
    """
    trials = []
    for k in range(len(ranked) + 1):
        high = tuple(ranked[:k])
        measurement = evaluate(high)
        trials.append((k, measurement.value))
        if budget.met(measurement.value):
            return Selection(high, measurement, tuple(trials))
    raise BudgetExceededError(
        f"{what}: no number of layers kept in higher precision meets {budget.describe()}; "
        f"tried k = 0..{len(ranked)}, last {budget.metric} = {trials[-1][1]:.4f}."
    )


def sensitivity_key(**inputs: Any) -> str:
    """A digest of everything that determines the scores (bytes are hashed, the rest JSON-encoded)."""
    digest = hashlib.sha256()
    for name in sorted(inputs):
        value = inputs[name]
        digest.update(name.encode())
        digest.update(value if isinstance(value, bytes) else json.dumps(value, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def read_json_cache(path: Path) -> dict:
    """A cache file's JSON object, {} when there is none. One that cannot be read (a build killed
    while writing it, before the writes were atomic) is reported and started afresh: a cache only
    saves time, and a bare JSONDecodeError made every later build fail without naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        print(f"[build] {path} is not a readable cache ({exc}): starting it afresh", flush=True)
        return {}
    return data if isinstance(data, dict) else {}


class SensitivityCache:
    """{key: {layer: [value, error]}} in one JSON file beside the model."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._data: dict[str, dict[str, list[float]]] = read_json_cache(self.path)

    def get(self, key: str, layer: str) -> LayerSensitivity | None:
        hit = self._data.get(key, {}).get(layer)
        return LayerSensitivity(layer, hit[0], hit[1]) if hit else None

    def put(self, key: str, result: LayerSensitivity) -> None:
        self._data.setdefault(key, {})[result.layer] = [result.value, result.error]

    def save(self) -> None:
        write_text_atomically(self.path, json.dumps(self._data, indent=1, sort_keys=True))


def measure_sensitivities(
    layers: Sequence[QuantizableLayer],
    evaluate_single: Callable[[QuantizableLayer], Measurement],
    cache: SensitivityCache,
    key: str,
) -> tuple[list[LayerSensitivity], int]:
    """Each layer quantized on its own; returns (scores, how many were measured rather than cached)."""
    results, measured = [], 0
    from contracts.progress import progress

    for layer in progress(layers, "sensitivity"):
        hit = cache.get(key, layer.name)
        if hit is None:
            m = evaluate_single(layer)
            hit = LayerSensitivity(layer.name, m.value, m.error)
            cache.put(key, hit)
            measured += 1
        results.append(hit)
    if measured:
        cache.save()
    return results, measured


@dataclass(frozen=True)
class PlanLayer:
    """One layer of the plan: its measured sensitivity and its precision in each graph."""

    name: str
    op_type: str
    kind: LayerKind
    parameters: int
    sensitivity: LayerSensitivity
    cpu_precision: Precision
    gpu_precision: Precision

    def __post_init__(self) -> None:
        if self.cpu_precision not in (Precision.INT8, Precision.FP32):
            raise BuildError(f"layer {self.name}: CPU precision must be int8 or fp32, got {self.cpu_precision.value}.")
        if self.gpu_precision not in (Precision.INT8, Precision.FP16):
            raise BuildError(f"layer {self.name}: GPU precision must be int8 or fp16, got {self.gpu_precision.value}.")
        if self.kind is LayerKind.EMBEDDING and self.gpu_precision is Precision.INT8:
            raise BuildError(f"layer {self.name}: embedding tables stay FP16 in the TensorRT graph.")


@dataclass(frozen=True)
class PrecisionPlan:
    """Which layers run in INT8 on CPU (rest FP32) and on GPU (rest FP16), and why."""

    model: str
    budget: Budget
    cpu_scheme: ActivationScheme
    gpu_scheme: ActivationScheme
    calibration: Mapping[str, Any]
    layers: tuple[PlanLayer, ...]
    #: Step 1a of the build (variant.py): which activations had outlier channels moved into weights.
    outlier_smoothing: Mapping[str, Any] = field(default_factory=dict)
    method: str = ("one layer quantized at a time (others FP32) in a fake-quantized graph, TensorRT's symmetric scheme "
                   "for compute layers, per-row INT8 for embedding tables; scored with the model's own metric")

    def int8_layers(self, target: str) -> tuple[str, ...]:
        attr = {"cpu": "cpu_precision", "gpu": "gpu_precision"}[target]
        return tuple(l.name for l in self.layers if getattr(l, attr) is Precision.INT8)

    def high_precision_layers(self, target: str) -> tuple[str, ...]:
        attr = {"cpu": "cpu_precision", "gpu": "gpu_precision"}[target]
        return tuple(l.name for l in self.layers if getattr(l, attr) is not Precision.INT8)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "budget": {"metric": self.budget.metric, "limit": self.budget.limit, "higher_is_better": self.budget.higher_is_better},
            "sensitivity_method": self.method,
            "cpu_scheme": self.cpu_scheme.value,
            "gpu_scheme": self.gpu_scheme.value,
            "calibration": dict(self.calibration),
            "outlier_smoothing": dict(self.outlier_smoothing),
            "layers": [
                {"name": l.name, "op_type": l.op_type, "kind": l.kind.value, "parameters": l.parameters,
                 "sensitivity": {"metric_value": l.sensitivity.value, "output_error": l.sensitivity.error},
                 "precision": {"cpu": l.cpu_precision.value, "gpu": l.gpu_precision.value}}
                for l in self.layers
            ],
        }

    def write(self, path: Path) -> Path:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))
        return Path(path)


def plan_from_selection(
    model: str,
    budget: Budget,
    layers: Sequence[QuantizableLayer],
    scores: Mapping[str, LayerSensitivity],
    cpu_high: Sequence[str],
    gpu_high: Sequence[str],
    cpu_scheme: ActivationScheme,
    calibration: Mapping[str, Any],
    outlier_smoothing: Mapping[str, Any] | None = None,
) -> PrecisionPlan:
    plan_layers = tuple(
        PlanLayer(
            l.name, l.op_type, l.kind, l.parameters, scores[l.name],
            Precision.FP32 if l.name in cpu_high else Precision.INT8,
            Precision.FP16 if (l.name in gpu_high or l.kind is LayerKind.EMBEDDING) else Precision.INT8,
        )
        for l in layers
    )
    return PrecisionPlan(model, budget, cpu_scheme, ActivationScheme.STATIC_INT8_SYMMETRIC, dict(calibration), plan_layers,
                         dict(outlier_smoothing or {}))
