"""ONNX export and the checks every exported graph must pass before it is served."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from contracts.onnx_sessions import served_session
from model_build.errors import BuildError

#: opset 17 is what the TorchScript exporter handles best for these models and what TensorRT 10 parses.
ONNX_OPSET = 17


def onnx_from_torch(
    module,
    sample_inputs: Sequence,
    path: Path,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: Mapping[str, Mapping[int, str]],
) -> Path:
    """Export with the TorchScript exporter (dynamo=False): stable graphs with named dynamic axes."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            module, tuple(sample_inputs), str(path), input_names=list(input_names), output_names=list(output_names),
            dynamic_axes={k: dict(v) for k, v in dynamic_axes.items()}, opset_version=ONNX_OPSET, dynamo=False,
            do_constant_folding=True,
        )
    check_onnx(path)
    return path


def check_onnx(path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # onnx raises several types
        raise BuildError(f"{path} failed onnx.checker: {exc}") from exc


def onnxruntime_session(path: Path, threads: int | None = None):
    """The graph in ONNX Runtime as the backend serves it (contracts.onnx_sessions), on the build's threads."""
    from model_build.pipeline import build_threads

    return served_session(path, build_threads() if threads is None else threads)


def run_onnxruntime_batched(session, feeds: Mapping[str, np.ndarray], batch_size: int = 256) -> list[np.ndarray]:
    """Run in chunks of `batch_size` and concatenate, so large evaluation sets fit in memory."""
    total = len(next(iter(feeds.values())))
    chunks: list[list[np.ndarray]] = []
    for start in range(0, total, batch_size):
        chunk = {k: v[start:start + batch_size] for k, v in feeds.items()}
        chunks.append(session.run(None, chunk))
    return [np.concatenate([c[i] for c in chunks]) for i in range(len(chunks[0]))]


@dataclass(frozen=True)
class ExportComparison:
    """How far ONNX Runtime's outputs are from the framework's on the same inputs."""

    max_abs_diff: float
    tolerance: float
    samples: int

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance


def compare_with_framework(
    framework_fn: Callable[[Mapping[str, np.ndarray]], np.ndarray],
    onnx_path: Path,
    feeds: Mapping[str, np.ndarray],
    tolerance: float,
    what: str,
) -> ExportComparison:
    """Compare the first output of the ONNX graph with the framework function; fail the build if off."""
    session = onnxruntime_session(onnx_path)
    onnx_out = run_onnxruntime_batched(session, feeds)[0]
    reference = framework_fn(feeds)
    diff = float(np.max(np.abs(onnx_out.astype(np.float64) - reference.astype(np.float64))))
    result = ExportComparison(max_abs_diff=diff, tolerance=tolerance, samples=len(onnx_out))
    if not result.ok:
        raise BuildError(
            f"{what}: ONNX Runtime output differs from the framework by {diff:.3g} (max abs) on "
            f"{result.samples} samples; the export tolerance is {tolerance:.3g}."
        )
    return result
