"""Process and port helpers every part of the project uses (servers, peers, Prometheus, tests).

Why here: the serving runtime, the perf suites, the monitor and the tests all start processes on
free loopback ports and stop them by process group; one copy keeps their semantics equal (a
SIGTERM to the group first, then SIGKILL; ports held open together so they are distinct).
"""
from __future__ import annotations

import errno
import http.client
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable


def free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel just handed out on 127.0.0.1, held open together so they are distinct."""
    import socket

    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


#: What a failed HTTP exchange raises besides URLError/OSError: a listener that does not speak HTTP
#: (a gRPC port) or a server killed mid-answer gives a bad status line or a short body.
HTTP_PROTOCOL_ERRORS = (http.client.HTTPException,)


def ports_in_use(host: str, ports: Iterable[int]) -> list[int]:
    """Those of `ports` that a listening socket on `host` already holds: a bind test with
    SO_REUSEADDR, as servers bind (a port a stopped server left in TIME_WAIT counts as free)."""
    import socket

    busy = []
    for port in ports:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:  # not a local address, a name that does not resolve, ...
                    raise OSError(exc.errno, f"cannot listen on {host}:{port} ({exc.strerror or exc}): expected "
                                             f"an address of this machine, such as 127.0.0.1 or 0.0.0.0") from None
                busy.append(port)
    return busy


def _answers_200(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, OSError, *HTTP_PROTOCOL_ERRORS):
        return False


def http_ready(host: str, port: int, timeout: float = 1.0) -> bool:
    """Triton's HTTP readiness endpoint answers 200 (the server and its startup models are ready)."""
    return _answers_200(f"http://{host}:{port}/v2/health/ready", timeout)


def server_ready(host: str, http_port: int, metrics_port: int | None, timeout: float = 1.0) -> bool:
    """Ready on every endpoint a manifest lists: HTTP readiness, and the metrics endpoint when the
    server has one. Why both: Triton starts its metrics service after the HTTP service (tens of ms
    later, seen in its log), so a scrape right after HTTP readiness can be refused (a test did)."""
    return http_ready(host, http_port, timeout) and (
        metrics_port is None or _answers_200(f"http://{host}:{metrics_port}/metrics", timeout))


def log_tail(path: Path, lines: int = 40, since_byte: int = 0) -> str:
    """The last `lines` lines of a log, of what was written after its first `since_byte` bytes (a log
    appended to by every run: this run's part only)."""
    try:
        with open(path, "rb") as log:
            log.seek(since_byte)
            text = log.read().decode(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    if not text.strip() and since_byte:
        return "(nothing written in this run)"
    return "\n".join(text.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pid(pid: int, timeout: float = 20.0, nothing_left_to_finish: Callable[[], bool] | None = None) -> None:
    """SIGTERM the server's process group (it owns its backend stubs), then SIGKILL if it lingers;
    once the leader is gone, whatever is left of its group is killed (`kill_process_group`).

    `nothing_left_to_finish`, polled while the group has `timeout` to exit after SIGTERM: True
    means the process can only be waiting for something that will never come, so SIGKILL follows
    at once (e.g. a tritonserver whose every stub has exited: `serving.runtime.stub_watch.stop_server_group`)."""
    _stop_group_leader(pid, timeout, nothing_left_to_finish)
    kill_process_group(pid)


def _stop_group_leader(pid: int, timeout: float, nothing_left_to_finish: Callable[[], bool] | None) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                waited, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                waited = 0
                if not pid_alive(pid):
                    return
            if waited == pid:
                return
            if sig == signal.SIGTERM and nothing_left_to_finish is not None and nothing_left_to_finish():
                break
            time.sleep(0.1)


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid`, its leader included if it still runs; nothing if the group
    is gone. Why after the leader has exited too: a tritonserver that crashed (or was stopped) leaves
    any Python-backend stub still running in its group as an orphan, and nothing else ever stops it
    (2026-12-06: eight LLM stubs of crashed test servers, 1.5-1.7 GB each, were still running 45
    minutes later). The group's id cannot be reused while a member is left, so this reaches only that
    server's processes."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def proc_stat_fields(stat_text: str) -> list[str]:
    """The fields of a /proc/<pid>[/task/<tid>]/stat line after the command name (state first, the
    process group third, user and system clock ticks at 11 and 12): the name is in parentheses
    and may hold spaces and parentheses itself, so the line is split after its last ')'."""
    return stat_text.rsplit(")", 1)[-1].split()


def cpu_ticks(stat_text: str) -> int:
    """User + system clock ticks of a process or thread, from its /proc stat line."""
    fields = proc_stat_fields(stat_text)
    return int(fields[11]) + int(fields[12])


def cpu_idle_and_total(proc_stat: str) -> dict[str, tuple[int, int]]:
    """Per `cpu` line of /proc/stat ("cpu" for all CPUs, "cpu0", "cpu1", ...): (idle, total) clock
    ticks since boot. Idle counts iowait too (a core waiting for I/O could run a thread); total is
    user nice system idle iowait irq softirq steal (guest time is inside user)."""
    times = {}
    for line in proc_stat.splitlines():
        if line.startswith("cpu"):
            name, *ticks = line.split()
            values = [int(v) for v in ticks[:8]]
            times[name] = (values[3] + (values[4] if len(values) > 4 else 0), sum(values))
    return times


def own_memory_bytes(field_name: str) -> int:
    """A memory figure of this process from /proc/self/status (`VmRSS`, `VmHWM`: the peak resident set),
    in bytes: the build's batch-memory probe and the LLM's engine probe read the same lines."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field_name}: expected a Linux kernel")
