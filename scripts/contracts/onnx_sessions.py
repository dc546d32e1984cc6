"""The ONNX Runtime session options of the served CPU path, in one place.

The `onnxruntime_cpu` backend, the in-process limit of the perf suite and the padding report all
open the served ONNX file; a limit measured with other options than the server's would not be
the server's limit (it used to be a hand copy without the spinning setting). The build's validation
and timing sessions, the LLM's decoder session and the tests' in-process references leave out the
same graph fusions (`disabled_fusions`), so what is validated and compared is what is served.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import MutableMapping, Sequence

#: ONNX Runtime's opt-out of its own telemetry, read once, when the runtime initializes (in Python:
#: at `import onnxruntime`). See `keep_onnxruntime_offline`.
TELEMETRY_OPT_OUT_ENV = "ORT_DISABLE_TELEMETRY"


def keep_onnxruntime_offline(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Opt ONNX Runtime out of its telemetry in `env` (default: this process's environment, before
    anything imports onnxruntime) unless the variable is already set (`0`: an operator opting in).

    Why: ONNX Runtime 1.29 added 1DS telemetry on Linux (microsoft/onnxruntime#27379), on by default in
    the PyPI wheels. Measured here with 1.32.0: every process that opened a session wrote a persistent
    device id and queued events for upload to Microsoft (ProcessInfo with the executable's path, OS,
    CPU model and container detection; session creation, model load, runtime errors, aggregate run
    times) in an SQLite file under `~/.cache/Microsoft/DeveloperTools/.onnxruntime/`, 2.9 MB and 2,378
    events after a few days of this project's servers, builds and tests. This project sends nothing
    but loopback traffic, and a pod's root filesystem is no place for a growing cache. With
    `ORT_DISABLE_TELEMETRY=1` set before initialization, ONNX Runtime creates no uploader, event,
    device id or cache. Set where a process starts: the server's environment (every backend stub
    inherits it), the pods', the Makefile, the command-line entry points and the tests."""
    target = os.environ if env is None else env
    target.setdefault(TELEMETRY_OPT_OUT_ENV, "1")
    return target


def served_session_options(intra_op_threads: int = 0, spin_within_run: bool = False):
    """Options of a served session: `intra_op_threads` (0: ONNX Runtime's default), one inter-op
    thread, all graph optimisations, and idle threads that sleep instead of spinning (instances of
    several models share the cores: a spinning thread steals a core from another's compute).
    `spin_within_run`: the workers spin between the parallel sections of one call and stop at its
    end (the backend's pinned wide session, serving/backend/thread_placement.py)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_within_run else "0")
    if spin_within_run:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


CUDA_PROVIDER, CPU_PROVIDER = "CUDAExecutionProvider", "CPUExecutionProvider"

#: ONNX Runtime graph fusions a CPU session of a served graph leaves out, each measured slower than
#: the nodes it replaces. `SkipLayerNormFusion` turns the residual Add + LayerNormalization of every
#: transformer block into one SkipLayerNormalization node, whose CPU float kernel (ONNX Runtime
#: 1.32, contrib_ops/cpu/skip_layer_norm.cc) walks each row in scalar loops: in the INT8 text
#: encoder (8 x 24 tokens, 1 thread) the 12 fused nodes took 2.3 ms of a 16-ms call, the Add +
#: LayerNormalization pairs that replace them about 0.4 ms. Left unfused, 1 thread: a lone text
#: 2.09 -> 1.80 ms, 8 texts (8 x 32 tokens) 18.8 -> 16.1 ms; 2 threads: 2.06 -> 1.93 and 13.1 ->
#: 11.9 ms. Accuracy against FP32 is unchanged (mean cosine 0.9903 either way over 256 held-out
#: texts); 11 of those embeddings moved by more than 1e-4 (cosine >= 0.988 to the fused graph's),
#: where a rounding difference carried an activation across an INT8 step (docs/performance.md,
#: "One graph fusion left out"). Measured on CPU only: GPU sessions keep the fusion (CUDA has its
#: own kernel for the node).
CPU_SLOWER_FUSIONS = ("SkipLayerNormFusion",)


def disabled_fusions(providers: Sequence = (CPU_PROVIDER,)) -> list[str]:
    """The `disabled_optimizers` of a session on `providers` (names or (name, options) pairs):
    CPU_SLOWER_FUSIONS when the CPU provider runs the graph alone, none when a GPU provider leads."""
    first = providers[0] if providers else CPU_PROVIDER
    name = first[0] if isinstance(first, tuple) else first
    return list(CPU_SLOWER_FUSIONS) if name == CPU_PROVIDER else []


def execution_providers(instance_kind: str, device_id: int, available: Sequence[str]) -> list:
    """ONNX Runtime providers for a Triton instance: KIND_GPU -> the CUDA provider on the instance's
    device (CPU after it for the few ops CUDA lacks); KIND_CPU -> CPU only. A GPU instance without
    onnxruntime-gpu is an error naming the fix, never a silent CPU run."""
    kind = instance_kind.upper().removeprefix("KIND_")
    if kind == "CPU":
        return [CPU_PROVIDER]
    if kind != "GPU":
        raise ValueError(f"instance kind {instance_kind!r}: this backend runs KIND_CPU or KIND_GPU instances.")
    if CUDA_PROVIDER not in available:
        raise ValueError(f"a KIND_GPU instance needs ONNX Runtime's {CUDA_PROVIDER}, but this onnxruntime offers {list(available)}: "
                         "install requirements/gpu.txt (`make setup GPU=1`).")
    return [(CUDA_PROVIDER, {"device_id": int(device_id)}), CPU_PROVIDER]


def served_session(onnx_path: str | Path, intra_op_threads: int = 0, providers: Sequence | None = None,
                   spin_within_run: bool = False):
    """An InferenceSession exactly as the `onnxruntime_cpu` backend opens it (CPU unless `providers`)."""
    import onnxruntime as ort

    providers = list(providers or [CPU_PROVIDER])
    return ort.InferenceSession(str(onnx_path), served_session_options(intra_op_threads, spin_within_run),
                                providers=providers, disabled_optimizers=disabled_fusions(providers))
