"""Which processes are a server's Python-backend stubs, and how many a model should have.

Apart from the supervisor's stub watch (serving.runtime.stub_watch), because a pod's liveness check
(serving.runtime.pod_liveness) uses them too and runs under the Triton image's Python 3.10: this
module imports only the standard library and contracts.processes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from contracts.processes import proc_stat_fields

STUB_PROGRAM = "triton_python_backend_stub"


# --- which processes are stubs, and of which model ---------------------------------------------

@dataclass(frozen=True)
class StubProcess:
    """One live Python-backend stub of a server's process group."""

    pid: int
    model: str
    #: Triton's instance name ("digit_classifier_0_1"), for log lines; "" when not on the command line.
    instance: str = ""
    #: Stopped (SIGSTOP, state T; or t, traced): alive, but it answers nothing, and Triton fails every
    #: request its instance gets ("Stub process ... is not healthy") until the model is reloaded.
    stopped: bool = False


def parse_stub(pid: int, stat: str, cmdline: bytes) -> tuple[int, StubProcess | None]:
    """(process group, the stub) from /proc/<pid>/stat and /proc/<pid>/cmdline; the stub is None
    for another program and for a dead stub (zombie: its cmdline is empty, its state Z)."""
    fields = proc_stat_fields(stat)
    state, pgid = fields[0], int(fields[2])
    argv = [a.decode(errors="replace") for a in cmdline.split(b"\0")]
    if state in ("Z", "X") or len(argv) < 2 or Path(argv[0]).name != STUB_PROGRAM or not argv[1].endswith(".py"):
        return pgid, None
    model = Path(argv[1]).parent.parent.name  # <repository>/<model>/<version>/model.py
    return pgid, StubProcess(pid, model, argv[8] if len(argv) > 8 else "", stopped=state in ("T", "t"))


def scan_stubs(process_group: int, proc: Path = Path("/proc")) -> tuple[StubProcess, ...]:
    """The live stubs in `process_group` (a partition server is its group's leader)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            pgid, stub = parse_stub(int(entry.name), (entry / "stat").read_text(), (entry / "cmdline").read_bytes())
        except (OSError, ValueError, IndexError):  # gone meanwhile, or unreadable
            continue
        if stub is not None and pgid == process_group:
            found.append(stub)
    return tuple(sorted(found, key=lambda s: s.pid))


# --- how many stubs a model should have ----------------------------------------------------------

def python_based_backends(backends_dir: Path) -> frozenset[str]:
    """Backends whose models run in stubs: `python`, and every backend directory with a model.py."""
    found = {"python"}
    if Path(backends_dir).is_dir():
        found |= {d.name for d in Path(backends_dir).iterdir() if (d / "model.py").is_file()}
    return frozenset(found)


def expected_stub_count(config: Mapping[str, Any], python_backends: Iterable[str]) -> int:
    """Stubs a loaded model runs, from its served config (Triton's JSON): one per instance of a
    Python-based backend; 0 for an ensemble or a native backend. A KIND_GPU group has `count`
    instances on each of its GPUs."""
    if config.get("platform") == "ensemble" or config.get("backend") not in set(python_backends):
        return 0
    total = 0
    for group in config.get("instance_group") or [{"count": 1}]:
        count = int(group.get("count", 1))
        gpus = group.get("gpus") or []
        total += count * (len(gpus) if group.get("kind") == "KIND_GPU" and gpus else 1)
    return total
