"""`python -m model_build benchmark`: FP32 vs INT8-mixed on this CPU, and the calibration study.

Benchmark (per built model with an int8_mixed variant): ONNX Runtime latency at batch 32 with 2
intra-op threads, FP32 and INT8 sessions interleaved in ONE run (median of `--repeats`), the size
reduction, and the budget metric the build validated. Targets, recorded and never asserted:
INT8-mixed >= 2x faster, >= 70% smaller, within budget.

Calibration study: for sampling in (stratified, random) x sizes (16, 64, 256 by default) x seeds
0..4, calibrate on that many TRAINING rows, quantize every compute layer with TensorRT's scheme
(fake-quantized, so it measures calibration alone, not the plan's FP32 layers), and measure the
budget metric on the evaluation set; mean and std per (sampling, size). It takes minutes for the
embedder, so it runs here and not in every build; `make build-engines` includes its last result
in the build report (reports/build/calibration_study.md).

Writes reports/build/benchmark.{md,json} and reports/build/calibration_study.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from model_build.pipeline import BuildPaths
from contracts.build_record import BuildRecordError, read_build_record

TARGET_SPEEDUP = 2.0
TARGET_SIZE_REDUCTION = 0.70
STUDY_SIZES = (16, 64, 256)
STUDY_SEEDS = 5
#: Held-out texts for the embedder's study (a subset of the build's evaluation set, for time).
STUDY_EVAL_BATCHES = 4


def add_benchmark_parser(sub, project_root: Path) -> None:
    bench = sub.add_parser("benchmark", help="FP32 vs INT8-mixed latency/size/budget; stratified vs random calibration")
    bench.add_argument("--config", default=str(project_root / "model_repository" / "serving.toml"))
    bench.add_argument("--repeats", type=int, default=7, help="interleaved timing repeats per variant (median kept)")
    bench.add_argument("--threads", type=int, default=2)
    bench.add_argument("--batch", type=int, default=32)
    bench.add_argument("--study-sizes", type=int, nargs="*", default=list(STUDY_SIZES))
    bench.add_argument("--study-seeds", type=int, default=STUDY_SEEDS)
    bench.add_argument("--study-method", default="minmax", choices=["minmax", "entropy", "percentile"])
    bench.add_argument("--skip-study", action="store_true", help="only the latency/size benchmark")
    bench.set_defaults(func=lambda args: cmd_benchmark(args, project_root))


def _machine() -> str:
    from contracts.devices import read_cpu_info

    return f"{platform.node()} {platform.machine()} {read_cpu_info().describe()}"


def _int8_inputs_factory(recipe: str) -> Callable:
    """The recipe's builder of Int8Inputs (calibration rows from training data, evaluation data)."""
    if recipe == "digit_cnn":
        from model_build.recipes.digits import digits_int8_inputs

        return digits_int8_inputs
    if recipe == "minilm_encoder":
        from model_build.recipes.text_int8 import text_int8_inputs

        return text_int8_inputs
    raise KeyError(recipe)


UNSERVED_INT8_DIR = "int8_mixed_benchmark"


