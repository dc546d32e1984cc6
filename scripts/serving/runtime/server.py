"""Run the real `tritonserver`: find it, prepare its backend directory, start it, wait, stop it.

Planning (`ServerSettings.to_args_list`, `find_tritonserver`) is separate from running
(`TritonServerProcess`), so the flags can be inspected and tested without starting anything.
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from contracts.errors import ServerStartError
from contracts.layout import SOURCE_DIRS
from contracts.onnx_sessions import keep_onnxruntime_offline
from contracts.shared_memory import remove_server_leftovers, with_mapped_regions
from contracts.serving_spec import DEFAULT_LATENCY_SUMMARY_QUANTILES, DEFAULT_MAX_INPUT_BYTES, DEFAULT_RATE_LIMIT
from contracts.processes import kill_process_group, log_tail, server_ready
from serving.runtime.security import ADMIN_KEY_ENV
from serving.runtime.stub_watch import stop_server_group

#: Environment variable that names a tritonserver binary explicitly (first in the search order).
TRITONSERVER_ENV = "TRITONSERVER"
#: Our Python-based backends (a model.py shared by many models), installed into the backend dir.
PROJECT_BACKENDS_DIR = Path(__file__).resolve().parents[1] / "backend" / "triton_backends"


@dataclass(frozen=True)
class TritonInstallation:
    """Where a tritonserver binary and its backends live, and how it must be started."""

    binary: Path
    backends_dir: Path
    #: True for the binary bundled in the nvidia-pytriton wheel (needs a stub copied in and libs).
    bundled: bool
    library_dirs: tuple[Path, ...] = ()


def _bundled_installation() -> TritonInstallation | None:
    try:
        import pytriton  # the nvidia-pytriton wheel ships the genuine server
    except ImportError:
        return None
    root = Path(pytriton.__file__).parent / "tritonserver"
    binary = root / "bin" / "tritonserver"
    if not binary.exists():
        return None
    libs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
    return TritonInstallation(binary=binary, backends_dir=root / "backends", bundled=True, library_dirs=(libs,))


def find_tritonserver(explicit: str | os.PathLike | None = None) -> TritonInstallation:
    """Search order: explicit argument or $TRITONSERVER, `tritonserver` on PATH, nvidia-pytriton's."""
    explicit = explicit or os.environ.get(TRITONSERVER_ENV)
    if explicit:
        binary = Path(explicit)
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise ServerStartError(f"{TRITONSERVER_ENV}={explicit} is not an executable file.")
        return _installation_for_binary(binary)
    on_path = shutil.which("tritonserver")
    if on_path:
        return _installation_for_binary(Path(on_path))
    bundled = _bundled_installation()
    if bundled is None:
        raise ServerStartError(
            "no tritonserver found: set TRITONSERVER=/path/to/tritonserver, put it on PATH (NVIDIA's "
            "container has /opt/tritonserver/bin), or run `make setup` to install nvidia-pytriton."
        )
    return bundled


def _installation_for_binary(binary: Path) -> TritonInstallation:
    bundled = _bundled_installation()
    if bundled is not None and binary.resolve() == bundled.binary.resolve():
        return bundled
    # NVIDIA's layout: /opt/tritonserver/{bin,backends}
    return TritonInstallation(binary=binary, backends_dir=binary.resolve().parent.parent / "backends", bundled=False)


