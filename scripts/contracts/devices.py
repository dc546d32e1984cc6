"""The one probe for an NVIDIA GPU, used by the partition plan (MPS or CPU sets), the build
(TensorRT engines, device-memory sizing) and the GPU check.

Why one: two probes with different rules (one required a `GPU ` line, the other the word GPU
anywhere) could disagree about the same machine, so the build would make engines the serving
plan then ignores. `CUDA_VISIBLE_DEVICES` is honoured: empty or "-1" hides every GPU, a list of
indices or UUIDs keeps the listed ones, as the CUDA runtime does.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class GpuProbe:
    present: bool
    detail: str
    #: `nvidia-smi -L` lines of the GPUs this process may use (after CUDA_VISIBLE_DEVICES).
    gpus: tuple[str, ...] = ()


def visible_gpus(listed: tuple[str, ...], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The `nvidia-smi -L` lines CUDA_VISIBLE_DEVICES leaves visible (unset: all of them)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return listed
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    if not wanted or wanted[0] == "-1":
        return ()
    kept = []
    for token in wanted:
        if token.isdigit():
            if int(token) < len(listed):
                kept.append(listed[int(token)])
            else:
                break  # CUDA stops at the first invalid index
        else:
            match = [line for line in listed if token in line]
            if not match:
                break
            kept.append(match[0])
    return tuple(dict.fromkeys(kept))


def detect_nvidia_gpu(environ: Mapping[str, str] | None = None) -> GpuProbe:
    """Is there an NVIDIA GPU this process can use? (`nvidia-smi -L` lists one that
    CUDA_VISIBLE_DEVICES leaves visible.)"""
    environ = os.environ if environ is None else environ
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuProbe(False, "no NVIDIA GPU: nvidia-smi is not installed")
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuProbe(False, f"no NVIDIA GPU: nvidia-smi -L failed ({exc})")
    listed = tuple(line for line in out.stdout.splitlines() if line.startswith("GPU "))
    if out.returncode != 0 or not listed:
        return GpuProbe(False, f"no NVIDIA GPU: nvidia-smi -L exited {out.returncode} listing none")
    gpus = visible_gpus(listed, environ)
    if not gpus:
        return GpuProbe(False, f"no usable NVIDIA GPU: CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES')!r} "
                               f"hides all {len(listed)} listed")
    return GpuProbe(True, gpus[0], gpus)