def build_unserved_int8(model, record: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    """serving.toml serves FP32 for this model: build its int8_mixed variant beside the model (in
    `int8_mixed_benchmark/`, never installed) so the benchmark still compares both."""
    import dataclasses
    import shutil

    from model_build.int8.variant import Int8Settings, build_int8_mixed

    target = workdir / UNSERVED_INT8_DIR
    target.mkdir(parents=True, exist_ok=True)
    fp32 = record["variants"]["fp32"]
    shutil.copy2(workdir / fp32["file"], target / fp32["file"])
    settings = Int8Settings.from_options(model.options)
    inputs = _int8_inputs_factory(model.recipe)(model, workdir, target / fp32["file"], settings)
    result = build_int8_mixed(dataclasses.replace(inputs, workdir=target), settings)
    print(f"[benchmark] {model.name}: serving.toml serves {model.variant.value}; built int8_mixed in {target} for the comparison")
    return {**record, "variants": {**record["variants"], **result.variants}, "int8_built_by_benchmark": True}


def benchmark_model(model, record: Mapping[str, Any], workdir: Path, repeats: int, threads: int, batch: int) -> dict[str, Any]:
    from model_build.int8.variant import Int8Settings
    from model_build.reports.latency import batch_of, median_latencies
    from model_build.int8.quantize import cpu_session

    fp32, int8 = record["variants"]["fp32"], record["variants"]["int8_mixed"]
    source = workdir.parent if workdir.name == UNSERVED_INT8_DIR else workdir  # tokenizer, corpus, test split
    inputs = _int8_inputs_factory(model.recipe)(model, source, workdir / fp32["file"], Int8Settings())
    feeds = inputs.latency_feeds.get(batch) or batch_of(inputs.latency_feeds[max(inputs.latency_feeds)], batch)
    sessions = {"fp32": cpu_session(workdir / fp32["file"], threads), "int8_mixed": cpu_session(workdir / int8["file"], threads)}
    seconds = median_latencies(sessions, feeds, repeats)
    speedup = seconds["fp32"] / seconds["int8_mixed"]
    reduction = 1.0 - int8["size_bytes"] / fp32["size_bytes"]
    return {
        "model": model.name, "batch": batch, "feeds_shape": {k: list(v.shape) for k, v in feeds.items()},
        "threads": threads, "repeats": repeats,
        "fp32_ms": round(seconds["fp32"] * 1e3, 3), "int8_mixed_ms": round(seconds["int8_mixed"] * 1e3, 3),
        "speedup": round(speedup, 3), "fp32_bytes": fp32["size_bytes"], "int8_mixed_bytes": int8["size_bytes"],
        "size_reduction": round(reduction, 4), "metric": int8["metric"], "value": int8["value"],
        "budget": int8["validation"]["budget"], "within_budget": bool(int8["validation"]["passed"]),
        "cpu_scheme": int8.get("cpu_scheme"), "high_precision_layers": int8.get("high_precision_layers"),
        "cpu_scheme_choice": int8.get("cpu_scheme_choice", {}),
        "served_variant": model.variant.value, "int8_built_by_benchmark": bool(record.get("int8_built_by_benchmark")),
        "targets_met": {"speedup_2x": speedup >= TARGET_SPEEDUP, "size_70pct": reduction >= TARGET_SIZE_REDUCTION,
                        "budget": bool(int8["validation"]["passed"])},
    }


def calibration_study(model, record: Mapping[str, Any], workdir: Path, sizes, seeds: int, method) -> dict[str, Any]:
    """Metric of the all-INT8 (TensorRT scheme) graph per (sampling, size), over `seeds` seeds. Each
    calibration set also decides the outlier rewrite (`smoothing.smoothed_source`), as in the build."""
    import onnx

    from model_build.int8.calibration import Sampling
    from model_build.int8.variant import Int8Settings
    from model_build.int8.quant_types import ActivationScheme, LayerKind, find_quantizable_layers
    from model_build.int8.quantize import compute_activation_ranges, cpu_session, simulated_graph
    from model_build.int8.smoothing import smoothed_source

    fp32_path = workdir / record["variants"]["fp32"]["file"]
    fp32_model = onnx.load(str(fp32_path))
    source = workdir.parent if workdir.name == UNSERVED_INT8_DIR else workdir
    all_layers = find_quantizable_layers(fp32_model)
    factory = _int8_inputs_factory(model.recipe)
    rows: dict[str, dict[str, Any]] = {}
    reference = None
    with tempfile.TemporaryDirectory(prefix="calibration-study-") as tmp:
        for sampling in Sampling:
            for size in sizes:
                values, errors = [], []
                for seed in range(seeds):
                    settings = Int8Settings(calibration_method=method, calibration_sampling=sampling, calibration_size=size,
                                            calibration_seed=seed)
                    inputs = factory(model, source, fp32_path, settings)
                    eval_batches = list(inputs.eval_batches)[:STUDY_EVAL_BATCHES] if model.recipe != "digit_cnn" else list(inputs.eval_batches)
                    if reference is None:
                        session = cpu_session(fp32_path)
                        reference = np.concatenate([session.run(None, dict(b))[0] for b in eval_batches])
                    graph_source, smoothings = smoothed_source(fp32_model, all_layers, inputs.calibration_batches, settings.outlier_threshold)
                    graph_path = fp32_path
                    if smoothings:
                        graph_path = Path(tmp) / "source.onnx"
                        onnx.save(graph_source, str(graph_path))
                    compute = [l for l in find_quantizable_layers(graph_source) if l.kind is LayerKind.COMPUTE]
                    ranges = compute_activation_ranges(graph_path, compute, inputs.calibration_batches, settings.calibration_method,
                                                       Path(tmp) / "ranges.json")
                    graph = simulated_graph(graph_source, compute, ActivationScheme.STATIC_INT8_SYMMETRIC, ranges)
                    session = cpu_session(graph, optimize=False)
                    out = np.concatenate([session.run(None, dict(b))[0] for b in eval_batches])
                    measurement = inputs.measure(out, reference)
                    values.append(measurement.value)
                    errors.append(measurement.error)
                row = rows[f"{sampling.value}/{size}"] = {"sampling": sampling.value, "size": size, "values": values, "errors": errors}
                for name, series in (("", values), ("error_", errors)):
                    row[f"{name}mean"] = float(np.mean(series))
                    row[f"{name}std"] = float(np.std(series, ddof=1)) if len(series) > 1 else 0.0
                print(f"[calibration-study] {model.name} {sampling.value:10s} n={size:4d}: {inputs.budget.metric} mean {row['mean']:.5f} "
                      f"std {row['std']:.5f}; output error mean {row['error_mean']:.3g} std {row['error_std']:.2g}")
    return {"model": model.name, "metric": inputs.budget.metric, "scheme": "static_int8_symmetric (TensorRT), every compute layer INT8, fake-quantized, outlier channels moved into weights as in the build",
            "calibration_method": method.value, "error_measure": _error_measure(model.recipe), "seeds": seeds, "eval_samples": int(len(reference)), "rows": rows}


def _error_measure(recipe: str) -> str:
    return "mean |p - p_fp32| over all class probabilities" if recipe == "digit_cnn" else "1 - mean cosine to FP32"


def render_benchmark_markdown(report: Mapping[str, Any]) -> str:
    lines = ["# FP32 vs INT8-mixed on this CPU (ONNX Runtime)", "", f"Machine: {report['machine']}.",
             f"Command: `{report['command']}` ({report['generated_at']}).", "",
             f"Targets (recorded, not asserted): >= {TARGET_SPEEDUP}x faster at batch 32, >= {TARGET_SIZE_REDUCTION:.0%} smaller, within budget.", "",
             "| model | batch | FP32 ms | INT8-mixed ms | speedup | FP32 MB | INT8 MB | smaller | metric | budget | CPU scheme | kept FP32 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in report["models"]:
        lines.append(f"| {r['model']} | {r['batch']} | {r['fp32_ms']:.2f} | {r['int8_mixed_ms']:.2f} | {r['speedup']:.2f}x | "
                     f"{r['fp32_bytes'] / 1e6:.2f} | {r['int8_mixed_bytes'] / 1e6:.2f} | {r['size_reduction']:.1%} | "
                     f"{r['metric']} = {r['value']:.4f} | {r['budget']} | {r['cpu_scheme']} | {len(r['high_precision_layers'] or [])} |")
    for r in report["models"]:
        reasons = explain_shortfalls(r, report.get("cpu_lacks_vnni", False))
        if reasons:
            lines += ["", f"**{r['model']}** misses a target. Why (from the measurements above):"] + [f"- {x}" for x in reasons]
    for line in report.get("skipped", []):
        lines += ["", f"SKIPPED: {line}"]
    return "\n".join(lines) + "\n"


def explain_shortfalls(result: Mapping[str, Any], lacks_vnni: bool) -> list[str]:
    """Plain reasons for each missed target, derived from what was measured (pure)."""
    reasons = []
    if result["speedup"] < TARGET_SPEEDUP:
        if result["fp32_ms"] < 5.0:
            reasons.append(f"speed: FP32 needs only {result['fp32_ms']:.2f} ms per batch of {result['batch']}; per-call and "
                           "Q/DQ (quantize/requantize) overhead outweighs the INT8 arithmetic saved on so small a model.")
        if lacks_vnni:
            reasons.append("speed: this CPU has AVX2 but no VNNI, so ONNX Runtime's U8S8 GEMM (vpmaddubsw) is at best about 2x FP32 "
                           "and only on the weight MatMuls/Convs; attention, softmax, LayerNorm and activations stay FP32.")
        choice = result.get("cpu_scheme_choice") or {}
        seconds, invariance = choice.get("seconds_b32_all_int8", {}), choice.get("batch_invariance_error", {})
        faster = [k for k, v in seconds.items() if k != result["cpu_scheme"] and v < seconds.get(result["cpu_scheme"], 0)]
        for name in faster:
            if invariance.get(name, 0) > 1e-4:
                reasons.append(f"speed: `{name}` was faster with every layer INT8 ({seconds[name] * 1e3:.1f} vs "
                               f"{seconds[result['cpu_scheme']] * 1e3:.1f} ms) but its outputs change by up to {invariance[name]:.2g} "
                               "when the same inputs are batched differently, which a dynamic batcher cannot serve.")
        if result.get("high_precision_layers"):
            reasons.append(f"speed: {len(result['high_precision_layers'])} layer(s) stay FP32 to meet the budget.")
    if result["size_reduction"] < TARGET_SIZE_REDUCTION:
        reasons.append(f"size: the model has only {result['fp32_bytes'] / 1e3:.0f} kB of FP32 weights; biases, per-channel scales "
                       "and zero points and the graph itself stay, so INT8 cannot shrink it by 4x.")
    if not result.get("within_budget", True):
        reasons.append(f"budget: {result['metric']} = {result['value']:.4f} misses {result['budget']}.")
    return reasons


def render_study_markdown(study: Mapping[str, Any]) -> str:
    lines = ["## Calibration: stratified vs random sampling", "",
             f"Command: `{study['command']}`. Each cell: mean (std) of the budget metric over {STUDY_SEEDS} seeds; the graph has every compute "
             "layer in INT8 with TensorRT's symmetric scheme (fake-quantized in ONNX Runtime), so only the calibration differs.", ""]
    for model in study["models"]:
        sizes = sorted({r["size"] for r in model["rows"].values()})
        lines += [f"### {model['model']} ({model['calibration_method']} calibration, {model['eval_samples']} evaluation samples)", "",
                  "| sampling | quantity | " + " | ".join(f"n={s}" for s in sizes) + " |", "|---|---|" + "---:|" * len(sizes)]
        for sampling in ("stratified", "random"):
            cells = [model["rows"][f"{sampling}/{s}"] for s in sizes]
            lines.append(f"| {sampling} | {model['metric']} | " + " | ".join(f"{c['mean']:.5f} ({c['std']:.5f})" for c in cells) + " |")
            if "error_mean" in cells[0]:
                lines.append(f"| {sampling} | {model.get('error_measure', 'output error')} | "
                             + " | ".join(f"{c['error_mean']:.3g} ({c['error_std']:.2g})" for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def cmd_benchmark(args: argparse.Namespace, project_root: Path) -> int:
    from model_build.int8.quant_types import CalibrationMethod
    from contracts.serving_spec import load_serving_spec

    serving = load_serving_spec(args.config)
    paths = BuildPaths(project_root)
    out_dir = paths.reports
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m model_build " + " ".join(sys.argv[1:] if sys.argv[0].endswith(("model_build", "__main__.py")) else ["benchmark"])
    results, studies, skipped = [], [], []
    for model in serving.models:
        try:
            record = dict(read_build_record(paths.workdir(model.name)).data)
        except BuildRecordError:
            record = {}
        workdir = paths.workdir(model.name)
        try:
            _int8_inputs_factory(model.recipe)
        except KeyError:
            continue  # not a model with precision variants (tokenizer, ensemble)
        if "fp32" not in record.get("variants", {}):
            skipped.append(f"{model.name}: not built (run `make build-engines` first)")
            continue
        if "int8_mixed" not in record["variants"]:
            record, workdir = build_unserved_int8(model, record, workdir), workdir / UNSERVED_INT8_DIR
        result = benchmark_model(model, record, workdir, args.repeats, args.threads, args.batch)
        print(f"[benchmark] {model.name}: FP32 {result['fp32_ms']:.2f} ms, INT8-mixed {result['int8_mixed_ms']:.2f} ms at batch "
              f"{args.batch} ({result['speedup']:.2f}x), {result['size_reduction']:.1%} smaller, {result['metric']} = {result['value']:.4f}")
        results.append(result)
        if not args.skip_study:
            studies.append(calibration_study(model, record, workdir, args.study_sizes, args.study_seeds,
                                             CalibrationMethod(args.study_method)))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    from model_build.int8.quantize import cpu_lacks_vnni

    report = {"generated_at": now, "machine": _machine(), "command": command, "models": results, "skipped": skipped,
              "cpu_lacks_vnni": cpu_lacks_vnni()}
    (out_dir / "benchmark.json").write_text(json.dumps(report, indent=2))
    (out_dir / "benchmark.md").write_text(render_benchmark_markdown(report))
    if studies:
        study = {"generated_at": now, "machine": report["machine"], "command": command, "models": studies}
        (out_dir / "calibration_study.json").write_text(json.dumps(study, indent=2))
        (out_dir / "calibration_study.md").write_text(render_study_markdown(study))
    for line in skipped:
        print(f"[benchmark] skipped {line}")
    print(f"[benchmark] wrote {out_dir / 'benchmark.md'}" + (f" and {out_dir / 'calibration_study.md'}" if studies else ""))
    return 0