def prepare_backend_dir(installation: TritonInstallation, dest: Path) -> Path:
    """Assemble a writable backend directory: the server's backends, the stub, our backends.

    The bundled server ships one Python-backend stub per Python version; the one matching this
    interpreter must sit beside libtriton_python.so. Our Python-based backends (e.g.
    `onnxruntime_cpu`) need libtriton_python.so in `<dest>/python`, which this provides.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if not installation.backends_dir.is_dir():
        raise ServerStartError(f"backend directory {installation.backends_dir} of {installation.binary} does not exist.")
    for entry in installation.backends_dir.iterdir():
        target = dest / entry.name
        if entry.name == "python" and installation.bundled:
            shutil.copytree(entry, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            stub = entry.parent.parent / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}" / "triton_python_backend_stub"
            if not stub.exists():
                raise ServerStartError(f"nvidia-pytriton has no Python backend stub for Python {sys.version_info.major}.{sys.version_info.minor} ({stub}).")
            shutil.copy2(stub, target / "triton_python_backend_stub")
        elif not target.exists():
            target.symlink_to(entry)
    for backend in PROJECT_BACKENDS_DIR.iterdir():
        if (backend / "model.py").exists():
            (dest / backend.name).mkdir(exist_ok=True)
            shutil.copy2(backend / "model.py", dest / backend.name / "model.py")
    return dest


def server_environment(installation: TritonInstallation, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver: libraries first, and this venv's packages for the stub.

    The stub links libpython3.X by soname; this interpreter's own LIBDIR must come first or the
    loader may pick the system's libpython of a different patch release (then e.g.
    multiprocessing breaks inside model.py).
    """
    env = dict(os.environ if base is None else base)
    # the server takes the admin key from its restricted-API flags; its environment, which every
    # backend stub and so every model's Python code inherits, does not need to carry it
    env.pop(ADMIN_KEY_ENV, None)
    keep_onnxruntime_offline(env)  # the backend stubs load ONNX Runtime: no telemetry, no ~/.cache writes
    lib_dirs = [sysconfig.get_config_var("LIBDIR") or "", *map(str, installation.library_dirs)]
    existing = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = ":".join([d for d in lib_dirs if d] + ([existing] if existing else []))
    venv_bin = str(Path(sys.executable).parent)
    # The stub's embedded Python runs isolated (it ignores PYTHONPATH, measured: sys.flags.isolated = 1)
    # and takes its sys.prefix from the `python` first on PATH: this environment's, so the stub
    # imports the project's packages as installed here (an editable install: the checkout it maps).
    env["PATH"] = venv_bin + ":" + env.get("PATH", "")
    # The Python-backend model.py files append these entries to the stub's sys.path (so a server
    # started from another checkout, or a pod, imports that tree's `serving`, not the editable install's).
    site_paths = [p for p in sys.path if p.endswith("site-packages")]
    project_paths = [str(d) for d in SOURCE_DIRS]
    env["PYTHONPATH"] = ":".join(site_paths + project_paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


@dataclass(frozen=True)
class ServerSettings:
    """The tritonserver flags this project uses (an allow-list, not a pass-through)."""

    model_repository: Path
    backend_dir: Path
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    #: Models to load at start-up (explicit model control). Empty: load every model.
    models: tuple[str, ...] = ()
    log_verbose: int = 0
    #: e.g. {"http_restricted_api": "model-repository,shared-memory:admin-key=SECRET"}
    restricted: Mapping[str, str] = field(default_factory=dict)
    exit_timeout_secs: int = 10
    #: Latency summaries over Triton's sliding window, as (quantile, rank error) pairs: the P99 alert
    #: and the dashboard read nv_inference_request_summary_us{quantile="0.99"} (checked on 2.51).
    #: () = none. contracts.serving_spec.DEFAULT_LATENCY_SUMMARY_QUANTILES: why not Triton's own set.
    latency_summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_LATENCY_SUMMARY_QUANTILES
    #: GPU utilisation/memory metrics (the accelerator alerts and panels read them); only on a GPU
    #: host, where the launcher turns them on. Off elsewhere: without NVML they only log errors.
    gpu_metrics: bool = False
    #: A model that fails to load at start-up must not take the others down: Triton keeps serving
    #: the models that loaded (False), and the launcher reports the failed ones by name and reason.
    exit_on_error: bool = False
    #: False: /v2/health/ready means "answering requests" even when a model failed to load, so one
    #: broken model does not pull the whole server out of rotation; per-model readiness is
    #: /v2/models/<name>/ready (checked by the launcher). True: ready only when every model is.
    strict_readiness: bool = False
    #: Cap (microseconds) on Triton's long condition-variable waits, through the preloaded
    #: serving/runtime/native/cond_wait_cap.c: a lost batcher wake-up then costs at most this instead of
    #: 500 ms (docs/triton-batcher-stall.md). 0 = off. Environment, not a flag (Triton has none).
    cond_wait_cap_us: int = 10000
    #: zlib level (0-9) of the HTTP responses Triton compresses for clients that accept gzip, or "off"
    #: (uncompressed answers), through the preloaded serving/runtime/native/gzip_level.c; None =
    #: Triton's own (level 6). Environment, not a flag (Triton has none).
    http_gzip_level: int | str | None = None
    #: Triton's `--rate-limit` ("execution_count" or "off"): with it, a model's instances are
    #: scheduled by the rate-limiter priorities of its config (contracts.model_config.render_instance_groups).
    rate_limit: str = DEFAULT_RATE_LIMIT
    #: The request guard's per-input limit in bytes (`[server] max_input_bytes`; 0 = none), through
    #: SERVING_REQUEST_GUARD_MAX_INPUT_BYTES; that variable set in the launcher's environment wins.
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES

    def to_args_list(self) -> list[str]:
        args = [
            f"--model-repository={self.model_repository}",
            f"--backend-directory={self.backend_dir}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            f"--allow-gpu-metrics={'true' if self.gpu_metrics else 'false'}",
            "--allow-cpu-metrics=true",
            "--metrics-interval-ms=1000",
            f"--log-verbose={self.log_verbose}",
            f"--exit-timeout-secs={self.exit_timeout_secs}",
            f"--strict-readiness={'true' if self.strict_readiness else 'false'}",
            f"--exit-on-error={'true' if self.exit_on_error else 'false'}",
            f"--rate-limit={self.rate_limit}",
        ]
        if self.latency_summary_quantiles:
            quantiles = ",".join(f"{q:g}:{error:g}" for q, error in self.latency_summary_quantiles)
            args += ["--metrics-config=summary_latencies=true", f"--metrics-config=summary_quantiles={quantiles}"]
        if self.models:
            args.append("--model-control-mode=explicit")
            args += [f"--load-model={m}" for m in self.models]
        for flag, value in sorted(self.restricted.items()):
            args.append(f"--{flag.replace('_', '-')}={value}")
        return args


if TYPE_CHECKING:
    from serving.runtime.cpu_shares import CpuWeight


class TritonServerProcess:
    """One running tritonserver. Start, wait for readiness, stop; the log goes to a file."""

    def __init__(self, installation: TritonInstallation, settings: ServerSettings, log_path: Path,
                 extra_env: Mapping[str, str] | None = None, preexec_cpus: Sequence[int] | None = None,
                 cpu_weight: "CpuWeight | None" = None):
        self.installation = installation
        self.settings = settings
        self.log_path = Path(log_path)
        self.extra_env = dict(extra_env or {})
        self.cpus = tuple(preexec_cpus) if preexec_cpus else None
        #: serving.runtime.cpu_shares: the cgroup to join or the niceness, applied before exec
        self.cpu_weight = cpu_weight
        self.process: subprocess.Popen | None = None
        #: The Python backend's IPC regions, noted while it starts, when ready, after reloads and while
        #: it stops (`note_mapped_regions`): removed at `stop`, since a server that crashed leaves them behind.
        self.shm_regions: tuple[str, ...] = ()

    @property
    def command(self) -> list[str]:
        return [str(self.installation.binary), *self.settings.to_args_list()]

    @property
    def display_command(self) -> list[str]:
        """The command with the admin key masked: safe for messages and logs."""
        from serving.runtime.security import redact_restricted_flags

        return redact_restricted_flags(self.command)

    def start(self) -> "TritonServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        from serving.runtime.native import REQUEST_GUARD, preload_environment, restores_argv_secret
        from serving.runtime.security import keep_key_off_command_line

        env = server_environment(self.installation)
        env.update(self.extra_env)
        for name in filter(None, env.pop("SERVING_UNSET_ENV", "").split(",")):  # e.g. CUDA_VISIBLE_DEVICES for MPS clients
            env.pop(name, None)
        env, warning = preload_environment(self.settings.cond_wait_cap_us, env, gzip_level=self.settings.http_gzip_level,
                                           max_input_bytes=self.settings.max_input_bytes)
        if warning:
            print(f"[server] WARNING: {warning}", file=sys.stderr, flush=True)
        command = self.command
        if (str(REQUEST_GUARD.library) in env.get("LD_PRELOAD", "").split(":")
                and restores_argv_secret(REQUEST_GUARD.library)):
            # the guard puts the key back into Triton's arguments: /proc/<pid>/cmdline shows a decoy
            # (an older build does not: with it, Triton would expect the decoy and refuse the key)
            command, hidden = keep_key_off_command_line(command, self.settings.restricted)
            env.update(hidden)
        cpus, weight = self.cpus, self.cpu_weight

        def prepare_child() -> None:  # runs in the child between fork and exec
            raise_stack_limit(SERVER_STACK_LIMIT_BYTES)
            if cpus:
                os.sched_setaffinity(0, cpus)
            if weight is not None:  # the server and every stub it forks inherit cgroup and niceness
                from serving.runtime.cpu_shares import apply_in_child

                apply_in_child(weight)

        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=prepare_child,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, "server not started"
        return self.process.pid

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ServerStartError(
                    f"tritonserver exited with code {self.process.returncode} during start-up.\n"
                    f"Command: {' '.join(self.display_command)}\nLast lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            # noted while it loads too: stopped or crashed before ready, it leaves them behind (3-11 regions
            # of 1 MiB per `serve --timeout` that expired mid-load: a review, 2026-12-07)
            self.note_mapped_regions()
            if server_ready(self.settings.host, self.settings.http_port, self.settings.metrics_port):
                self.note_mapped_regions()
                return
            time.sleep(0.25)
        self.stop()
        raise ServerStartError(
            f"tritonserver was not ready after {timeout:.0f} s on {self.settings.host}:{self.settings.http_port}.\n"
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def note_mapped_regions(self) -> None:
        """Add the /dev/shm regions the server maps now to those `stop` removes (a killed server, or one
        that exits while loading, unmaps regions without unlinking them). Its supervisor calls this too."""
        self.shm_regions = with_mapped_regions(self.shm_regions, self.process.pid)

    def stop(self, timeout: float = 20.0, stubs_at_stop: int | None = None) -> None:
        """serving.runtime.stub_watch.stop_server_group: SIGTERM, then SIGKILL after `timeout` or
        once the server has outlived all its backend stubs."""
        if self.process is None:
            return
        if self.process.poll() is None:
            # its group's leftovers too; the regions it maps now (reloads map new ones) and while it exits
            self.shm_regions = stop_server_group(self.process.pid, timeout, stubs_at_stop, self.shm_regions)
            self.process.wait(timeout=5)
        else:
            kill_process_group(self.process.pid)  # the stubs of a server that crashed live on otherwise
        remove_server_leftovers(self.process.pid, self.shm_regions)


#: Triton 2.51's HTTP server needs about twice an HTTP request body's size of thread stack
#: (upstream issue triton-inference-server/server#5840; measured here: with the default 8 MiB
#: stack a 4 MiB body kills the server with SIGSEGV, with 64 MiB a 32 MiB body does). Threads take
#: their stack size from RLIMIT_STACK, so the launcher raises it: 256 MiB per thread is address
#: space, not memory (RSS is unchanged), and lets bodies up to ~100 MiB be answered normally.
SERVER_STACK_LIMIT_BYTES = 256 << 20


def raise_stack_limit(target_bytes: int) -> None:
    """Set this process's soft RLIMIT_STACK to `target_bytes` when it is lower or unlimited (glibc
    gives threads a fixed default then), never above the hard limit. Called between fork and exec,
    so it only imports at module level."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    wanted = target_bytes if hard == resource.RLIM_INFINITY else min(target_bytes, hard)
    if soft == resource.RLIM_INFINITY or soft < wanted:
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))


