"""Measure the memory one ONNX Runtime session needs to run one batch, in a fresh process.

`python -m model_build.sizing.memory_probe --onnx M --batch B --threads T [--variable-dim L] [--device cpu|cuda]`
prints one JSON line. Run once per batch size by `model_build.sizing.batch_sizing` so no measurement sees
another's allocator state (ONNX Runtime's arena never shrinks).

CPU: the growth of the process's resident set from just before the session is created to its
peak (VmHWM, reset first) after running the batch: weights, arena, activations, inputs, outputs.
CUDA: device memory this process holds after the run, as nvidia-smi reports it for its pid.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Collection, Mapping, Sequence

from contracts.onnx_sessions import CPU_PROVIDER, CUDA_PROVIDER
from contracts.processes import own_memory_bytes
from contracts.sequence_buckets import parse_max_input_dims

#: ONNX tensor element type -> numpy dtype name, for synthetic inputs.
_ONNX_NUMPY = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
               "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
               "tensor(uint8)": "uint8", "tensor(bool)": "bool"}


def _reset_peak_rss() -> bool:
    """Linux resets VmHWM to the current RSS when 5 is written to clear_refs (since 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def synthetic_feeds(session, batch: int, variable_dim: int, seed: int = 0, zero_inputs: Collection[str] = (),
                    input_dims: Mapping[str, Sequence[int]] | None = None):
    """`batch` rows of every input of an ONNX Runtime session: floats from a normal distribution,
    integers and booleans 1 (valid token ids, all-ones masks), except 0 for `zero_inputs` (ids of a
    one-row table: contracts.onnx_graph.zero_only_inputs), a variable axis `variable_dim` long, or the
    whole row `input_dims[name]` where given (a brought model's `max_dims`). Raises ValueError naming an
    input of a type it cannot fill."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        dtype = _ONNX_NUMPY.get(arg.type)
        if dtype is None:
            raise ValueError(f"input '{arg.name}' has type {arg.type}; supported {sorted(_ONNX_NUMPY)}")
        dims = [batch] + ([int(d) for d in input_dims[arg.name]] if input_dims and arg.name in input_dims
                          else [d if isinstance(d, int) and d > 0 else variable_dim for d in arg.shape[1:]])
        if dtype.startswith("float"):
            feeds[arg.name] = rng.standard_normal(dims).astype(dtype)
        else:
            feeds[arg.name] = (np.zeros if arg.name in zero_inputs else np.ones)(dims, dtype=dtype)
    return feeds


def _gpu_used_bytes() -> int | None:
    """Memory in use on the first visible GPU (whole device). Why not per process: inside a container
    `nvidia-smi --query-compute-apps` lists HOST pids, so this process's own pid never matches; the
    device total before and after the session works in and out of containers (run it on an otherwise
    idle GPU, as `make build-engines` on a GPU host does)."""
    import subprocess

    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20)
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    index = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    position = int(index) if index.isdigit() and int(index) < len(lines) else 0
    return int(lines[position]) * 1024 * 1024 if out.returncode == 0 and lines else None


def measure(onnx: str, batch: int, threads: int, variable_dim: int, device: str, runs: int = 2,
            zero_inputs: Collection[str] = (), input_dims: Mapping[str, Sequence[int]] | None = None) -> dict:
    import onnxruntime as ort

    from contracts.onnx_sessions import served_session

    providers = [CPU_PROVIDER]
    if device == "cuda":
        if CUDA_PROVIDER not in ort.get_available_providers():
            return {"skipped": "onnxruntime has no CUDAExecutionProvider here (install onnxruntime-gpu on the GPU host)"}
        providers = [CUDA_PROVIDER]
    gpu_before = _gpu_used_bytes() if device == "cuda" else None
    rss_before = own_memory_bytes("VmRSS")
    peak_reset = _reset_peak_rss()
    started = time.perf_counter()
    session = served_session(onnx, threads, providers)  # what the backend opens, on the device it serves on
    try:
        feeds = synthetic_feeds(session, batch, variable_dim, zero_inputs=zero_inputs, input_dims=input_dims)
    except ValueError as exc:
        raise SystemExit(f"memory_probe: {exc}") from None
    for _ in range(runs):
        session.run(None, feeds)
    seconds = (time.perf_counter() - started) / runs
    result = {"batch_size": batch, "threads": threads, "variable_dim": variable_dim, "device": device,
              **({"input_dims": {name: list(dims) for name, dims in input_dims.items()}} if input_dims else {}),
              "peak_rss_growth_bytes": own_memory_bytes("VmHWM") - rss_before, "peak_reset": peak_reset,
              "seconds_per_run_incl_load": round(seconds, 4)}
    if device == "cuda":  # the session's weights, workspace and activations at this batch, as served
        used = _gpu_used_bytes()
        if used is None or gpu_before is None:
            return {"skipped": "nvidia-smi reported no GPU memory use"}
        result["device_memory_bytes"] = max(0, used - gpu_before)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="model_build.sizing.memory_probe", description=__doc__)
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variable-dim", type=int, default=128)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--zero-inputs", default="", help="comma-separated integer inputs fed 0, not 1 (one-row tables)")
    parser.add_argument("--input-dims", default="", help='JSON {input: row dims}, e.g. {"x": [3, 960, 960]} (max_input_dims)')
    args = parser.parse_args(argv)
    zero_inputs = [name for name in args.zero_inputs.split(",") if name]
    input_dims = parse_max_input_dims(args.input_dims)
    print(json.dumps(measure(args.onnx, args.batch, args.threads, args.variable_dim, args.device, zero_inputs=zero_inputs,
                             input_dims=input_dims)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
