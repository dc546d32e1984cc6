"""INT8 settings validation and the build/benchmark report rendering."""
import pytest

from model_build.reports.benchmark import render_benchmark_markdown, render_study_markdown
from model_build.errors import BuildError
from model_build.int8.variant import Int8Settings
from model_build.reports.build_report import render_build_report_markdown


def test_int8_settings_take_their_keys_from_model_options_and_ignore_the_rest():
    settings = Int8Settings.from_options({"width": 16, "calibration_method": "entropy", "calibration_size": 64})
    assert settings.calibration_method.value == "entropy" and settings.calibration_size == 64


@pytest.mark.parametrize("options, field", [({"calibration_method": "mse"}, "calibration_method"),
                                            ({"cpu_scheme": "static_int8_symmetric"}, "cpu_scheme"),
                                            ({"calibration_size": 0}, "calibration_size")])
def test_int8_settings_name_the_bad_option(options, field):
    with pytest.raises(BuildError, match=f"options.{field}"):
        Int8Settings.from_options(options)


def test_build_report_shows_latency_kept_layers_and_calibration():
    report = {"generated_at": "now", "machine": "m", "skipped": ["TensorRT engines skipped: no GPU"], "extra_sections": ["## extra"],
              "models": [{"model": "digits", "recipe": "digit_cnn", "served_file": "int8_mixed.onnx", "build_seconds": 3,
                          "variants": {
                              "fp32": {"file": "fp32.onnx", "size_bytes": 600000, "metric": "top1_accuracy", "value": 0.98,
                                       "latency_ms": {"batch_1": 0.05, "batch_32": 0.7}},
                              "int8_mixed": {"file": "int8_mixed.onnx", "size_bytes": 170000, "metric": "top1_drop_points",
                                             "value": 0.0, "latency_ms": {"batch_1": 0.06, "batch_32": 0.65},
                                             "high_precision_layers": ["/fc"], "report_section": "## plan",
                                             "calibration": {"method": "minmax", "sampling": "stratified", "size": 256, "seed": 0}}}}]}
    md = render_build_report_markdown(report)
    row = next(line for line in md.splitlines() if "| int8_mixed |" in line)
    assert "| yes |" in row and "0.17 MB" in row and "| 0.65 |" in row and "1: `/fc`" in row and "minmax, stratified 256 (seed 0)" in row
    assert "## plan" in md and "## extra" in md and "SKIPPED: TensorRT engines skipped: no GPU" in md


def test_benchmark_and_study_markdown_state_machine_command_and_numbers():
    bench = {"machine": "box", "command": "python -m model_build benchmark", "generated_at": "t", "skipped": [],
             "models": [{"model": "m", "batch": 32, "fp32_ms": 10.0, "int8_mixed_ms": 5.0, "speedup": 2.0, "fp32_bytes": 4e6,
                         "int8_mixed_bytes": 1e6, "size_reduction": 0.75, "metric": "mean_cosine", "value": 0.995,
                         "budget": "mean_cosine >= 0.99", "cpu_scheme": "dynamic_uint8", "high_precision_layers": []}]}
    md = render_benchmark_markdown(bench)
    assert "Machine: box" in md and "`python -m model_build benchmark`" in md and "| 2.00x |" in md and "75.0%" in md
    rows = {f"{s}/{n}": {"sampling": s, "size": n, "mean": 0.99, "std": 0.001} for s in ("stratified", "random") for n in (16, 64)}
    study = render_study_markdown({"command": "c", "models": [{"model": "m", "metric": "mean_cosine", "calibration_method": "minmax",
                                                                 "eval_samples": 128, "rows": rows}]})
    assert "| stratified | mean_cosine | 0.99000 (0.00100) | 0.99000 (0.00100) |" in study and "n=16" in study


def test_cpu_scheme_is_the_fastest_within_budget_else_the_most_faithful():
    from model_build.int8.quantize import pick_cpu_scheme
    from model_build.int8.sensitivity import EMBEDDER_BUDGET

    seconds = {"dynamic_uint8": 1.0, "static_uint8": 0.8}
    assert pick_cpu_scheme(seconds, {"dynamic_uint8": 0.992, "static_uint8": 0.985}, EMBEDDER_BUDGET).value == "dynamic_uint8"
    assert pick_cpu_scheme(seconds, {"dynamic_uint8": 0.995, "static_uint8": 0.991}, EMBEDDER_BUDGET).value == "static_uint8"
    assert pick_cpu_scheme(seconds, {"dynamic_uint8": 0.98, "static_uint8": 0.97}, EMBEDDER_BUDGET).value == "dynamic_uint8"


def test_a_scheme_whose_answers_depend_on_batch_mates_is_not_chosen():
    from model_build.int8.quantize import pick_cpu_scheme
    from model_build.int8.sensitivity import EMBEDDER_BUDGET

    seconds = {"dynamic_uint8": 0.7, "static_uint8": 0.9}
    metric = {"dynamic_uint8": 0.992, "static_uint8": 0.987}
    chosen = pick_cpu_scheme(seconds, metric, EMBEDDER_BUDGET, {"dynamic_uint8": 3e-3, "static_uint8": 2e-7})
    assert chosen.value == "static_uint8"  # the only invariant one, even though it needs FP32 layers
    assert pick_cpu_scheme(seconds, metric, EMBEDDER_BUDGET, {"dynamic_uint8": 1e-6, "static_uint8": 1e-6}).value == "dynamic_uint8"


def test_shortfalls_are_explained_from_the_measurements():
    from model_build.reports.benchmark import explain_shortfalls

    tiny = {"model": "d", "batch": 32, "speedup": 0.6, "fp32_ms": 0.4, "size_reduction": 0.47, "fp32_bytes": 40000,
            "within_budget": True, "cpu_scheme": "static_uint8", "high_precision_layers": [], "cpu_scheme_choice": {}}
    reasons = explain_shortfalls(tiny, lacks_vnni=False)
    assert any("per-call" in r for r in reasons) and any(r.startswith("size:") for r in reasons)
    big = {"model": "t", "batch": 32, "speedup": 1.35, "fp32_ms": 800.0, "size_reduction": 0.705, "fp32_bytes": 9e7,
           "within_budget": True, "cpu_scheme": "static_uint8", "high_precision_layers": ["a", "b"],
           "cpu_scheme_choice": {"seconds_b32_all_int8": {"dynamic_uint8": 0.55, "static_uint8": 0.6},
                                 "batch_invariance_error": {"dynamic_uint8": 0.028, "static_uint8": 0.0}}}
    reasons = explain_shortfalls(big, lacks_vnni=True)
    assert any("VNNI" in r for r in reasons) and any("`dynamic_uint8` was faster" in r for r in reasons)
    assert any("2 layer(s) stay FP32" in r for r in reasons) and not any(r.startswith("size:") for r in reasons)
