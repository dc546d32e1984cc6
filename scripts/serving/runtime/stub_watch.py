"""Heal a model whose Python-backend stub process died: find it, reload the model, bound the tries.

Each instance of a model on a Python-based backend (`onnxruntime_cpu`, the Python tokenizer) is one
`triton_python_backend_stub` process in its server's process group. When one dies (native crash,
OOM kill), Triton 2.51 keeps the model READY but fails every request that instance gets ("Stub
process '<instance>' is not healthy") until the model is reloaded; health endpoints say nothing.
- Detection, every liveness interval: the live stubs of the group, each named by its cmdline
  (argv[1] = `<repository>/<model>/<version>/model.py`). The first scan after the server is ready
  is each model's *generation*; the model lost a stub when a pid of it is gone (or a zombie), or
  when it has fewer stubs than the served config's instances (`GET /v2/models/<m>/config`). New
  stubs (a load in progress) trigger nothing; a generation wholly replaced by enough new stubs was
  reloaded by someone else, and the new pids are adopted.
- Action: reload through the key-protected repository API within a timeout. Triton 2.51 ignores a
  load of an unchanged model (200 in 3 ms, dead stub left), so the served config goes back as an
  override with the parameter `serving_stub_reload` = attempt number (backends ignore it). The old
  instances answer until the new ones are loaded (~2 s for digit_classifier here). Once requests
  have reached the dead stub, Triton never finalizes the old version: its surviving stubs are
  SIGKILLed after LEFTOVER_GRACE_S. Stopping such a server would then wait Triton's whole exit
  timeout for that version to unload; `StubDrainWatch` ends the wait once every stub has gone.
- Bounds: max_restarts reloads per model in window_s (RestartPolicy). Past that the model is left
  alone (`gave_up`, one error line), so a crash-looping model does not take its partition's other
  models down with repeated restarts. A reload that fails restarts the partition (usual path and
  budget). A model Triton reports not ready (unloaded by an operator) is left until its stubs run.
- Key: the header each server was started with (from its restricted-API flag, so a one-off key
  works too); without one, one line says what to do (`no_key`).
`observe`, `after_reload`, `stale_leftovers` are the pure decisions on frozen `ModelStubs`;
`PartitionStubWatch` is the supervisor's per-partition bookkeeping; `reload_model` asks the server;
which processes are stubs, and how many a model should have: serving.runtime.stub_processes.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Iterable, Mapping

from contracts.errors import ConfigError
from contracts.processes import stop_pid
from contracts.shared_memory import with_mapped_regions
from contracts.supervisor_state import StubSummary
from serving.runtime.model_readiness import model_readiness, served_model_config
from serving.runtime.stub_processes import StubProcess, expected_stub_count, scan_stubs

log = logging.getLogger("serving.runtime.supervisor")
#: Config parameter that makes each reload's config differ from the served one (Triton skips a
#: load whose config and files are unchanged). Backends ignore parameters they do not read.
RELOAD_MARKER_PARAMETER = "serving_stub_reload"
#: The replaced instances' stubs normally exit 1.5-2.5 s after a reload (measured here). Once
#: requests have reached the dead stub, Triton 2.51 never finalizes the old version: its other stubs
#: keep running (and holding their model's memory) until the server stops. Past this grace the
#: supervisor SIGKILLs them.
LEFTOVER_GRACE_S = 10.0
#: After SIGTERM, Triton unloads its models (each model's stubs exit) and checks once a second
#: whether any is still live, so a server exits about a second after its last stub. One that
#: outlives its last stub by this much waits for a model version with no stub left to finalize
#: it, which never unloads (above): measured here, 10 s (`--exit-timeout-secs`) on every such stop.
STUBLESS_EXIT_GRACE_S = 3.0


class StubDrainWatch:
    """Whether a stopping server can only be waiting for a model that will never unload: it had
    stubs when the stop began (a server without Python-based models, e.g. TensorRT on a GPU host,
    never qualifies) and none has been alive for `grace_s`. Pure: fed the stub counts it is shown."""

    def __init__(self, stubs_at_stop: int, now: float, grace_s: float = STUBLESS_EXIT_GRACE_S):
        self.had_stubs, self.grace_s, self.last_stub_seen = stubs_at_stop > 0, grace_s, now

    def nothing_left(self, stubs_alive: int, now: float) -> bool:
        if stubs_alive:
            self.last_stub_seen = now
        return self.had_stubs and not stubs_alive and now - self.last_stub_seen >= self.grace_s


def stop_server_group(pid: int, timeout: float = 20.0, stubs_at_stop: int | None = None,
                      noted_regions: tuple[str, ...] = ()) -> tuple[str, ...]:
    """SIGTERM a tritonserver's process group, SIGKILL after `timeout`, or as soon as the server has
    outlived all its backend stubs (`StubDrainWatch`; a version that can no longer unload would
    otherwise hold it for its whole exit timeout). `stubs_at_stop`: its stub count when a caller
    already sent SIGTERM (default: counted now). Returns `noted_regions` and the /dev/shm regions the
    server mapped now and at each scan while it exited (a server stopped while it loads models goes on
    making them, and SIGKILL leaves them behind): the caller removes them
    (contracts.shared_memory.remove_server_leftovers)."""
    regions = with_mapped_regions(noted_regions, pid)
    drain = StubDrainWatch(len(scan_stubs(pid)) if stubs_at_stop is None else stubs_at_stop, time.monotonic())
    next_scan = 0.0

    def nothing_left_to_finish() -> bool:
        nonlocal next_scan, regions
        now = time.monotonic()
        if now < next_scan:
            return False
        next_scan = now + 0.5  # a /proc scan costs a few ms
        regions = with_mapped_regions(regions, pid)
        if not drain.nothing_left(len(scan_stubs(pid)), now):
            return False
        log.warning("tritonserver pid %d outlived its last backend stub by %.0f s after SIGTERM (a model version whose "
                    "stub died can never unload in Triton 2.51): killed instead of waiting its exit timeout",
                    pid, now - drain.last_stub_seen)
        return True

    stop_pid(pid, timeout, nothing_left_to_finish)
    return regions


def pids_of(model: str, stubs: Iterable[StubProcess]) -> frozenset[int]:
    return frozenset(s.pid for s in stubs if s.model == model)


def reload_config(config: Mapping[str, Any], attempt: int) -> dict[str, Any]:
    """The served config with RELOAD_MARKER_PARAMETER set to `attempt` (a new dict)."""
    parameters = dict(config.get("parameters") or {})
    parameters[RELOAD_MARKER_PARAMETER] = {"string_value": str(attempt)}
    return {**config, "parameters": parameters}


def repository_api_headers(restricted: Mapping[str, str]) -> dict[str, str] | None:
    """Headers for the server's model-repository API, from its restricted-API settings
    (`ServerSettings.restricted`, "<apis>:<header>=<key>" as serving.runtime.security writes it): {} when
    that API is open, None when it is locked and the key cannot be read from the setting."""
    value = restricted.get("http_restricted_api")
    if not value:
        return {}
    apis, _, header_key = value.partition(":")
    if "model-repository" not in apis.split(","):
        return {}
    header, _, key = header_key.partition("=")
    return {header: key} if header and key else None


# --- the decisions --------------------------------------------------------------------------------

class StubStatus(str, Enum):
    WATCHING = "watching"
    RELOADING = "reloading"
    #: Triton said the model is not ready (an operator unloaded it?): left alone until its stubs run.
    NOT_READY = "not_ready"
    #: The reload budget is spent: its requests fail until an operator acts.
    GAVE_UP = "gave_up"
    #: The supervisor holds no key for the server's repository API.
    NO_KEY = "no_key"


class Action(str, Enum):
    NONE = "none"
    RELOAD = "reload"
    GIVE_UP = "give_up"
    NO_KEY = "no_key"
    #: Someone else reloaded the model: its new stubs became the generation.
    ADOPT = "adopt"
    RELOADED = "reloaded"
    NOT_READY = "not_ready"
    #: The reload failed: the partition is restarted.
    RESTART_PARTITION = "restart_partition"


@dataclass(frozen=True)
class Decision:
    action: Action
    detail: str = ""


@dataclass(frozen=True)
class ModelStubs:
    """Stub bookkeeping of one model in one partition (times are time.monotonic() seconds)."""

    model: str
    #: Stubs its served config asks for (instances of a Python-based backend).
    expected: int
    #: Pids of its current instances; empty: the next scan sets them.
    generation: frozenset[int] = frozenset()
    status: StubStatus = StubStatus.WATCHING
    #: When reloads were started (the budget counts those within the window).
    reload_times: tuple[float, ...] = ()
    #: Reload attempts since the supervisor started (the marker's value) and successful reloads.
    attempts: int = 0
    reloads: int = 0
    last_reason: str | None = None
    #: While reloading: the model's live stubs when the reload started (not the new generation).
    before: frozenset[int] = frozenset()
    #: After a reload: the replaced instances' stubs still running, and since when (see LEFTOVER_GRACE_S).
    leftovers: frozenset[int] = frozenset()
    leftovers_since: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.expected, bool) or not isinstance(self.expected, int) or self.expected < 1:
            raise ConfigError(f"model {self.model!r}: expected stubs = {self.expected!r}; allowed an integer >= 1 "
                              f"(models without stubs are not watched).")

    def summary(self) -> StubSummary:
        return StubSummary(self.expected, tuple(sorted(self.generation)), self.status.value, self.reloads, self.attempts,
                           self.last_reason, tuple(sorted(self.leftovers)))


def observe(m: ModelStubs, live: frozenset[int], now: float, max_reloads: int, window_s: float,
            can_reload: bool = True) -> tuple[ModelStubs, Decision]:
    """What to do about `m` given the pids of its live stubs now."""
    if m.status in (StubStatus.RELOADING, StubStatus.GAVE_UP, StubStatus.NO_KEY):
        return m, Decision(Action.NONE)
    if m.status is StubStatus.NOT_READY:
        if len(live) < m.expected:
            return m, Decision(Action.NONE)
        return (replace(m, status=StubStatus.WATCHING, generation=live),
                Decision(Action.ADOPT, f"running again with stubs {sorted(live)}"))
    if not m.generation:  # first scan since the server (or a reload) became ready
        m = replace(m, generation=live)
        if len(live) >= m.expected:
            return m, Decision(Action.NONE)
        detail = f"has {len(live)} of its {m.expected} backend stubs"
    else:
        lost = sorted(m.generation - live)
        if not lost and len(m.generation) >= m.expected:
            return m, Decision(Action.NONE)
        newcomers = live - m.generation
        if lost and len(newcomers) >= m.expected:
            return (replace(m, generation=newcomers),
                    Decision(Action.ADOPT, f"was reloaded by someone else: stubs {sorted(newcomers)} replace {lost}"))
        detail = (f"lost a backend stub (pid {', '.join(map(str, lost))})" if lost
                  else f"has {len(m.generation)} of its {m.expected} backend stubs")
    if not can_reload:
        return replace(m, status=StubStatus.NO_KEY, last_reason=detail), Decision(Action.NO_KEY, detail)
    recent = tuple(t for t in m.reload_times if now - t < window_s)
    if len(recent) >= max_reloads:
        reason = f"{detail}; {len(recent)} reloads in {window_s:.0f} s already: not reloading it again"
        return replace(m, status=StubStatus.GAVE_UP, last_reason=reason), Decision(Action.GIVE_UP, reason)
    return (replace(m, status=StubStatus.RELOADING, reload_times=(*recent, now), attempts=m.attempts + 1,
                    before=live, last_reason=detail),
            Decision(Action.RELOAD, detail))


@dataclass(frozen=True)
class ReloadOutcome:
    """What `reload_model` did: "reloaded"; "not_ready" (Triton says the model is not ready, e.g. an
    operator unloaded it: nothing sent); "unanswered" (Triton could not be asked: nothing sent, tried
    again at the next scan within the reload budget); or "failed" (the load request failed)."""

    result: str
    seconds: float
    detail: str = ""

    def __post_init__(self) -> None:
        if self.result not in ("reloaded", "not_ready", "unanswered", "failed"):
            raise ConfigError(f"reload result {self.result!r}: allowed reloaded, not_ready, unanswered, failed.")


def after_reload(m: ModelStubs, outcome: ReloadOutcome, live: frozenset[int], now: float) -> tuple[ModelStubs, Decision]:
    """`m` once its reload finished; `live` are the model's live stubs right after it."""
    if outcome.result == "reloaded":
        # The new generation is what was not running before; the old instances' stubs still running
        # are leftovers. No new stub (Triton did not reload): the next scan re-reads the generation.
        new = live - m.before
        reason = f"{m.last_reason}; reloaded in {outcome.seconds:.1f} s"
        return (replace(m, status=StubStatus.WATCHING, generation=new, before=frozenset(), reloads=m.reloads + 1,
                        last_reason=reason, leftovers=m.before & live if new else frozenset(), leftovers_since=now),
                Decision(Action.RELOADED, reason))
    if outcome.result == "unanswered":  # a busy or briefly unreachable server: the next scan tries again
        # (this attempt counts against the budget: a server that never answers ends in gave_up, not a loop)
        reason = f"{m.last_reason}; not reloaded yet: {outcome.detail}"
        return (replace(m, status=StubStatus.WATCHING, generation=frozenset(), before=frozenset(), last_reason=reason),
                Decision(Action.NOT_READY, reason))
    if outcome.result == "not_ready":
        reason = f"{m.last_reason}; not reloaded: {outcome.detail}"
        return (replace(m, status=StubStatus.NOT_READY, generation=frozenset(), before=frozenset(),
                        reload_times=m.reload_times[:-1], last_reason=reason), Decision(Action.NOT_READY, reason))
    reason = f"{m.last_reason}; reload failed after {outcome.seconds:.1f} s: {outcome.detail}"
    return (replace(m, status=StubStatus.WATCHING, generation=frozenset(), before=frozenset(), last_reason=reason),
            Decision(Action.RESTART_PARTITION, reason))


