"""`make gpu-check`: what works on this host's GPU, step by step, each OK / SKIPPED (why) / FAILED (why).

Run it first on a GPU host. It never writes a placeholder: a step that cannot run says so and why.
Steps (each needs the ones before it):
1. GPU and driver seen (contracts.devices, honouring CUDA_VISIBLE_DEVICES);
2. onnxruntime-gpu's CUDA provider and TensorRT importable (requirements/gpu.txt);
3. the MPS control daemon up, two clients at different thread percentages each running a CUDA session;
4. each TensorRT engine of the last `make build-engines` replayed against its FP32 outputs (Polygraphy);
5. one model served on the GPU by tritonserver (device = "gpu": KIND_GPU, CUDA provider) with its
   dynamic batcher and both priority levels, answers equal to the FP32 CPU run;
6. isolation: a GPU client's P99 alone vs next to a saturating neighbour at 50/50 MPS shares.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

OK, SKIPPED, FAILED = "OK", "SKIPPED", "FAILED"


@dataclass(frozen=True)
class StepResult:
    name: str
    status: str
    detail: str

    def line(self) -> str:
        return f"[gpu-check] {self.name}: {self.status}" + (f" ({self.detail})" if self.detail else "")


def _gpu_step() -> StepResult:
    from contracts.devices import detect_nvidia_gpu

    gpu = detect_nvidia_gpu()
    if not gpu.present:
        return StepResult("GPU and driver", SKIPPED, gpu.detail)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    return StepResult("GPU and driver", OK, f"{gpu.detail}; driver {driver.stdout.strip() or '?'}")


def _packages_step() -> StepResult:
    missing = []
    try:
        import onnxruntime as ort

        from contracts.onnx_sessions import CUDA_PROVIDER

        if CUDA_PROVIDER not in ort.get_available_providers():
            missing.append(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider")
    except ImportError:
        missing.append("onnxruntime is not installed")
    from contracts.devices import detect_tensorrt

    trt = detect_tensorrt()
    if not trt.available:
        missing.append(trt.reason)
    if missing:
        return StepResult("CUDA provider and TensorRT", FAILED, "; ".join(missing) + " (make setup GPU=1)")
    return StepResult("CUDA provider and TensorRT", OK, trt.reason)


_CLIENT = ("import sys, numpy as np, onnxruntime as ort\n"
           "s = ort.InferenceSession(sys.argv[1], providers=['CUDAExecutionProvider'])\n"
           "assert s.get_providers()[0] == 'CUDAExecutionProvider', s.get_providers()\n"
           "x = np.zeros((64, 1, 8, 8), np.float32)\n"
           "[s.run(None, {s.get_inputs()[0].name: x}) for _ in range(200)]\n")


def _mps_step(onnx_path: Path) -> StepResult:
    from contracts.layout import RunLayout
    from serving.runtime.launcher import MPS_CONTROL, mps_environment, start_mps_daemon, stop_mps_daemon

    if shutil.which(MPS_CONTROL) is None:
        return StepResult("MPS daemon with two clients", SKIPPED, f"{MPS_CONTROL} is not on PATH")
    with tempfile.TemporaryDirectory(prefix="gpu-check-mps-") as tmp:
        layout = RunLayout(Path(tmp))
        fallback = start_mps_daemon(layout)
        if fallback:
            return StepResult("MPS daemon with two clients", SKIPPED, fallback)
        try:
            clients = []
            for share in (25, 75):
                env = {**__import__("os").environ, **mps_environment(layout), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share)}
                env.pop("CUDA_VISIBLE_DEVICES", None)
                clients.append(subprocess.Popen([sys.executable, "-c", _CLIENT, str(onnx_path)], env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outputs = [c.communicate(timeout=120)[0] for c in clients]
            servers = subprocess.run([MPS_CONTROL], input="get_server_list\n", env={**mps_environment(layout)},
                                     capture_output=True, text=True, timeout=10).stdout.split()
        finally:
            stop_mps_daemon(layout)
    failed = [f"client {i}: {out.strip().splitlines()[-1] if out.strip() else 'exit ' + str(c.returncode)}"
              for i, (c, out) in enumerate(zip(clients, outputs)) if c.returncode != 0]
    if failed:
        return StepResult("MPS daemon with two clients", FAILED, "; ".join(failed))
    return StepResult("MPS daemon with two clients", OK, f"clients at 25% and 75% ran 200 batches each; MPS servers {servers}")


def _engines_step(artifacts: Path) -> StepResult:
    from contracts.layout import ENGINE_REPLAY_ATOL as REPLAY_ATOL, ENGINE_REPLAY_INPUTS as REPLAY_INPUTS
    from contracts.layout import ENGINE_REPLAY_OUTPUTS as REPLAY_OUTPUTS

    plans = sorted(artifacts.glob("*/tensorrt/*/1/model.plan"))
    if not plans:
        return StepResult("TensorRT engines replayed vs FP32", SKIPPED, "no engine under artifacts/*/tensorrt: run `make build-engines` on this host")
    results = []
    for plan in plans:
        folder = plan.parent.parent
        cmd = ["polygraphy", "run", str(plan), "--model-type", "engine", "--trt", "--load-inputs", str(folder / REPLAY_INPUTS),
               "--load-outputs", str(folder / REPLAY_OUTPUTS), "--atol", str(REPLAY_ATOL), "--rtol", "0", "--check-error-stat", "median"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        results.append((folder.name, done.returncode == 0, (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]))
    bad = [f"{name}: {tail[0]}" for name, ok, tail in results if not ok]
    if bad:
        return StepResult("TensorRT engines replayed vs FP32", FAILED, "; ".join(bad))
    return StepResult("TensorRT engines replayed vs FP32", OK, f"{len(results)} engine(s) within median |error| <= {REPLAY_ATOL}: "
                      + ", ".join(name for name, _, _ in results))


def _serve_gpu_model(repository: Path, serving_config: Path) -> StepResult:
    """digit_classifier rendered as a GPU model (KIND_GPU, CUDA provider) in a temporary repository,
    served by tritonserver with its batcher and priority levels, asked at both priorities; answers
    compared with the FP32 CPU session."""
    import dataclasses

    import numpy as np
    import tritonclient.http as http

    from contracts.layout import place_model_file
    from contracts.model_config import render_onnx_cpu_config, tensor_specs_from_onnx, write_model_config
    from contracts.onnx_sessions import served_session
    from contracts.processes import free_loopback_ports
    from contracts.serving_spec import Device, load_serving_spec
    from serving.runtime.server import ServerSettings, TritonServerProcess, find_tritonserver, prepare_backend_dir

    name = "one GPU model served with batching and priorities"
    spec = load_serving_spec(serving_config)
    model = dataclasses.replace(spec.model("digit_classifier"), name="digits_gpu_check", device=Device.GPU, instance_count=1)
    onnx = repository / "digit_classifier" / "1" / "model.onnx"
    with tempfile.TemporaryDirectory(prefix="gpu-check-serve-") as tmp:
        repo = Path(tmp) / "repository"
        (repo / model.name / "1").mkdir(parents=True)
        place_model_file(onnx, repo / model.name / "1" / "model.onnx")
        inputs, outputs = tensor_specs_from_onnx(onnx)
        write_model_config(repo / model.name, render_onnx_cpu_config(model, spec, inputs, outputs))
        installation = find_tritonserver()
        http_port, grpc_port, metrics_port = free_loopback_ports(3)
        settings = ServerSettings(model_repository=repo, backend_dir=prepare_backend_dir(installation, Path(tmp) / "backends"),
                                  http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, models=(model.name,),
                                  max_input_bytes=spec.server.max_input_bytes)
        server = TritonServerProcess(installation, settings, Path(tmp) / "tritonserver.log").start()
        try:
            server.wait_ready(timeout=300)
            x = np.random.default_rng(0).random((16, *inputs[0].dims), dtype=np.float32)
            expected = served_session(onnx).run(None, {inputs[0].name: x})[0]
            client = http.InferenceServerClient(f"127.0.0.1:{http_port}")
            worst = 0.0
            for priority in sorted(level.level for level in spec.priorities) or [0]:
                request = http.InferInput(inputs[0].name, list(x.shape), "FP32")
                request.set_data_from_numpy(x)
                got = client.infer(model.name, [request], priority=priority).as_numpy(outputs[0].name)
                worst = max(worst, float(np.abs(got - expected).max()))
        except Exception as exc:  # the server's log names the failure
            from contracts.processes import log_tail

            return StepResult(name, FAILED, f"{type(exc).__name__}: {exc}; log: {log_tail(server.log_path, 5)}")
        finally:
            server.stop()
    if worst > 1e-3:
        return StepResult(name, FAILED, f"GPU answers differ from the FP32 CPU run by up to {worst:.2e} (allowed 1e-3)")
    return StepResult(name, OK, f"KIND_GPU instance, CUDA provider; both priority levels answered; max |diff| vs CPU {worst:.1e}")


def _isolation_step() -> StepResult:
    return StepResult("isolation under a noisy neighbour (GPU)", SKIPPED,
                      "run `make perf` on this host: its isolation A/B measures the quiet partition's P99 alone and next to a "
                      "saturated neighbour with the partitions' MPS shares")


def run_checks(config: Path, repository: Path, artifacts: Path, out: Callable[[str], None] = print) -> list[StepResult]:
    results: list[StepResult] = []

    def record(result: StepResult) -> bool:
        results.append(result)
        out(result.line())
        return result.status == OK

    gpu_ok = record(_gpu_step())
    if not gpu_ok:
        for name in ("CUDA provider and TensorRT", "MPS daemon with two clients", "TensorRT engines replayed vs FP32",
                     "one GPU model served with batching and priorities", "isolation under a noisy neighbour (GPU)"):
            record(StepResult(name, SKIPPED, "no usable NVIDIA GPU (step 1)"))
        return results
    packages_ok = record(_packages_step())
    onnx = repository / "digit_classifier" / "1" / "model.onnx"
    record(_mps_step(onnx) if packages_ok and onnx.exists() else
           StepResult("MPS daemon with two clients", SKIPPED, "needs step 2 and a built digit_classifier"))
    record(_engines_step(artifacts) if packages_ok else StepResult("TensorRT engines replayed vs FP32", SKIPPED, "needs step 2"))
    record(_serve_gpu_model(repository, config) if packages_ok and onnx.exists() else
           StepResult("one GPU model served with batching and priorities", SKIPPED, "needs step 2 and a built digit_classifier"))
    record(_isolation_step())
    return results


def main(argv: list[str] | None = None) -> int:
    from contracts.layout import ARTIFACTS_DIR, MODEL_REPOSITORY, SERVING_CONFIG
    from contracts.onnx_sessions import keep_onnxruntime_offline

    keep_onnxruntime_offline()  # before the CUDA provider's session imports onnxruntime

    parser = argparse.ArgumentParser(prog="operations.gpu_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=SERVING_CONFIG)
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--artifacts", type=Path, default=ARTIFACTS_DIR)
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run_checks(args.config, args.repository, args.artifacts)
    counts = {status: sum(r.status == status for r in results) for status in (OK, SKIPPED, FAILED)}
    print(f"[gpu-check] {counts[OK]} OK, {counts[SKIPPED]} SKIPPED, {counts[FAILED]} FAILED in {time.monotonic() - started:.0f} s")
    return 1 if counts[FAILED] else 0


if __name__ == "__main__":
    raise SystemExit(main())
