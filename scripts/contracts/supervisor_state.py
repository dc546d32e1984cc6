"""run/supervisor.json: what the supervisor knows of each partition (process, state, restarts,
restart budget, backend stubs). Written by the supervisor on every transition, read by
`make serve` (start-up wait and failure report), `make stop` (what was left behind), `make status`,
the supervisor's own metrics endpoint and the tests, all through `SupervisorState`.

Why a typed file: five readers used to pick keys out of the raw dict, each with its own idea of
what may be missing (`part.get("restarts_in_window", 0)` in one place, `part["pid"]` in another).
`SupervisorState.from_dict` says once what the file holds and names what is wrong with a broken one.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from contracts.errors import ServingError
from contracts.layout import write_text_atomically

#: Every state a partition can be in (serving.runtime.supervisor.PartitionState values).
PARTITION_STATES = ("starting", "ready", "backoff", "crash_loop", "failed", "stopped")


class SupervisorStateError(ServingError):
    """run/supervisor.json is not of the form the supervisor writes."""


@dataclass(frozen=True)
class StubSummary:
    """One model's Python-backend stubs as the supervisor watches them (serving.runtime.stub_watch)."""

    expected: int = 0
    pids: tuple[int, ...] = ()
    status: str = "watching"
    reloads: int = 0
    attempts: int = 0
    last_reason: str | None = None
    leftover_pids: tuple[int, ...] = ()

    @property
    def eventful(self) -> bool:
        """Reloaded at least once, or in any status but plain watching: worth a `make status` line."""
        return bool(self.reloads) or self.status != "watching"


@dataclass(frozen=True)
class PartitionStatus:
    """One partition's tritonserver: pid, supervisor state, restarts and the restart budget."""

    pid: int | None = None
    state: str = "starting"
    restarts: int = 0
    last_exit: str | None = None
    models_ready: Mapping[str, bool] = field(default_factory=dict)
    stubs: Mapping[str, StubSummary] = field(default_factory=dict)
    crash_loop: bool = False
    crash_loops: int = 0
    restarts_in_window: int = 0
    restart_budget: int = 0
    window_s: float = 0.0
    #: Seconds to the next start attempt, only while waiting (backoff or crash loop).
    next_attempt_in_s: float | None = None
    #: The cores the partition may use now (elastic CPU sets move them with the load).
    cpus_now: tuple[int, ...] = ()

    @property
    def failed_models(self) -> list[str]:
        return sorted(m for m, ok in self.models_ready.items() if not ok)


@dataclass(frozen=True)
class SupervisorState:
    supervisor_pid: int
    status: str = "starting"
    error: str | None = None
    mechanism: str = "unknown"
    mps_started: bool = False
    partitions: Mapping[str, PartitionStatus] = field(default_factory=dict)
    updated_at: float = 0.0

    @property
    def running(self) -> bool:
        """Not ended: `stopped` and `failed` are the supervisor's last words."""
        return self.status not in ("stopped", "failed")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "supervisor state") -> "SupervisorState":
        if not isinstance(data, Mapping) or not isinstance(data.get("supervisor_pid"), int):
            raise SupervisorStateError(f"{source} is not a supervisor state: expected a JSON object with an integer "
                                       f"`supervisor_pid`, `status` and `partitions` {{name: {{pid, state, restarts, ...}}}}.")
        try:
            partitions = {str(name): _partition(entry, f"{source}: partition {name!r}")
                          for name, entry in (data.get("partitions") or {}).items()}
        except (AttributeError, TypeError, ValueError) as exc:  # a hand-edited or foreign file: a key of another type
            raise SupervisorStateError(f"{source}: {type(exc).__name__}: {exc}; expected the objects the supervisor writes: "
                                       "`partitions` {name: {pid, state, restarts, stubs: {model: {...}}, models_ready: "
                                       "{model: bool}, cpus_now: [core, ...]}} (`make stop` and `make serve` write it anew).") from None
        return cls(**{**_known(cls, data), "partitions": partitions})


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of `data` that are fields of `cls`: a newer writer may add keys an older reader ignores."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _partition(entry: Any, source: str) -> PartitionStatus:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("state", ""), str):
        raise SupervisorStateError(f"{source} is not a partition entry: expected an object with `pid`, `state` "
                                   f"(one of {list(PARTITION_STATES)}), `restarts`.")
    stubs = {str(m): StubSummary(**{**_known(StubSummary, s), "pids": tuple(s.get("pids") or ()),
                                    "leftover_pids": tuple(s.get("leftover_pids") or ())})
             for m, s in (entry.get("stubs") or {}).items()}
    return PartitionStatus(**{**_known(PartitionStatus, entry), "stubs": stubs,
                              "models_ready": dict(entry.get("models_ready") or {}),
                              "cpus_now": tuple(entry.get("cpus_now") or ())})


def write_supervisor_state(state: SupervisorState, path: Path) -> Path:
    """Write atomically: `make status` and the start-up wait read it while the supervisor runs."""
    return write_text_atomically(Path(path), json.dumps(state.as_dict(), indent=2, sort_keys=True))


def read_supervisor_state(path: Path) -> SupervisorState | None:
    """The last state written, or None when there is none yet (or it is being replaced right now)."""
    try:
        data = json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return SupervisorState.from_dict(data, str(path))
