"""INT8 explicit quantization: calibrated ranges, and the CPU and GPU graphs for a precision plan.

- `compute_activation_ranges` runs ONNX Runtime's calibrator once (min-max, entropy or
  percentile) over the calibration batches; the ranges are saved in ONNX Runtime's own cache format
  so `quantize_static` and our Q/DQ insertion reuse them without calibrating again.
- `cpu_graph` builds the INT8 + FP32 graph ONNX Runtime serves on CPU, with ONNX Runtime's
  quantization tools (dynamic MatMul quantization, or static U8S8 Q/DQ), plus INT8 embedding tables.
- `gpu_graph` builds the INT8 + FP16 graph TensorRT builds strongly typed (symmetric INT8, zero
  point 0, Q/DQ only on INT8 layers; see `qdq.py`); `fp16_graph` is the all-FP16 one.
- `simulated_graph` is the sensitivity search's cheap stand-in for either: the same Q/DQ with the
  weights fake-quantized in FP32.
- `choose_cpu_scheme` times every candidate CPU scheme on this machine and keeps the fastest.
"""
from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from contracts.onnx_sessions import CPU_PROVIDER, disabled_fusions, served_session_options
from model_build.errors import BuildError
from model_build.int8.qdq import convert_to_fp16, insert_qdq, quantize_embedding_tables
from model_build.int8.quant_types import ActivationScheme, CalibrationMethod, LayerKind, QuantizableLayer

#: The CPU schemes `choose_cpu_scheme` compares (symmetric static INT8 was measured slower than
#: FP32 in ONNX Runtime on x86 and is kept for the GPU graph only).


def cpu_lacks_vnni() -> bool:
    """True on x86 CPUs without VNNI (AVX2 / plain AVX-512). There ONNX Runtime's U8S8 kernels add
    pairs of u8*s8 products in int16 (vpmaddubsw), which saturates with full 8-bit weights; ONNX
    Runtime's advice is 7-bit weights (`reduce_range`). Measured here (AMD EPYC, AVX2): the digit
    CNN's static U8S8 graph lost 0.56 points of top-1 with full range and none with reduce_range.
    Applied to the static scheme only: MiniLM's dynamic graph kept a mean cosine of 0.992 with
    full-range weights (validated on the real graph like every variant)."""
    from contracts.devices import read_cpu_info

    cpu = read_cpu_info()
    return "avx2" in cpu.flags and not cpu.int8_dot_product


CPU_SCHEME_CANDIDATES = (ActivationScheme.DYNAMIC_UINT8, ActivationScheme.STATIC_UINT8)


def _ort_method(method: CalibrationMethod):
    from onnxruntime.quantization import CalibrationMethod as OrtMethod

    return {CalibrationMethod.MINMAX: OrtMethod.MinMax, CalibrationMethod.ENTROPY: OrtMethod.Entropy,
            CalibrationMethod.PERCENTILE: OrtMethod.Percentile}[method]


class _FeedsReader:
    """ONNX Runtime's CalibrationDataReader protocol over a list of feed dicts."""

    def __init__(self, batches: Iterable[Mapping[str, np.ndarray]]):
        self._batches = list(batches)
        self._iter = iter(self._batches)

    def get_next(self):
        return next(self._iter, None)

    def rewind(self):
        self._iter = iter(self._batches)

    def __len__(self):
        return len(self._batches)


def compute_activation_ranges(
    fp32_path: Path,
    layers: Sequence[QuantizableLayer],
    batches: Sequence[Mapping[str, np.ndarray]],
    method: CalibrationMethod,
    cache_path: Path,
) -> dict[str, tuple[float, float]]:
    """Calibrated (low, high) of every compute layer's activation input, from `batches` only.

    Also writes ONNX Runtime's calibration cache (`cache_path`, JSON) for `quantize_static`.
    """
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    if not batches:
        raise BuildError("calibration needs at least one batch of training data.")
    op_types = sorted({l.op_type for l in layers if l.kind is LayerKind.COMPUTE})
    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        calibrator = create_calibrator(
            Path(fp32_path), op_types, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=_ort_method(method), providers=[CPU_PROVIDER],
            extra_options={"num_bins": 2048, "percentile": 99.99} if method is not CalibrationMethod.MINMAX else {},
        )
        try:
            from contracts.progress import progress

            for batch in progress(batches, "calibration"):  # one call per batch: histogram collectors cannot stack ragged sequence lengths
                calibrator.collect_data(_FeedsReader([batch]))
        except ValueError as exc:  # ONNX Runtime's histogram collectors on activations of different shapes
            raise BuildError(
                f"ONNX Runtime's {method.value} calibration failed on batches of different sequence lengths ({exc}); "
                f"use calibration_method = \"minmax\" or \"percentile\" for this model."
            ) from exc
        tensors = calibrator.compute_data()
        del calibrator
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    save_tensors_data(tensors, cache_path)
    ranges = {}
    for layer in layers:
        if layer.kind is LayerKind.COMPUTE:
            low, high = tensors[layer.activation_input].range_value
            ranges[layer.activation_input] = (float(np.min(low)), float(np.max(high)))
    return ranges


