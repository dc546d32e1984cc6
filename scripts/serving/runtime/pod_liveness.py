"""A Kubernetes pod's liveness check (deploy/k8s_deploy renders it as the container's exec probe).

Live means: the server answers `/v2/health/live`, and every ready model on a Python-based backend has
the backend stubs its served config asks for. Why the stubs: when one dies (a native crash, a
single-process OOM kill), Triton 2.51 keeps the model READY, answers health checks as before and
fails every request that reaches the dead instance ("Stub process ... is not healthy"). On a host
the supervisor's stub watch reloads the model (serving.runtime.stub_watch); a pod has no supervisor,
so the pod's check fails and the kubelet restarts the container, which a Ready pod failing a share
of its requests for ever would never get. A model that is not ready is the readiness probe's
concern, not this one's.

`missing_stubs` is pure; `check` reads /proc and asks the server (open APIs only: no admin key)
with the host's own calls: the supervisor's liveness probe (`serving.runtime.liveness.probe_live`)
and the launcher's readiness and config reads (`serving.runtime.model_readiness`).
Standard library and the project's own modules only: it runs under the Triton image's python3.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from contracts.processes import proc_stat_fields
from serving.runtime.liveness import LIVE_PATH, probe_live
from serving.runtime.model_readiness import model_readiness, served_model_config
from serving.runtime.stub_processes import expected_stub_count, python_based_backends, scan_stubs

SERVER_PROGRAM = "tritonserver"


def missing_stubs(expected: Mapping[str, int], live: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """{model: (live, expected)} for each model with fewer live stubs than its config's instances."""
    return {m: (live.get(m, 0), n) for m, n in expected.items() if live.get(m, 0) < n}


def find_server_pid(proc: Path = Path("/proc")) -> int | None:
    """The tritonserver of this container (PID 1 in a pod: the shell execs it): the lowest pid named so."""
    pids = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == SERVER_PROGRAM:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return min(pids) if pids else None


def check(http_port: int, models: Sequence[str], backends_dir: Path, server_pid: int | None,
          host: str = "127.0.0.1", timeout_s: float = 1.5) -> list[str]:
    """What is wrong (empty: live). `timeout_s` bounds the whole check: only an unanswered
    /v2/health/live fails it; a model whose readiness or config is not read in time is judged at the
    next check (a busy server must not be restarted for being slow to say how its stubs are)."""
    deadline = time.monotonic() + timeout_s
    unanswered = probe_live(host, http_port, timeout_s)
    if unanswered is not None:
        return [f"http://{host}:{http_port}{LIVE_PATH}: {unanswered}"]
    pid = server_pid or find_server_pid()
    if pid is None:
        return [f"no {SERVER_PROGRAM} process found in /proc"]
    try:
        group = int(proc_stat_fields(Path(f"/proc/{pid}/stat").read_text())[2])
    except (OSError, ValueError, IndexError):
        return [f"{SERVER_PROGRAM} pid {pid} is gone"]
    python_backends = python_based_backends(backends_dir)
    expected = {}
    left = lambda: max(0.01, deadline - time.monotonic())
    for model in models:
        if model_readiness(host, http_port, model, left()) is not True:
            continue  # not ready: the readiness probe's concern; unanswered in time: the next check's
        try:
            expected[model] = expected_stub_count(served_model_config(host, http_port, model, left()), python_backends)
        except (OSError, ValueError):  # urllib's errors are OSErrors
            continue  # a model whose config cannot be read now is judged at the next check
    live: dict[str, int] = {}
    for stub in scan_stubs(group):
        live[stub.model] = live.get(stub.model, 0) + 1
    return [f"model {m} has {n} of its {want} backend stub(s): requests reaching the missing instance fail "
            f"(\"Stub process ... is not healthy\")" for m, (n, want) in sorted(missing_stubs(expected, live).items())]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.runtime.pod_liveness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="the server's HTTP port")
    parser.add_argument("--models", required=True, help="the partition's models, comma-separated")
    parser.add_argument("--backends", type=Path, required=True, help="Triton's backend directory (which backends run stubs)")
    parser.add_argument("--server-pid", type=int, help="default: the container's tritonserver process")
    parser.add_argument("--timeout-s", type=float, default=1.5, help="per HTTP call")
    args = parser.parse_args(argv)
    problems = check(args.port, [m for m in args.models.split(",") if m], args.backends, args.server_pid,
                     timeout_s=args.timeout_s)
    for problem in problems:
        print(f"[liveness] {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
