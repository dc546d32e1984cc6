"""Build the `int8_mixed` variant of any ONNX model: calibrate, measure, plan, derive, validate.

A recipe supplies the model-specific parts in `Int8Inputs` (training-only calibration batches,
evaluation batches, the metric and its budget); everything else is generic:

1. move outlier activation channels into the weights (`smoothing.py`; power-of-two scales, so the
   FP32 products are the same), then
   calibrate once (ONNX Runtime's calibrator, method from the settings) on the calibration set;
2. choose the CPU scheme by timing each candidate with every layer in INT8 (or take the setting);
3. measure each layer's sensitivity (that layer alone in INT8, fake-quantized) under the CPU scheme
   and under TensorRT's scheme; cached on disk;
4. keep the fewest most-sensitive layers in higher precision so the REAL graph meets the budget,
   separately for the CPU graph (INT8 + FP32) and the GPU graph (INT8 + FP16);
5. write the precision plan and both graphs (plus the all-FP16 GPU graph), validate each against
   FP32 with Polygraphy in one comparison run (FP32 runs once; each variant is compared and checked
   on its own; a budget miss fails the build), and time FP32 vs INT8 at batch 1 and 32.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from model_build.int8.calibration import CalibrationSet, Sampling
from model_build.errors import BuildError
from model_build.reports.latency import median_latencies
from model_build.int8.quant_types import ActivationScheme, CalibrationMethod, LayerKind, find_quantizable_layers
from model_build.int8.quantize import choose_cpu_scheme, compute_activation_ranges, cpu_graph, cpu_session, fp16_graph, gpu_graph, simulated_graph
from model_build.int8.smoothing import DEFAULT_OUTLIER_THRESHOLD, smoothed_source
from contracts.layout import write_text_atomically
from model_build.int8.sensitivity import (
    Budget, Measurement, SensitivityCache, choose_fewest_high_precision, measure_sensitivities,
    plan_from_selection, rank_by_sensitivity, read_json_cache, sensitivity_key,
)
from model_build.onnx_export.validate import validate_variants
from model_build.sources import code_digest

INT8_CPU_ONNX = "int8_mixed.onnx"
INT8_GPU_ONNX = "int8_mixed_gpu.onnx"
FP16_GPU_ONNX = "fp16_gpu.onnx"
PRECISION_PLAN = "precision_plan.json"
RANGES_CACHE = "calibration_ranges.json"
SENSITIVITY_CACHE = "sensitivity_cache.json"
CPU_SCHEME_CACHE = "cpu_scheme_choice.json"
#: The FP32 graph every INT8 graph is derived from when outlier channels were moved into weights.
SMOOTHED_FP32_ONNX = "fp32_smoothed.onnx"
#: Largest |smoothed FP32 - FP32| output difference accepted (float rounding of x / s and s W).
SMOOTHING_FP32_ATOL = 1e-3
VALIDATION_DIR = "validation"


@dataclass(frozen=True)
class Int8Settings:
    """INT8 options a model may set in serving.toml's `options` (all optional)."""

    calibration_method: CalibrationMethod = CalibrationMethod.MINMAX
    calibration_sampling: Sampling = Sampling.STRATIFIED
    calibration_size: int = 256
    calibration_seed: int = 0
    #: "auto" times the candidates on this machine; or one of ActivationScheme's CPU values.
    cpu_scheme: str = "auto"
    #: Activation channels above this multiple of the median channel move into the weights
    #: (`smoothing.py`); 0 turns the rewrite off.
    outlier_threshold: float = DEFAULT_OUTLIER_THRESHOLD

    def __post_init__(self) -> None:
        for name, enum in (("calibration_method", CalibrationMethod), ("calibration_sampling", Sampling)):
            value = getattr(self, name)
            if not isinstance(value, enum):
                try:
                    object.__setattr__(self, name, enum(value))
                except ValueError:
                    raise BuildError(f"`options.{name}` = {value!r}: allowed {[e.value for e in enum]}.") from None
        allowed = ["auto", ActivationScheme.DYNAMIC_UINT8.value, ActivationScheme.STATIC_UINT8.value]
        if self.cpu_scheme not in allowed:
            raise BuildError(f"`options.cpu_scheme` = {self.cpu_scheme!r}: allowed {allowed}.")
        if not isinstance(self.outlier_threshold, (int, float)) or not (self.outlier_threshold == 0 or self.outlier_threshold > 1):
            raise BuildError(f"`options.outlier_threshold` = {self.outlier_threshold!r}: 0 (off) or a number > 1 "
                             "(a multiple of the median channel's max |x|).")
        for name in ("calibration_size", "calibration_seed"):
            value, least = getattr(self, name), 1 if name == "calibration_size" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise BuildError(f"`options.{name}` = {value!r}: expected an integer >= {least}.")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "Int8Settings":
        return cls(**{k: v for k, v in options.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Int8Inputs:
    """What a recipe hands over; batches are lists of feed dicts."""

    model: str
    workdir: Path
    fp32_path: Path
    calibration: CalibrationSet
    calibration_batches: Sequence[Mapping[str, np.ndarray]]  # training data only
    eval_batches: Sequence[Mapping[str, np.ndarray]]  # test / held-out data
    measure: Callable[[np.ndarray, np.ndarray], Measurement]  # (candidate outputs, FP32 outputs)
    budget: Budget
    latency_feeds: Mapping[int, Mapping[str, np.ndarray]]  # batch size -> feeds
    #: Polygraphy's element-wise tolerance (median abs error), recorded not enforced.
    atol: float
    #: A smaller evaluation set for the per-layer search (default: eval_batches).
    sensitivity_batches: Sequence[Mapping[str, np.ndarray]] | None = None
    #: Rows the selection never saw, for the final validation (a budget miss fails the build): the layers
    #: kept are chosen as the fewest that meet the budget on eval_batches, so a validation on those same
    #: rows reports an optimistic figure. None: eval_batches (the report says so).
    validation_batches: Sequence[Mapping[str, np.ndarray]] | None = None
    latency_repeats: int = 5
    fp32_extra: Mapping[str, Any] = field(default_factory=dict)


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _digest_batches(batches) -> str:
    digest = hashlib.sha256()
    for batch in batches:
        for name in sorted(batch):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(batch[name]).tobytes())
    return digest.hexdigest()


def _outputs(session, batches) -> np.ndarray:
    return np.concatenate([session.run(None, dict(b))[0] for b in batches])


def _cpu_scheme_by_measurement(inputs: Int8Inputs, settings: Int8Settings, source_path: Path, layers, model_digest: str,
                               measure_session, first_trials: dict | None = None):
    """`choose_cpu_scheme` (speed and fidelity of each candidate with every layer INT8), remembered
    per (graph, CPU model, ONNX Runtime version, calibration) in the workdir. When it measures,
    `first_trials` receives {(scheme, frozenset of INT8 layer names): (graph, Measurement)} for the
    chosen scheme: the selection's first trial (every layer INT8) is that same graph on the same
    evaluation batches, so it is not quantized and run a second time."""
    import json

    from contracts.devices import read_cpu_info

    cpu = read_cpu_info().model
    # everything the choice depends on: the calibration (its settings), the data and budget it is
    # judged on, and the code that quantizes and measures (a change to any forces a new measurement)
    key = sensitivity_key(model=model_digest, cpu=cpu, ort=_ort_version(), settings=dataclasses.asdict(settings),
                          data=_digest_batches(inputs.eval_batches), budget=repr(inputs.budget), code=code_digest(__name__))
    path = Path(inputs.workdir) / CPU_SCHEME_CACHE
    cached = read_json_cache(path)
    if "batch_invariance_error" not in cached.get(key, {}):
        measured: dict[int, Measurement] = {}

        def metric_of(session) -> float:
            measured[id(session)] = measure_session(session)
            return measured[id(session)].value

        built: dict = {}
        scheme, seconds, metric, invariance = choose_cpu_scheme(
            source_path, layers, settings.calibration_method, Path(inputs.workdir) / RANGES_CACHE,
            inputs.latency_feeds[max(inputs.latency_feeds)], metric_of, inputs.budget, built=built)
        cached[key] = {"scheme": scheme.value, "seconds": seconds, "metric": metric, "batch_invariance_error": invariance, "cpu": cpu}
        write_text_atomically(path, json.dumps(cached, indent=1))
        if first_trials is not None:
            graph, session = built[scheme]
            first_trials[(scheme, frozenset(l.name for l in layers))] = (graph, measured[id(session)])
    entry = cached[key]
    return ActivationScheme(entry["scheme"]), {"seconds_b32_all_int8": entry["seconds"], "metric_all_int8": entry["metric"],
                                               "batch_invariance_error": entry["batch_invariance_error"]}


@dataclass(frozen=True)
class Int8Result:
    variants: dict[str, dict[str, Any]]
    #: FP32 latency measured in the same run as the INT8 one (ratios are only fair within a run).
    fp32_latency_ms: dict[str, float]
    files: list[str]
    report_section: str


@dataclass
class _Int8Run:
    """What the steps of one `build_int8_mixed` share (the FP32 model, its reference outputs, ...)."""

    inputs: Int8Inputs
    settings: Int8Settings
    #: The graph the INT8 graphs are derived from: FP32 with outlier channels smoothed (or the FP32 file).
    source_model: Any
    source_path: Path
    smoothing: tuple
    layers: list
    ranges: Mapping[str, Any]
    fp32_session: Any
    reference: np.ndarray
    sens_batches: list
    sens_reference: np.ndarray
    model_digest: str
    #: CPU graphs already built and measured on the evaluation batches, by (scheme, INT8 layer names).
    cpu_trials: dict = field(default_factory=dict)

    @property
    def workdir(self) -> Path:
        return Path(self.inputs.workdir)

    def evaluate(self, model, batches, ref, optimize=True) -> Measurement:
        return self.inputs.measure(_outputs(cpu_session(model, optimize=optimize), batches), ref)


def _smooth_outliers(inputs: Int8Inputs, settings: Int8Settings, fp32_model, layers, fp32_outputs: Sequence[Sequence[np.ndarray]]):
    """Step 1a: (source model, its path, smoothings). Outlier channels measured on the calibration
    batches only; every output of the smoothed graph is checked against FP32's on the evaluation
    batches (`fp32_outputs`: per batch, every output of the FP32 graph)."""
    import onnx

    fp32_path, workdir = Path(inputs.fp32_path), Path(inputs.workdir)
    (workdir / SMOOTHED_FP32_ONNX).unlink(missing_ok=True)
    smoothed, smoothings = smoothed_source(fp32_model, layers, inputs.calibration_batches, settings.outlier_threshold)
    if not smoothings:
        return fp32_model, fp32_path, ()
    onnx.save(smoothed, str(workdir / SMOOTHED_FP32_ONNX))
    session = cpu_session(workdir / SMOOTHED_FP32_ONNX)
    drift = max(float(np.abs(np.asarray(got) - np.asarray(want)).max())
                for batch, original in zip(inputs.eval_batches, fp32_outputs)
                for got, want in zip(session.run(None, dict(batch)), original))
    if drift > SMOOTHING_FP32_ATOL:
        raise BuildError(f"{inputs.model}: the outlier-smoothed FP32 graph's outputs differ from FP32's by {drift:.3g} (allowed "
                         f"{SMOOTHING_FP32_ATOL}; powers-of-two scales should leave only summation-order rounding). Build it "
                         "without the rewrite: `outlier_threshold = 0` in its INT8 settings (model_build.int8.variant.Int8Settings).")
    return smoothed, workdir / SMOOTHED_FP32_ONNX, smoothings


def _prepare_run(inputs: Int8Inputs, settings: Int8Settings) -> _Int8Run:
    """Step 1 and the references: layers found, outliers smoothed, ranges calibrated, FP32 outputs
    computed once (from the FP32 file itself: every variant is judged against the original)."""
    import onnx

    fp32_path = Path(inputs.fp32_path)
    if not inputs.calibration_batches:
        raise BuildError("calibration needs at least one batch of training data.")
    original = onnx.load(str(fp32_path))
    original_layers = find_quantizable_layers(original)
    if not original_layers:
        raise BuildError(f"{inputs.model}: the graph has no quantizable layer (Conv/Gemm/MatMul with weights).")
    fp32_session = cpu_session(fp32_path)
    fp32_outputs = [fp32_session.run(None, dict(b)) for b in inputs.eval_batches]  # every output: the smoothing check needs them all
    reference = np.concatenate([outputs[0] for outputs in fp32_outputs])
    source_model, source_path, smoothings = _smooth_outliers(inputs, settings, original, original_layers, fp32_outputs)
    layers = find_quantizable_layers(source_model)
    ranges = compute_activation_ranges(source_path, layers, inputs.calibration_batches, settings.calibration_method,
                                       Path(inputs.workdir) / RANGES_CACHE)
    sens_batches = list(inputs.sensitivity_batches or inputs.eval_batches)
    return _Int8Run(inputs, settings, source_model, source_path, smoothings, layers, ranges, fp32_session, reference,
                    sens_batches, _outputs(fp32_session, sens_batches), hashlib.sha256(source_model.SerializeToString()).hexdigest())


def _choose_scheme(run: _Int8Run) -> tuple[ActivationScheme, dict[str, Any]]:
    """Step 2: the CPU activation scheme, measured ("auto") or as configured."""
    if run.settings.cpu_scheme != "auto":
        return ActivationScheme(run.settings.cpu_scheme), {}
    return _cpu_scheme_by_measurement(run.inputs, run.settings, run.source_path, run.layers, run.model_digest,
                                      lambda session: run.inputs.measure(_outputs(session, run.inputs.eval_batches), run.reference),
                                      run.cpu_trials)


def _layer_sensitivities(run: _Int8Run):
    """Step 3: each layer alone in INT8 (fake-quantized, symmetric), cached on disk; (results, measured, seconds)."""
    cache = SensitivityCache(run.workdir / SENSITIVITY_CACHE)
    key = sensitivity_key(model=run.model_digest, ranges=run.ranges, data=_digest_batches(run.sens_batches),
                          metric=run.inputs.budget.metric, scheme=ActivationScheme.STATIC_INT8_SYMMETRIC.value,
                          ort=_ort_version(), code=code_digest(__name__))
    started = time.perf_counter()
    results, measured = measure_sensitivities(
        run.layers, lambda l: run.evaluate(simulated_graph(run.source_model, [l], ActivationScheme.STATIC_INT8_SYMMETRIC, run.ranges),
                                           run.sens_batches, run.sens_reference, optimize=False),
        cache, key)
    return results, measured, time.perf_counter() - started


def _select_high_precision(run: _Int8Run, results, cpu_scheme: ActivationScheme):
    """Step 4: the fewest most-sensitive layers kept out of INT8 so each REAL graph meets the budget;
    returns (cpu selection, gpu selection, {"cpu": graph, "gpu": graph})."""
    by_name = {l.name: l for l in run.layers}
    what = f"{run.inputs.model} int8_mixed"
    ranked_cpu = [s.layer for s in rank_by_sensitivity(results, run.inputs.budget)]
    ranked_gpu = [n for n in ranked_cpu if by_name[n].kind is LayerKind.COMPUTE]
    graphs: dict[str, Any] = {}

    def eval_cpu(high):
        int8 = [by_name[n] for n in ranked_cpu if n not in high]
        known = run.cpu_trials.get((cpu_scheme, frozenset(l.name for l in int8)))
        if known is not None:  # built and measured by the scheme choice (same graph, batches, reference)
            graphs["cpu"] = known[0]
            return known[1]
        graphs["cpu"] = cpu_graph(run.source_path, int8, cpu_scheme, run.settings.calibration_method, run.workdir / RANGES_CACHE)
        return run.evaluate(graphs["cpu"], run.inputs.eval_batches, run.reference)

    def eval_gpu(high):
        graphs["gpu"] = gpu_graph(run.source_model, [by_name[n] for n in ranked_gpu if n not in high], run.ranges)
        return run.evaluate(graphs["gpu"], run.inputs.eval_batches, run.reference)

    cpu_sel = choose_fewest_high_precision(ranked_cpu, eval_cpu, run.inputs.budget, f"{what} (CPU graph)")
    gpu_sel = choose_fewest_high_precision(ranked_gpu, eval_gpu, run.inputs.budget, f"{what} (GPU graph)")
    return cpu_sel, gpu_sel, graphs


def _write_and_validate(run: _Int8Run, graphs: Mapping[str, Any]) -> dict[str, Any]:
    """Step 5a: the three graphs on disk, each validated against FP32 (Polygraphy; a budget miss fails)."""
    import onnx

    workdir, inputs, fp32_path = run.workdir, run.inputs, Path(run.inputs.fp32_path)
    onnx.save(graphs["cpu"], str(workdir / INT8_CPU_ONNX))
    onnx.save(graphs["gpu"], str(workdir / INT8_GPU_ONNX))
    onnx.save(fp16_graph(onnx.load(str(fp32_path))), str(workdir / FP16_GPU_ONNX))  # no INT8 layer: the original graph
    vdir = workdir / VALIDATION_DIR
    files = {"int8_mixed": INT8_CPU_ONNX, "int8_mixed_gpu_graph": INT8_GPU_ONNX, "fp16_gpu_graph": FP16_GPU_ONNX}
    batches = inputs.eval_batches if inputs.validation_batches is None else inputs.validation_batches
    return validate_variants(inputs.model, fp32_path, {name: workdir / file for name, file in files.items()}, batches,
                             inputs.measure, inputs.budget, vdir, inputs.atol)


def _variant_records(run: _Int8Run, checks, plan, cpu_sel, gpu_sel, cpu_scheme, scheme_timings, latency) -> dict[str, dict[str, Any]]:
    """Step 5b: the build record of each variant (file, size, metric, validation, plan facts)."""
    calibration = {"method": run.settings.calibration_method.value, **run.inputs.calibration.describe()}
    files = {"int8_mixed": INT8_CPU_ONNX, "int8_mixed_gpu_graph": INT8_GPU_ONNX, "fp16_gpu_graph": FP16_GPU_ONNX}
    gpu_runtime = "TensorRT (validated here in ONNX Runtime CPU, FP16 emulated)"
    variants: dict[str, dict[str, Any]] = {}
    for name, check in checks.items():
        record = {"file": files[name], "size_bytes": (run.workdir / files[name]).stat().st_size, "metric": run.inputs.budget.metric,
                  "value": check.measurement.value,
                  "validation": {**check.to_dict(), "unseen_by_selection": run.inputs.validation_batches is not None}}
        if name == "int8_mixed":
            record.update({
                "runtime": "onnxruntime CPU", "cpu_scheme": cpu_scheme.value, "cpu_scheme_choice": scheme_timings,
                "latency_ms": {f"batch_{b}": round(t["int8_mixed"] * 1e3, 3) for b, t in latency.items()},
                "fp32_latency_ms_same_run": {f"batch_{b}": round(t["fp32"] * 1e3, 3) for b, t in latency.items()},
                "high_precision_layers": list(cpu_sel.high_precision), "int8_layers": len(plan.int8_layers("cpu")),
                "selection_trials": [list(t) for t in cpu_sel.trials], "calibration": calibration,
            })
        elif name == "int8_mixed_gpu_graph":
            record.update({"runtime": gpu_runtime, "high_precision_layers": list(gpu_sel.high_precision),
                           "int8_layers": len(plan.int8_layers("gpu")), "selection_trials": [list(t) for t in gpu_sel.trials],
                           "calibration": calibration})
        else:
            record["runtime"] = gpu_runtime
        variants[name] = record
    return variants


def build_int8_mixed(inputs: Int8Inputs, settings: Int8Settings) -> Int8Result:
    """Steps 1-5 of the module docstring; every step is one function above."""
    started = time.perf_counter()
    run = _prepare_run(inputs, settings)
    cpu_scheme, scheme_timings = _choose_scheme(run)
    results, measured, sens_seconds = _layer_sensitivities(run)
    cpu_sel, gpu_sel, graphs = _select_high_precision(run, results, cpu_scheme)
    plan = plan_from_selection(inputs.model, inputs.budget, run.layers, {r.layer: r for r in results}, cpu_sel.high_precision,
                               gpu_sel.high_precision, cpu_scheme, {"method": settings.calibration_method.value, **inputs.calibration.describe()},
                               outlier_smoothing=_smoothing_record(run))
    plan.write(run.workdir / PRECISION_PLAN)
    checks = _write_and_validate(run, graphs)
    int8_session = cpu_session(run.workdir / INT8_CPU_ONNX)
    latency = {b: median_latencies({"fp32": run.fp32_session, "int8_mixed": int8_session}, feeds, inputs.latency_repeats)
               for b, feeds in sorted(inputs.latency_feeds.items())}
    variants = _variant_records(run, checks, plan, cpu_sel, gpu_sel, cpu_scheme, scheme_timings, latency)
    fp32_latency = {f"batch_{b}": round(t["fp32"] * 1e3, 3) for b, t in latency.items()}
    summary = {"layers": len(run.layers), "sensitivity_measured": measured, "sensitivity_cached": len(run.layers) - measured,
               "sensitivity_seconds": round(sens_seconds, 1), "int8_build_seconds": round(time.perf_counter() - started, 1)}
    variants["int8_mixed"]["sensitivity"] = summary
    smoothed_file = [SMOOTHED_FP32_ONNX] if run.smoothing else []  # the graph the ranges and INT8 graphs belong to
    return Int8Result(variants, fp32_latency, [INT8_CPU_ONNX, INT8_GPU_ONNX, FP16_GPU_ONNX, PRECISION_PLAN, RANGES_CACHE, *smoothed_file,
                                               f"{VALIDATION_DIR}/reference_inputs.json", f"{VALIDATION_DIR}/reference_outputs_fp32.json"],
                      render_int8_section(inputs.model, plan, variants, summary))


def _smoothing_record(run: _Int8Run) -> dict[str, Any]:
    """The plan's record of step 1a: the threshold and what each smoothed activation got."""
    return {"threshold": run.settings.outlier_threshold, "source_graph": run.source_path.name,
            "activations": [s.describe() for s in run.smoothing]}


def render_int8_section(model: str, plan, variants: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    cpu, gpu = variants["int8_mixed"], variants["int8_mixed_gpu_graph"]
    ranked = sorted(plan.layers, key=lambda l: (plan.budget.degradation(l.sensitivity.value), l.sensitivity.error), reverse=True)[:5]
    lines = [
        f"## {model}: int8_mixed precision plan",
        "",
        f"Budget {plan.budget.describe()}. Sensitivity: {plan.method}; {summary['layers']} quantizable layers, "
        f"{summary['sensitivity_measured']} scores measured this build ({summary['sensitivity_seconds']} s), the rest from the cache.",
        f"CPU graph: scheme `{plan.cpu_scheme.value}` (every candidate built with all layers INT8: ms at the largest "
        f"latency batch { {k: round(v * 1e3, 2) for k, v in cpu['cpu_scheme_choice'].get('seconds_b32_all_int8', {}).items()} }, "
        f"{plan.budget.metric} { {k: round(v, 4) for k, v in cpu['cpu_scheme_choice'].get('metric_all_int8', {}).items()} }, "
        f"max output change when re-batched { {k: float(f'{v:.2g}') for k, v in cpu['cpu_scheme_choice'].get('batch_invariance_error', {}).items()} }; "
        "the fastest batch-invariant scheme within budget wins), "
        f"kept in FP32: {cpu['high_precision_layers'] or 'none'}; {plan.budget.metric} = {cpu['value']:.4f}.",
        f"GPU graph (TensorRT scheme, rest FP16): kept in FP16: {gpu['high_precision_layers'] or 'none'}; "
        f"{plan.budget.metric} = {gpu['value']:.4f}.",
        f"Calibration: {cpu['calibration']}.",
        _smoothing_line(plan.outlier_smoothing),
        _validation_line(variants),
        "",
        "| most sensitive layers (alone in INT8) | metric | output error |",
        "|---|---:|---:|",
    ]
    lines += [f"| {l.name} | {l.sensitivity.value:.4f} | {l.sensitivity.error:.3g} |" for l in ranked]
    return "\n".join(lines)


def _smoothing_line(record: Mapping[str, Any]) -> str:
    activations = record.get("activations", [])
    if not record.get("threshold"):
        return "Outlier channels moved into weights: off (`outlier_threshold = 0`)."
    if not activations:
        return f"Outlier channels moved into weights: none found (threshold {record['threshold']} x the median channel)."
    return (f"Outlier channels moved into weights before calibration (threshold {record['threshold']} x the median channel; "
            f"powers-of-two scales, the same FP32 products, `{record['source_graph']}`): "
            + "; ".join(f"{a['layers'][0]} ({a['outlier_channels']} of {a['channels']} channels, max scale {a['max_scale']})"
                        for a in activations) + ".")


def _validation_line(variants: Mapping[str, Any]) -> str:
    """What the final check ran: every written graph against FP32 on the evaluation batches."""
    checks = {name: v["validation"] for name, v in variants.items() if v.get("validation")}
    if not checks:
        return "Validation: none recorded."
    first = next(iter(checks.values()))
    parts = ", ".join(f"{name} {c['metric_value']:.4f} (elementwise {'pass' if c['polygraphy']['passed_elementwise'] else 'fail'})"
                      for name, c in checks.items())
    rows = ("batches of held-out rows the layer selection never saw" if first.get("unseen_by_selection")
            else "evaluation batches, the rows the layer selection chose on: an optimistic figure")
    return (f"Validation against FP32 (Polygraphy, ONNX Runtime CPU, {first['polygraphy']['iterations']} {rows}; "
            f"FP32 run once, each variant compared with it on its own; budget {first['budget']}): {parts}.")