@contextlib.contextmanager
def _quiet_root_logger():
    """ONNX Runtime's quantizer logs a 'consider pre-processing' warning on every call (through the
    root logger). Pre-processing (shape inference + optimisation) is optional and the graphs are
    validated anyway, so the build log is kept readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _compute(layers: Iterable[QuantizableLayer]) -> list[QuantizableLayer]:
    return [l for l in layers if l.kind is LayerKind.COMPUTE]


def _embeddings(layers: Iterable[QuantizableLayer]) -> list[QuantizableLayer]:
    return [l for l in layers if l.kind is LayerKind.EMBEDDING]


def cpu_graph(
    fp32_path: Path,
    int8_layers: Sequence[QuantizableLayer],
    scheme: ActivationScheme,
    method: CalibrationMethod,
    ranges_cache: Path | None,
):
    """The INT8 + FP32 graph for ONNX Runtime on CPU, made with ONNX Runtime's quantization tools.

    Compute layers: `quantize_dynamic` (DYNAMIC_UINT8) or `quantize_static` in Q/DQ format with
    unsigned activations and the cached calibration ranges (STATIC_UINT8); per-channel INT8
    weights either way. Embedding tables: INT8 rows (`qdq.quantize_embedding_tables`).
    """
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    compute = _compute(int8_layers)
    model = onnx.load(str(fp32_path))
    if compute:
        names, op_types = [l.name for l in compute], sorted({l.op_type for l in compute})
        with tempfile.TemporaryDirectory(prefix="quantize-") as tmp, _quiet_root_logger():
            out = Path(tmp) / "int8.onnx"
            if scheme is ActivationScheme.DYNAMIC_UINT8:
                quantize_dynamic(model, out, op_types_to_quantize=op_types, nodes_to_quantize=names,
                                 per_channel=True, weight_type=QuantType.QInt8)
            elif scheme is ActivationScheme.STATIC_UINT8:
                if ranges_cache is None or not Path(ranges_cache).exists():
                    raise BuildError("static CPU quantization needs the calibration cache: calibrate first.")
                quantize_static(
                    model, out, None, calibration_cache_path=ranges_cache, calibrate_method=_ort_method(method),
                    quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=cpu_lacks_vnni(), activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, op_types_to_quantize=op_types, nodes_to_quantize=names,
                    extra_options={"OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"]},
                )
            else:
                raise BuildError(f"CPU scheme {scheme.value!r} is not one of {[s.value for s in CPU_SCHEME_CANDIDATES]}.")
            model = onnx.load(str(out))
    return quantize_embedding_tables(model, _embeddings(int8_layers))


def gpu_graph(fp32_model, int8_layers: Sequence[QuantizableLayer], ranges: Mapping[str, tuple[float, float]]):
    """INT8 (TensorRT's symmetric scheme) where the plan says so, FP16 everywhere else."""
    quantized = insert_qdq(fp32_model, _compute(int8_layers), ActivationScheme.STATIC_INT8_SYMMETRIC, ranges)
    return convert_to_fp16(quantized)


def fp16_graph(fp32_model):
    """The FP16 engine's graph: no Q/DQ at all."""
    return convert_to_fp16(fp32_model)


def simulated_graph(fp32_model, int8_layers: Sequence[QuantizableLayer], scheme: ActivationScheme,
                    ranges: Mapping[str, tuple[float, float]] | None):
    """Fake-quantized FP32 graph with the same rounding as the INT8 one; cheap to make per layer."""
    return insert_qdq(fp32_model, list(int8_layers), scheme, ranges, fake_weights=True)


def cpu_session(model_or_path, threads: int | None = None, optimize: bool = True):
    """An ONNX Runtime CPU session (from a path, bytes or ModelProto) with the served options
    (contracts.onnx_sessions: threads pinned for fair timing, no spinning beside another build)."""
    import onnxruntime as ort

    from model_build.pipeline import build_threads

    options = served_session_options(build_threads() if threads is None else threads)
    options.log_severity_level = 3
    if not optimize:
        # Simulation graphs: run every Q/DQ as written. Even ORT_ENABLE_BASIC rewrites an activation
        # Q -> DQ feeding an FP32-weight MatMul (measured: outputs then differ from the Q/DQ graph's).
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model_or_path
    if hasattr(source, "SerializeToString"):
        source = source.SerializeToString()
    elif isinstance(source, Path):
        source = str(source)
    return ort.InferenceSession(source, options, providers=[CPU_PROVIDER], disabled_optimizers=disabled_fusions())


#: Largest output change allowed when the same rows are run in a different batch. A dynamic
#: batcher serves each request inside whatever batch it lands in, so a variant whose answer depends
#: on its batch mates is not servable; FP32 and static INT8 stay around 1e-6 here.
BATCH_INVARIANCE_ATOL = 1e-4


def batch_invariance_error(session, feeds: Mapping[str, np.ndarray], whole: np.ndarray | None = None) -> float:
    """Max abs difference between running `feeds` as one batch and as two halves. Dynamic
    activation quantization fails this: its scale comes from the whole batch (padding included).
    `whole`: the first output of `feeds` as one batch, when the caller has it already."""
    rows = len(next(iter(feeds.values())))
    if rows < 2:
        return 0.0
    half = rows // 2
    whole = session.run(None, dict(feeds))[0] if whole is None else whole
    parts = [session.run(None, {k: v[s] for k, v in feeds.items()})[0] for s in (slice(0, half), slice(half, rows))]
    return float(np.abs(whole - np.concatenate(parts)).max())


def pick_cpu_scheme(seconds: Mapping[str, float], metric: Mapping[str, float], budget,
                    invariance_error: Mapping[str, float] | None = None) -> ActivationScheme:
    """Among batch-invariant schemes (all, if none is), the fastest whose all-INT8 graph already
    meets the budget; if none does, the one with the best metric (it will need the fewest layers
    kept in FP32). Pure, so it is unit-tested."""
    names = list(seconds)
    if invariance_error:
        invariant = [s for s in names if invariance_error[s] <= BATCH_INVARIANCE_ATOL]
        names = invariant or names
    meeting = [s for s in names if budget.met(metric[s])]
    if meeting:
        return ActivationScheme(min(meeting, key=lambda s: seconds[s]))
    return ActivationScheme(max(names, key=lambda s: -budget.degradation(metric[s])))


def choose_cpu_scheme(
    fp32_path: Path,
    layers: Sequence[QuantizableLayer],
    method: CalibrationMethod,
    ranges_cache: Path,
    feeds: Mapping[str, np.ndarray],
    measure: Callable[[object], float],
    budget,
    repeats: int = 3,
    candidates: Sequence[ActivationScheme] = CPU_SCHEME_CANDIDATES,
    built: dict | None = None,
) -> tuple[ActivationScheme, dict[str, float], dict[str, float], dict[str, float]]:
    """Build every candidate with ALL layers in INT8, time them at `feeds` interleaved in one run
    (median seconds per call; 2 threads), measure their budget metric (`measure(session)`) and their
    batch invariance (the whole-batch output is the timing's warm-up run of the same feeds), then
    `pick_cpu_scheme`. Returns (scheme, seconds, metric, invariance error). `built`, if given,
    receives {scheme: (graph, session)}: the all-INT8 graph is also the selection's first trial."""
    from model_build.reports.latency import median_latencies

    graphs = {s.value: cpu_graph(fp32_path, layers, s, method, ranges_cache) for s in candidates}
    sessions = {name: cpu_session(graph) for name, graph in graphs.items()}
    warmup: dict = {}
    seconds = median_latencies(sessions, feeds, repeats, warmup_outputs=warmup)
    metric = {name: measure(session) for name, session in sessions.items()}
    invariance = {name: batch_invariance_error(session, feeds, warmup[name][0]) for name, session in sessions.items()}
    if built is not None:
        built.update({ActivationScheme(name): (graphs[name], sessions[name]) for name in graphs})
    return pick_cpu_scheme(seconds, metric, budget, invariance), seconds, metric, invariance
