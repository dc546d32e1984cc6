"""Start and stop the supervisor (`python -m serving supervise`) as a background process, and read
its state file (run/supervisor.json): what `make serve`, `make stop` and `make status` use.

The supervisor itself (the process that owns the tritonservers) is `serving.runtime.supervisor`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from contracts.errors import ServerStartError
from contracts.layout import RunLayout
from serving.runtime.launcher import stop_mps_daemon
from serving.runtime.stub_watch import stop_server_group
from contracts.manifest import Manifest, read_manifest
from contracts.processes import log_tail, pid_alive
from contracts.shared_memory import remove_server_leftovers
from contracts.supervisor_state import SupervisorState, read_supervisor_state as read_state_file, write_supervisor_state


def read_supervisor_state(layout: RunLayout) -> SupervisorState | None:
    """The run's run/supervisor.json (None before the supervisor first writes it)."""
    return read_state_file(layout.supervisor_state)


def _arguments(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _names_path(pid: int, arguments: Sequence[str], flag: str, expected: Path) -> bool:
    """`flag PATH` or `flag=PATH` among a process's arguments names `expected` (a relative path read
    from the process's own working directory)."""
    values = [b for a, b in zip(arguments, arguments[1:]) if a == flag]
    values += [a.split("=", 1)[1] for a in arguments if a.startswith(f"{flag}=")]
    for value in values:
        path = Path(value)
        if not path.is_absolute():
            try:
                path = Path(os.readlink(f"/proc/{pid}/cwd")) / path
            except OSError:
                continue
        if os.path.realpath(path) == os.path.realpath(expected):
            return True
    return False


def is_run_supervisor(pid: int | None, layout: RunLayout) -> bool:
    """A live `serving supervise` of THIS run folder. A pid in run/ may have been reused since (a
    reboot, a supervisor killed with SIGKILL): another checkout's supervisor, or anything else, is
    never signalled."""
    arguments = _arguments(pid) if pid and pid_alive(pid) else []
    return "supervise" in arguments and _names_path(pid, arguments, "--run-dir", layout.run_dir)


def is_run_server(pid: int | None, layout: RunLayout) -> bool:
    """A live tritonserver started for THIS run folder (its backend directory is the run's copy)."""
    arguments = _arguments(pid) if pid and pid_alive(pid) else []
    return any("tritonserver" in a for a in arguments[:2]) and _names_path(pid, arguments, "--backend-directory", layout.backends)


@contextlib.contextmanager
def starting_alone(layout: RunLayout) -> Iterator[None]:
    """Held by one `serve` of a run folder from its check for a running supervisor until its
    supervisor is ready (or has failed): two `make serve` at once both found no supervisor, both
    started one, and the second cleared the first's state as stale. The lock dies with its process.
    A run folder that cannot be written (read-only, full) is said in one line, not a traceback."""
    try:
        layout.run_dir.mkdir(parents=True, exist_ok=True)
        lock = open(layout.serve_lock, "a+")
    except OSError as exc:
        raise ServerStartError(f"run folder {layout.run_dir} cannot be written ({exc.strerror or exc}): the server keeps "
                               f"its pids, logs and manifest there; choose another with --run-dir, or free space.") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise ServerStartError(f"another `serve` (pid {holder}) is starting the servers of {layout.run_dir}; "
                                   f"wait for it to finish, or run {layout.stop_command}.") from None
        try:
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
        except OSError as exc:
            raise ServerStartError(f"run folder {layout.run_dir} cannot be written ({exc.strerror or exc}): the server "
                                   f"keeps its pids, logs and manifest there; choose another with --run-dir, or free "
                                   f"space.") from None
        yield


def start_supervisor(config: Path, repository: Path, layout: RunLayout, timeout_s: float = 180.0,
                     extra_args: Sequence[str] = ()) -> Manifest:
    """Start `python -m serving supervise` in its own session; return the manifest once all are ready."""
    with starting_alone(layout):
        return _start_supervisor(config, repository, layout, timeout_s, extra_args)


def _start_supervisor(config: Path, repository: Path, layout: RunLayout, timeout_s: float,
                      extra_args: Sequence[str]) -> Manifest:
    existing = read_supervisor_state(layout)
    if existing and is_run_supervisor(existing.supervisor_pid, layout):
        raise ServerStartError(f"a supervisor is already running (pid {existing.supervisor_pid}); run {layout.stop_command} first.")
    for line in clear_stale_run(layout):
        print(f"[serve] {line}", flush=True)
    layout.logs.mkdir(parents=True, exist_ok=True)
    # the logs are appended to by every run: a failure shows this run's lines, not an earlier run's
    # (a port held by another process was reported with the tails of the run before: a review, 2026-12-07)
    offsets = {log.name: log.stat().st_size for log in layout.logs.glob("*.log")}
    command = [sys.executable, "-m", "serving", "supervise", "--config", str(config), "--repository", str(repository),
               "--run-dir", str(layout.run_dir), *extra_args]
    with open(layout.supervisor_log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    layout.supervisor_pid.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = read_supervisor_state(layout)
        if state and state.status == "ready":
            return read_manifest(layout.manifest)
        if process.poll() is not None or (state and state.status == "failed"):
            process.wait(timeout=60)
            raise ServerStartError(_failure_report(layout, state, offsets))
        time.sleep(0.25)
    stop_supervisor(layout)
    raise ServerStartError(f"partitions were not ready within {timeout_s:.0f} s.\n"
                           + _failure_report(layout, read_supervisor_state(layout), offsets))


def clear_stale_run(layout: RunLayout) -> list[str]:
    """Before a new start: what a supervisor that died (SIGKILL, out of memory) left behind. Its
    partition servers run in their own sessions and outlive it, and run/supervisor.json is the only
    record of them: stop them first (deleting the file alone left them holding their ports, every
    later `make serve` failing and `make stop` finding nothing). What it did, for the caller to print."""
    done = stop_supervisor(layout) if read_supervisor_state(layout) else []
    layout.supervisor_state.unlink(missing_ok=True)
    return done


def _failure_report(layout: RunLayout, state: SupervisorState | None, offsets: Mapping[str, int] | None = None) -> str:
    """The supervisor's error and the tails of this run's logs (`offsets`: each log's size at its start)."""
    offsets = offsets or {}

    def tail(path: Path) -> str:
        return log_tail(path, 15, offsets.get(Path(path).name, 0))

    lines = [f"supervisor: {(state.error if state else None) or 'exited'}", f"--- {layout.supervisor_log} (tail)",
             tail(layout.supervisor_log)]
    for name in (state.partitions if state else {}):
        lines += [f"--- {layout.partition_log(name)} (tail)", tail(layout.partition_log(name))]
    return "\n".join(lines)


def _stop_left_behind(pid: int) -> None:
    """Stop a partition server its supervisor left running (it died), and remove what the server leaves
    in /dev/shm when its stop ends in SIGKILL. The supervisor does both for the servers it stops itself;
    these were left, 1 MiB and more a region, at every start after a killed supervisor (a review, 2026-12-07)."""
    remove_server_leftovers(pid, stop_server_group(pid))


def stop_supervisor(layout: RunLayout, timeout_s: float = 60.0) -> list[str]:
    """Stop the supervisor (it stops its servers), then anything it left behind. Returns what it did."""
    done = []
    try:
        pid = int(layout.supervisor_pid.read_text().strip())
    except (FileNotFoundError, ValueError):
        pid = None
    if is_run_supervisor(pid, layout):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while is_run_supervisor(pid, layout) and time.monotonic() < deadline:
            time.sleep(0.1)
        if is_run_supervisor(pid, layout):
            os.kill(pid, signal.SIGKILL)
            done.append(f"supervisor (pid {pid}) did not stop in {timeout_s:.0f} s: killed")
        else:
            done.append(f"stopped the supervisor (pid {pid}) and its partitions")
    state = read_supervisor_state(layout)
    for name, part in (state.partitions if state else {}).items():
        if is_run_server(part.pid, layout):
            _stop_left_behind(part.pid)
            done.append(f"stopped partition {name} (pid {part.pid}) left behind")
    if state and state.mps_started and stop_mps_daemon(layout):
        done.append("stopped the CUDA MPS control daemon")
    if state and state.running and not is_run_supervisor(state.supervisor_pid, layout):
        # its supervisor died without saying so (SIGKILL, a reboot): `status` kept reading "running"
        try:
            write_supervisor_state(dataclasses.replace(state, status="stopped"), layout.supervisor_state)
            done.append(f"marked {layout.supervisor_state} stopped (its supervisor, pid {state.supervisor_pid}, was gone)")
        except OSError as exc:
            done.append(f"could not mark {layout.supervisor_state} stopped ({exc.strerror or exc})")
    for path in (layout.supervisor_pid, layout.manifest):
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:  # a read-only run folder: what was stopped is stopped; say what is left
            done.append(f"could not remove {path} ({exc.strerror or exc}): remove it by hand")
    return done
