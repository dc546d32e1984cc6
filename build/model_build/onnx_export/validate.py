"""Every variant against the FP32 reference, on real inputs, with a replayable record.

Polygraphy runs both graphs in ONNX Runtime (`Comparator.run`) and compares every output element
(`SimpleCompareFunc`, a loose tolerance: INT8 is not meant to match element for element; the
result is recorded, not enforced). What decides is the model's own metric on the same outputs
(classifier top-1 drop; embedder mean cosine), checked against the budget: a miss raises
`BudgetExceededError` naming the metric, the value and the budget.

The inputs and the FP32 outputs are saved in Polygraphy's JSON format beside the model, so on a
GPU host the same check runs against a TensorRT engine with
`polygraphy run <engine> --trt --load-inputs ... --load-outputs ...` (the command is in the record).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from model_build.errors import BuildError
from model_build.int8.quantize import cpu_session
from model_build.int8.sensitivity import Budget, Measurement

REFERENCE_INPUTS = "reference_inputs.json"
REFERENCE_OUTPUTS = "reference_outputs_fp32.json"


def classifier_measurement(probabilities: np.ndarray, reference: np.ndarray, labels: np.ndarray) -> Measurement:
    """Top-1 drop in points against the FP32 graph's top-1 on the same images (labels: test split)."""
    accuracy = float((probabilities.argmax(-1) == labels).mean())
    reference_accuracy = float((reference.argmax(-1) == labels).mean())
    return Measurement(
        value=round((reference_accuracy - accuracy) * 100.0, 6),
        error=float(np.abs(probabilities.astype(np.float64) - reference).mean()),
        extra={"top1_accuracy": accuracy, "fp32_top1_accuracy": reference_accuracy,
               "top1_agreement_with_fp32": float((probabilities.argmax(-1) == reference.argmax(-1)).mean())},
    )


def top_k_agreement(candidate: np.ndarray, reference: np.ndarray, k: int = 10) -> float:
    """Mean overlap of each text's k nearest neighbours (cosine, itself excluded) under both models."""
    if len(reference) <= k:
        raise BuildError(f"top-{k} retrieval agreement needs more than {k} texts, got {len(reference)}.")

    def neighbours(vectors):
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        sims = unit @ unit.T
        np.fill_diagonal(sims, -np.inf)
        return np.argpartition(-sims, k, axis=1)[:, :k]

    a, b = neighbours(candidate.astype(np.float64)), neighbours(reference.astype(np.float64))
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)]))


def embedder_measurement(embeddings: np.ndarray, reference: np.ndarray, k: int = 10) -> Measurement:
    a, b = embeddings.astype(np.float64), reference.astype(np.float64)
    cosine = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return Measurement(
        value=float(cosine.mean()), error=float(1.0 - cosine.mean()),
        extra={"min_cosine": float(cosine.min()), f"top{k}_retrieval_agreement": top_k_agreement(a, b, k)},
    )


@dataclass(frozen=True)
class ValidationResult:
    variant: str
    budget: str
    measurement: Measurement
    passed: bool
    polygraphy: Mapping[str, object]

    def to_dict(self) -> dict:
        return {"variant": self.variant, "budget": self.budget, "metric_value": self.measurement.value,
                "output_error": self.measurement.error, **{k: v for k, v in self.measurement.extra.items()},
                "passed": self.passed, "polygraphy": dict(self.polygraphy)}


def compare_variants_with_polygraphy(
    fp32_path: Path,
    candidates: Mapping[str, object],
    batches: Sequence[Mapping[str, np.ndarray]],
    out_dir: Path,
    atol: float,
    save_reference: bool = True,
) -> dict[str, tuple[list[np.ndarray], list[np.ndarray], dict]]:
    """Run FP32 and every candidate over `batches` with Polygraphy's ONNX Runtime runners in ONE
    Comparator run: the FP32 runner runs the batches once and every candidate is compared with
    those outputs, each pair on its own. Why: the FP32 pass is the same for every variant; run per
    variant it cost the text encoder two extra FP32 passes over its evaluation texts. Saves the
    inputs and the FP32 outputs for replay. Returns {name: (candidate first outputs per batch,
    FP32 first outputs per batch, summary)}."""
    from polygraphy.backend.onnxrt import OnnxrtRunner
    from polygraphy.comparator import Comparator, RunResults, SimpleCompareFunc
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR
    if "fp32" in candidates:
        raise BuildError("a candidate may not be named 'fp32' (the reference runner's name).")
    out_dir.mkdir(parents=True, exist_ok=True)
    runners = [OnnxrtRunner(cpu_session(Path(fp32_path)), name="fp32"),
               *(OnnxrtRunner(cpu_session(candidate), name=name) for name, candidate in candidates.items())]
    inputs_path, reference_path = out_dir / REFERENCE_INPUTS, out_dir / REFERENCE_OUTPUTS
    results = Comparator.run(runners, data_loader=[dict(b) for b in batches],
                             save_inputs_path=str(inputs_path) if save_reference else None)
    if save_reference:
        RunResults([("fp32", results["fp32"])]).save(str(reference_path))
    first = lambda runner: [np.asarray(list(it.values())[0]) for it in results[runner]]  # noqa: E731
    ref = first("fp32")
    compared = {}
    for name in candidates:
        accuracy = Comparator.compare_accuracy(RunResults([("fp32", results["fp32"]), (name, results[name])]),
                                               compare_func=SimpleCompareFunc(atol=atol, rtol=0.0, check_error_stat="median"))
        cand = first(name)
        summary = _polygraphy_summary(cand, ref, len(batches), atol, bool(accuracy), inputs_path, reference_path)
        compared[name] = (cand, ref, {**summary, "runners_in_run": len(runners)})
    return compared


def _polygraphy_summary(cand, ref, iterations: int, atol: float, passed: bool, inputs_path: Path, reference_path: Path) -> dict:
    diffs = np.concatenate([np.abs(c.astype(np.float64) - r).ravel() for c, r in zip(cand, ref)])
    return {
        "tool": "polygraphy Comparator (OnnxrtRunner fp32 vs this variant; one run, FP32 executed once for all variants)",
        "iterations": iterations,
        "median_abs_error_atol": atol, "passed_elementwise": passed,
        "max_abs_error": float(diffs.max()), "mean_abs_error": float(diffs.mean()),
        "reference_inputs": inputs_path.name, "reference_outputs": reference_path.name,
        # The GPU replay command, with the engine's path and inputs cut to its profile, is in the
        # build report's TensorRT section (model_build.engines.tensorrt.replay_command).
        "replay_on_gpu": "see the build report's TensorRT engines section (replay against FP32)",
    }


def validate_variants(
    model: str,
    fp32_path: Path,
    candidates: Mapping[str, object],
    batches: Sequence[Mapping[str, np.ndarray]],
    measure: Callable[[np.ndarray, np.ndarray], Measurement],
    budget: Budget,
    out_dir: Path,
    atol: float,
    save_reference: bool = True,
) -> dict[str, ValidationResult]:
    """Compare every variant with one FP32 run (`compare_variants_with_polygraphy`), measure each,
    and fail the build if one misses its budget (each is checked on its own)."""
    compared = compare_variants_with_polygraphy(fp32_path, candidates, batches, out_dir, atol, save_reference)
    results = {}
    for variant, (cand, ref, summary) in compared.items():
        measurement = measure(np.concatenate(cand), np.concatenate(ref))
        budget.check(measurement.value, f"{model} {variant}")
        results[variant] = ValidationResult(variant, budget.describe(), measurement, True, summary)
    return results
