"""The ONNX Runtime session options of the served CPU path, in one place.

The `onnxruntime_cpu` backend, the in-process limit of the perf suite and the padding report all
open the served ONNX file; a limit measured with other options than the server's would not be
the server's limit (it used to be a hand copy without the spinning setting).
"""
from __future__ import annotations

from pathlib import Path


def served_session_options(intra_op_threads: int = 0):
    """Options of a served session: `intra_op_threads` (0: ONNX Runtime's default), one inter-op
    thread, all graph optimisations, and idle threads that sleep instead of spinning (instances of
    several models share the cores: a spinning thread steals a core from another's compute)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def served_session(onnx_path: str | Path, intra_op_threads: int = 0):
    """A CPU InferenceSession exactly as the `onnxruntime_cpu` backend opens it."""
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx_path), served_session_options(intra_op_threads), providers=["CPUExecutionProvider"])