def stale_leftovers(m: ModelStubs, live: frozenset[int], now: float, grace_s: float = LEFTOVER_GRACE_S,
                    ) -> tuple[ModelStubs, frozenset[int]]:
    """(`m`, the leftover stubs to SIGKILL now): those still running `grace_s` after the reload."""
    still = m.leftovers & live
    if still and now - (m.leftovers_since or now) < grace_s:
        return replace(m, leftovers=still), frozenset()
    return replace(m, leftovers=frozenset(), leftovers_since=None), still


# --- talking to the server ------------------------------------------------------------------------

def served_stub_counts(host: str, http_port: int, models: Iterable[str], python_backends: Iterable[str],
                       timeout_s: float = 2.0) -> dict[str, int]:
    """{model: stubs} for the models that run in stubs, from each one's served config (an open API)."""
    counts = {}
    for model in models:
        try:
            config = served_model_config(host, http_port, model, timeout_s)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("model %s: its config could not be read (%s): its backend stubs are not watched", model, exc)
            continue
        if n := expected_stub_count(config, python_backends):
            counts[model] = n
    return counts


def reload_model(host: str, http_port: int, model: str, attempt: int, headers: Mapping[str, str],
                 timeout_s: float) -> ReloadOutcome:
    """Reload `model` with its served config plus the attempt marker; never raises."""
    start = time.monotonic()
    ready = model_readiness(host, http_port, model, timeout_s=min(5.0, timeout_s))
    if ready is None:
        return ReloadOutcome("unanswered", time.monotonic() - start, f"Triton did not answer whether {model} is ready")
    if not ready:
        return ReloadOutcome("not_ready", time.monotonic() - start, f"Triton reports {model} not ready (unloaded?)")
    try:
        config = served_model_config(host, http_port, model, min(5.0, timeout_s))
        body = json.dumps({"parameters": {"config": json.dumps(reload_config(config, attempt))}}).encode()
        request = urllib.request.Request(f"http://{host}:{http_port}/v2/repository/models/{model}/load", data=body,
                                         method="POST", headers={"Content-Type": "application/json", **headers})
        remaining = max(1.0, timeout_s - (time.monotonic() - start))
        with urllib.request.urlopen(request, timeout=remaining) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")[:300]
        return ReloadOutcome("failed", time.monotonic() - start, f"HTTP {exc.code}: {text}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return ReloadOutcome("failed", time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    return ReloadOutcome("reloaded", time.monotonic() - start)


# --- the supervisor's bookkeeping for one partition ------------------------------------------------

@dataclass
class PartitionStubWatch:
    """Stub watching for one partition (mutable, like serving.runtime.supervisor.SupervisedPartition).

    `server_ready` starts it for a new server, `tick` scans every `interval_s` and runs at most one
    reload at a time (on `executor`), `server_down` forgets the server. Counts and the budget
    survive restarts. `scan` and `reload` are parameters so the flow is tested without a server."""

    partition: str
    interval_s: float
    timeout_s: float
    max_reloads: int
    window_s: float
    scan: Callable[[int], tuple[StubProcess, ...]] = scan_stubs
    reload: Callable[..., ReloadOutcome] = reload_model
    models: dict[str, ModelStubs] = field(default_factory=dict)
    server: tuple[str, int, int] | None = None  # host, http port, pid
    headers: dict[str, str] | None = None
    last_scan_at: float | None = None
    in_flight: tuple[str, Future] | None = None
    #: Stubs seen stopped at the last scan: one still stopped at the next is killed (`_kill_stopped`).
    stopped_seen: frozenset[int] = frozenset()
    #: What log lines tell an operator to run to restart (RunLayout.restart_command of the supervisor's run).
    restart_command: str = "`make stop && make serve`"

    def server_ready(self, host: str, http_port: int, pid: int, stub_counts: Mapping[str, int],
                     headers: dict[str, str] | None) -> None:
        self.server, self.headers, self.last_scan_at, self.in_flight = (host, http_port, pid), headers, None, None
        old = self.models
        self.models = {m: replace(old[m], expected=n, generation=frozenset(), before=frozenset(), status=StubStatus.WATCHING,
                                  leftovers=frozenset(), leftovers_since=None)
                       if m in old else ModelStubs(m, n) for m, n in stub_counts.items()}

    def server_down(self) -> None:
        self.server, self.in_flight = None, None  # a reload in flight ends within its timeout; ignored
        self.models = {m: replace(s, status=StubStatus.WATCHING, before=frozenset()) if s.status is StubStatus.RELOADING
                       else s for m, s in self.models.items()}

    def tick(self, now: float, executor: Executor) -> tuple[bool, str | None]:
        """(state changed, why the partition must be restarted or None)."""
        if self.server is None:
            return False, None
        host, port, pid = self.server
        if self.in_flight is not None:
            model, future = self.in_flight
            if not future.done():
                return False, None
            self.in_flight = None
            error = future.exception() if not future.cancelled() else RuntimeError("cancelled")
            outcome = future.result() if error is None else ReloadOutcome("failed", 0.0, f"{type(error).__name__}: {error}")
            self.models[model], decision = after_reload(self.models[model], outcome, pids_of(model, self.scan(pid)), now)
            self._log(model, decision)
            return True, (f"model {model} {decision.detail}" if decision.action is Action.RESTART_PARTITION else None)
        if not self.models or (self.last_scan_at is not None and now - self.last_scan_at < self.interval_s):
            return False, None
        self.last_scan_at = now
        stubs, changed = self._kill_stopped(self.scan(pid)), False
        for model, old in self.models.items():
            live = pids_of(model, stubs)
            current, stale = stale_leftovers(old, live, now)
            self._kill_leftovers(model, stale)
            self.models[model], decision = observe(current, live, now, self.max_reloads, self.window_s,
                                                   can_reload=self.headers is not None)
            self._log(model, decision)
            changed |= self.models[model] != old  # run/supervisor.json shows the pids too
            if decision.action is Action.RELOAD:
                self.in_flight = (model, executor.submit(self.reload, host, port, model, self.models[model].attempts,
                                                         self.headers, self.timeout_s))
                break  # one reload at a time; the others are seen again next scan
        return changed, None

    def _kill_stopped(self, stubs: tuple[StubProcess, ...]) -> tuple[StubProcess, ...]:
        """`stubs` without those stopped at this scan and the last (SIGKILLed: then they are dead stubs,
        reloaded as usual). A stopped stub fails its instance's requests, and resumed (SIGCONT) it
        aborted its whole server (boost::interprocess::lock_exception in Triton 2.51, measured
        2026-12-06): killed while stopped, it cannot resume."""
        stale = [s for s in stubs if s.stopped and s.pid in self.stopped_seen]
        self.stopped_seen = frozenset(s.pid for s in stubs if s.stopped) - {s.pid for s in stale}
        for stub in stale:
            self._sigkill(stub.model, stub.pid, f"({stub.instance or 'instance unknown'}), stopped for a whole scan "
                                                "interval: its instance answered nothing; reloading the model")
        return tuple(s for s in stubs if s not in stale)

    def _kill_leftovers(self, model: str, pids: frozenset[int]) -> None:
        for pid in sorted(pids):  # stubs of this server's group seen in this very scan
            self._sigkill(model, pid, f"of an instance the reload replaced (Triton had not finalized it "
                                      f"{LEFTOVER_GRACE_S:.0f} s after the reload)")

    def _sigkill(self, model: str, pid: int, why: str) -> None:
        """SIGKILL one stub of this partition's server and say so (nothing to say if it is gone already)."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        log.warning("partition %s: model %s: SIGKILLed stub pid %d %s", self.partition, model, pid, why)

    def _log(self, model: str, decision: Decision) -> None:
        where = f"partition {self.partition}: model {model}"
        if decision.action is Action.RELOAD:
            log.warning("%s %s; reloading it (reload %d of at most %d in %.0f s)", where, decision.detail,
                        len(self.models[model].reload_times), self.max_reloads, self.window_s)
        elif decision.action in (Action.RELOADED, Action.ADOPT, Action.NOT_READY):
            log.info("%s %s", where, decision.detail)
        elif decision.action is Action.GIVE_UP:
            log.error("%s %s (state gave_up): its requests fail with \"Stub process ... is not healthy\"; find why its "
                      "stub dies (partition log), then restart the partition (%s)", where, decision.detail, self.restart_command)
        elif decision.action is Action.NO_KEY:
            log.error("%s %s, but the supervisor holds no admin key for the model-repository API, so it cannot reload "
                      "it: set TRITON_ADMIN_KEY or create the key file (`make admin-key`), then %s",
                      where, decision.detail, self.restart_command)
        elif decision.action is Action.RESTART_PARTITION:
            log.error("%s %s: restarting the partition", where, decision.detail)

    def summary(self) -> dict[str, StubSummary]:
        return {m: s.summary() for m, s in self.models.items()}
