"""The partition supervisor: starts one tritonserver per partition, restarts crashed ones, stops all.

`make serve` starts it in the background (`python -m serving supervise`, pid in run/supervisor.pid)
and returns once every partition answers /v2/health/ready (health-gated start-up). While running:
- a partition whose server exits (crash, kill -9, OOM kill) is restarted after a backoff that
  doubles per consecutive failure (0.5 s, 1 s, 2 s ... capped at 8 s), at most `max_restarts` times
  in `window_s`. Past that budget the partition is NOT abandoned: it enters `crash_loop` and is
  retried every `crash_loop_backoff_s` (5 min, Kubernetes' CrashLoopBackOff cap), for as long as
  the supervisor runs, so a service that must come back does come back once the cause is gone;
  `crash_loop` is loud: it is in run/supervisor.json, `make status`, the supervisor's own metrics
  endpoint (`serving_partition_crash_loop`) and the `ServingPartitionCrashLooping` alert. A
  server counts as recovered (consecutive failures reset) only after `stable_after_s` ready, so a
  request that crashes it again right after each restart keeps backing off instead of looping
  every 0.5 s (docs/operations.md, "When a partition keeps dying");
- a ready partition whose server is alive but *hung* (SIGSTOP, deadlock) is found by probing
  `GET /v2/health/live` every `liveness_interval_s` (2 s, `liveness_timeout_s` 2 s hard deadline,
  from a thread pool so a hung server never stalls the loop): after `liveness_failures` (3) misses
  in a row its process group is SIGKILLed and it takes the restart path above. Detection takes at
  most interval x failures + timeout = 8 s (why a busy server is not taken for a hung one:
  serving.runtime.liveness);
- a model that lost a Python-backend stub process (native crash, OOM kill of the stub: Triton
  2.51 keeps it READY but fails its requests until it is reloaded) is found on the same 2 s beat
  from the stubs in the server's process group, and reloaded through the key-protected repository
  API (at most max_restarts times per model in window_s; past that it is left alone, state
  gave_up; a reload that fails restarts the partition): serving.runtime.stub_watch;
- every transition is logged to run/logs/supervisor.log and recorded in run/supervisor.json; the
  manifest (run/manifest.json) is rewritten with the new pid.
A failure during the *initial* start-up is not retried: it is almost always a configuration error,
so everything is stopped and `make serve` fails with the logs' tails.
`make stop` sends SIGTERM: the supervisor stops its servers (and the MPS daemon it started), then
exits; `stop_supervisor` (serving.runtime.supervisor_control) then removes anything still alive that the
state file names.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Sequence

from contracts.errors import ConfigError, ServerStartError
from serving.runtime.cpu_shares import CpuWeight, create_cpu_groups, remove_cpu_groups
from serving.runtime.elastic_cpus import Activity, ActivityTracker, cpu_seconds, group_members, lend_idle_cores, pin_threads
from serving.runtime.launcher import (
    RunLayout, build_manifest, partition_server_process, plan_cpu_weights_for_this_host, start_mps_daemon,
    stop_mps_daemon, with_server_overrides,
)
from serving.runtime.liveness import LivenessHistory, probe_live, worst_case_detection_s
from contracts.manifest import write_manifest
from serving.runtime.model_readiness import model_ready
from contracts.partition_plan import Mechanism, PartitionPlan, PlannedPartition, plan_for_this_host
from contracts.shared_memory import remove_server_leftovers
from contracts.processes import kill_process_group, log_tail, ports_in_use, server_ready
from serving.runtime.server import TritonServerProcess, find_tritonserver, prepare_backend_dir
from contracts.serving_spec import load_serving_spec
from contracts.supervisor_state import PartitionStatus, SupervisorState, write_supervisor_state
from serving.runtime.supervisor_metrics import SupervisorMetricsServer, render_supervisor_metrics
from serving.runtime.stub_processes import python_based_backends, scan_stubs
from serving.runtime.stub_watch import PartitionStubWatch, repository_api_headers, served_stub_counts
# Starting/stopping the supervisor as a background process lives in serving.runtime.supervisor_control;
# these names stay importable from here (cli, tests).
from serving.runtime.supervisor_control import read_supervisor_state, start_supervisor, stop_supervisor  # noqa: F401

log = logging.getLogger("serving.runtime.supervisor")
TICK_S = 0.2


class PartitionState(str, Enum):
    STARTING = "starting"
    READY = "ready"
    BACKOFF = "backoff"
    #: The restart budget is spent: waiting `crash_loop_backoff_s` before the next attempt.
    CRASH_LOOP = "crash_loop"
    #: Only for a failure during the initial start-up (a configuration error: nothing to retry).
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class RestartPolicy:
    """Bounded restarts with exponential backoff; when a live but unanswering server counts as down
    (liveness_*: 3 x 2 s of no answer is slack for a CPU-starved host; load alone does not slow
    /v2/health/live, see serving.runtime.liveness)."""

    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_restarts: int = 5
    window_s: float = 600.0
    ready_timeout_s: float = 120.0
    liveness_interval_s: float = 2.0
    liveness_timeout_s: float = 2.0
    liveness_failures: int = 3
    #: Longest wait for Triton to reload a model that lost a backend stub (serving.runtime.stub_watch);
    #: such reloads share max_restarts / window_s as a per-model budget.
    stub_reload_timeout_s: float = 60.0
    #: Once the budget is spent: one attempt this often, forever (CrashLoopBackOff's 5 min cap).
    crash_loop_backoff_s: float = 300.0
    #: Ready this long before consecutive failures reset (and a crash loop is declared over).
    stable_after_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ConfigError(f"restart backoff {self.initial_backoff_s}..{self.max_backoff_s} s: allowed 0 < initial <= max.")
        if self.max_restarts < 0 or self.window_s <= 0 or self.ready_timeout_s <= 0:
            raise ConfigError(f"restart policy {self}: allowed max_restarts >= 0, window_s > 0, ready_timeout_s > 0.")
        if not self.liveness_interval_s > 0:
            raise ConfigError(f"liveness_interval_s = {self.liveness_interval_s!r}: allowed > 0 seconds.")
        if not 0 < self.liveness_timeout_s <= self.liveness_interval_s:
            raise ConfigError(f"liveness_timeout_s = {self.liveness_timeout_s!r}: allowed 0 < timeout <= liveness_interval_s "
                              f"({self.liveness_interval_s!r}), so that probes of one partition never overlap.")
        if isinstance(self.liveness_failures, bool) or not isinstance(self.liveness_failures, int) or self.liveness_failures < 1:
            raise ConfigError(f"liveness_failures = {self.liveness_failures!r}: allowed an integer >= 1.")
        if not self.stub_reload_timeout_s > 0:
            raise ConfigError(f"stub_reload_timeout_s = {self.stub_reload_timeout_s!r}: allowed > 0 seconds.")
        if not self.crash_loop_backoff_s >= self.max_backoff_s:
            raise ConfigError(f"crash_loop_backoff_s = {self.crash_loop_backoff_s!r}: allowed >= max_backoff_s "
                              f"({self.max_backoff_s!r}); a spent budget must slow restarts down, not speed them up.")
        if not self.stable_after_s >= 0:
            raise ConfigError(f"stable_after_s = {self.stable_after_s!r}: allowed >= 0 seconds.")

    @property
    def hang_detection_s(self) -> float:
        """Worst case from a server hanging to the supervisor acting on it."""
        return worst_case_detection_s(self.liveness_interval_s, self.liveness_failures, self.liveness_timeout_s)

    def backoff_s(self, consecutive_failures: int) -> float:
        """Delay before the restart that follows the n-th consecutive failure (n >= 1)."""
        # the exponent is capped: a partition that fails for days reaches ~1,000 failures, and 2.0 ** 1025
        # overflows a float (the delay is max_backoff_s long before that)
        return min(self.max_backoff_s, self.initial_backoff_s * 2.0 ** min(max(0, consecutive_failures - 1), 64))

    def restarts_in_window(self, restart_times: Sequence[float], now: float) -> int:
        return sum(1 for t in restart_times if now - t < self.window_s)

    def allows_restart(self, restart_times: Sequence[float], now: float) -> bool:
        return self.restarts_in_window(restart_times, now) < self.max_restarts

    def next_restart(self, restart_times: Sequence[float], consecutive_failures: int, now: float,
                     in_crash_loop: bool = False) -> tuple[str, float]:
        """(state, delay) after a server went down: a quick backoff within the budget, else the
        crash-loop interval. A partition in a crash loop keeps that interval until it has been ready
        for `stable_after_s` (`Supervisor._check_stable`), although its old restarts leave the window:
        otherwise it went back to quick restarts every `window_s` (5 starts per ~650 s, not 1 per
        300 s). Pure, so the whole policy is unit-tested without processes."""
        if not in_crash_loop and self.allows_restart(restart_times, now):
            return PartitionState.BACKOFF.value, self.backoff_s(consecutive_failures)
        return PartitionState.CRASH_LOOP.value, self.crash_loop_backoff_s


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class SupervisedPartition:
    """Runtime record of one partition (mutable: it is the supervisor's bookkeeping)."""

    partition: PlannedPartition
    process: TritonServerProcess | None = None
    state: PartitionState = PartitionState.STARTING
    restart_times: list[float] = field(default_factory=list)
    consecutive_failures: int = 0
    deadline: float = 0.0
    last_exit: str | None = None
    #: When the server last became ready (monotonic), and how often the budget was spent.
    ready_since: float | None = None
    crash_loops: int = 0
    #: Set while the budget is spent; cleared after `stable_after_s` of readiness.
    in_crash_loop: bool = False
    #: Per-model readiness seen when the server became ready (a model may fail to load alone).
    models_ready: dict[str, bool] = field(default_factory=dict)
    #: Liveness probes since the server became ready, and the one in flight (a thread-pool future).
    liveness: LivenessHistory = field(default_factory=LivenessHistory)
    probe: Future | None = None
    #: Backend stubs of its models, and the reloads of a model that lost one (serving.runtime.stub_watch).
    stubs: PartitionStubWatch | None = None

    def summary(self, policy: "RestartPolicy | None" = None, now: float | None = None) -> PartitionStatus:
        now = time.monotonic() if now is None else now
        waiting = self.state in (PartitionState.BACKOFF, PartitionState.CRASH_LOOP)
        return PartitionStatus(
            pid=self.process.pid if self.process and self.process.process else None, state=self.state.value,
            restarts=len(self.restart_times), last_exit=self.last_exit, models_ready=dict(self.models_ready),
            stubs=self.stubs.summary() if self.stubs else {}, crash_loop=self.in_crash_loop, crash_loops=self.crash_loops,
            restarts_in_window=policy.restarts_in_window(self.restart_times, now) if policy else 0,
            restart_budget=policy.max_restarts if policy else 0, window_s=policy.window_s if policy else 0.0,
            next_attempt_in_s=round(max(0.0, self.deadline - now), 1) if waiting else None)


class Supervisor:
    def __init__(self, plan: PartitionPlan, repository: Path, layout: RunLayout, policy: RestartPolicy = RestartPolicy(),
                 metrics_address: tuple[str, int] | None = None):
        self.plan, self.repository, self.layout, self.policy = plan, Path(repository), layout, policy
        #: The supervisor's own metrics endpoint (serving.runtime.supervisor_metrics), started by `run`.
        self.metrics_address = metrics_address
        self.metrics: SupervisorMetricsServer | None = None
        #: CPU shares plans: each partition's cgroup or niceness (serving.runtime.cpu_shares), set up by `run`.
        self.cpu_weights: dict[str, CpuWeight] = {}
        #: Elastic CPU sets (serving.runtime.elastic_cpus): who is busy, and the cores each may use now.
        self.activity = ActivityTracker()
        self.cpus_now: dict[str, tuple[int, ...]] = {p.name: p.cpus for p in plan.partitions}
        self.last_repin = 0.0
        self.members: dict[str, list[int]] = {}
        self.installation = find_tritonserver()
        self.parts = {p.name: SupervisedPartition(p, stubs=PartitionStubWatch(
            p.name, policy.liveness_interval_s, policy.stub_reload_timeout_s, policy.max_restarts, policy.window_s,
            restart_command=layout.restart_command)) for p in plan.partitions}
        self.status = "starting"
        self.error: str | None = None
        self.stop_requested = False
        self.mps_started = False
        #: The last write of the state file failed: the loop tries again each tick (`_save_state`
        #: logs a failing streak once).
        self.state_unwritten = False
        # Probes and stub reloads run here so a hung server costs the tick loop nothing; each ends
        # within its timeout. Three per partition: a restarted partition's probe never waits behind
        # its old one, nor behind a reload.
        self.probes = ThreadPoolExecutor(max_workers=max(3, 3 * len(self.parts)), thread_name_prefix="liveness")

    # --- bookkeeping -------------------------------------------------------------------------
    def state(self) -> SupervisorState:
        """What run/supervisor.json and the supervisor's metrics endpoint report."""
        now = time.monotonic()
        return SupervisorState(
            supervisor_pid=os.getpid(), status=self.status, error=self.error, mechanism=self.plan.mechanism.value,
            mps_started=self.mps_started, updated_at=time.time(),
            partitions={n: replace(sp.summary(self.policy, now), cpus_now=tuple(self.cpus_now.get(n, ())))
                        for n, sp in self.parts.items()})

    def metrics_text(self) -> str:
        """What the supervisor's /metrics endpoint answers: its state, and whether writing it failed."""
        return render_supervisor_metrics(self.state(), self.state_unwritten)

    def write_state(self) -> None:
        # The manifest first: whoever reads "ready" in the state file (`make serve`'s wait, a test)
        # then reads the manifest, which must already be there.
        if self.status in ("ready", "degraded"):
            write_manifest(build_manifest(self.plan, self.layout, {n: sp.summary() for n, sp in self.parts.items()},
                                          self.metrics.url if self.metrics else None), self.layout.manifest)
        write_supervisor_state(self.state(), self.layout.supervisor_state)

    # --- processes ---------------------------------------------------------------------------
    def _launch(self, sp: SupervisedPartition, now: float) -> None:
        """Start a partition's server, once its ports are free: a server already listening on them
        (another checkout's, a test's, one a killed run left) answered the readiness check in place
        of this one, which then failed to bind and exited, restarted and was taken for ready again."""
        part = sp.partition
        busy = ports_in_use(part.host, [p for p in (part.http_port, part.grpc_port, part.metrics_port) if p])
        if busy:
            raise ServerStartError(
                f"partition {part.name}: port(s) {busy} on {part.host} are held by another process (another "
                f"tritonserver, an earlier run?): stop it (`ss -ltnp` names it) or give this partition other ports "
                f"(serving.toml [server] http_port / grpc_port / metrics_port, or `serving serve --http-port ...`).")
        sp.process = partition_server_process(self.installation, self.plan, sp.partition, self.repository, self.layout,
                                              self.cpu_weights.get(sp.partition.name)).start()
        sp.state, sp.deadline = PartitionState.STARTING, now + self.policy.ready_timeout_s
        log.info("partition %s: started tritonserver pid %d (cpus %s, ports %d/%d/%d)", sp.partition.name, sp.process.pid,
                 list(sp.partition.cpus), sp.partition.http_port, sp.partition.grpc_port, sp.partition.metrics_port)

    def _on_down(self, sp: SupervisedPartition, now: float, why: str) -> None:
        pid = sp.process.pid
        if sp.process.process.poll() is None:  # taken down alive: what it maps now (a start-up that hung too)
            sp.process.note_mapped_regions()
        # The server's Python-backend stubs share its process group: remove them too. A server
        # taken down alive (hung, stopped, failed reload) dies as well: SIGKILL needs no SIGCONT.
        kill_process_group(pid)
        try:  # reap it, so no stopped or zombie server is left behind (an exited one is reaped already)
            sp.process.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # uninterruptible sleep (D state): it dies when the I/O returns
            log.error("partition %s: pid %d not dead 5 s after SIGKILL", sp.partition.name, pid)
        remove_server_leftovers(pid, sp.process.shm_regions)  # a SIGKILLed server leaves its IPC regions behind
        sp.process.shm_regions = ()
        sp.last_exit = why
        sp.stubs.server_down()
        if self.status == "starting":
            sp.state = PartitionState.FAILED
            self.error = f"partition {sp.partition.name} (pid {pid}) {why} during start-up"
            log.error("%s; last lines of its log:\n%s", self.error, log_tail(self.layout.partition_log(sp.partition.name)))
            return
        self._schedule_restart(sp, now, f"(pid {pid}) {why}")

    def _schedule_restart(self, sp: SupervisedPartition, now: float, what: str) -> None:
        """Count a failure of a running partition (or of its restart) and set when it is tried again."""
        sp.consecutive_failures += 1
        sp.ready_since = None
        state, delay = self.policy.next_restart(sp.restart_times, sp.consecutive_failures, now, sp.in_crash_loop)
        sp.state, sp.deadline = PartitionState(state), now + delay
        if sp.state is PartitionState.CRASH_LOOP:
            if not sp.in_crash_loop:
                sp.in_crash_loop, sp.crash_loops = True, sp.crash_loops + 1
            log.error("partition %s %s; restart budget spent (%d restarts in %.0f s): CRASH LOOP, next attempt "
                      "in %.0f s and every %.0f s after that while it keeps dying (alert ServingPartitionCrashLooping)",
                      sp.partition.name, what, self.policy.max_restarts, self.policy.window_s, delay,
                      self.policy.crash_loop_backoff_s)
            return
        log.warning("partition %s %s; restart %d/%d in %.1f s", sp.partition.name, what,
                    self.policy.restarts_in_window(sp.restart_times, now) + 1, self.policy.max_restarts, delay)

    def _restart(self, sp: SupervisedPartition, now: float) -> None:
        """Start a partition again. If it cannot even be started (its admin key file became unreadable,
        the binary is gone, ...), that counts as one more failure of this partition, retried on the
        same schedule; the others keep serving (an exception here used to end the supervisor, and
        with it every partition)."""
        sp.restart_times.append(now)
        try:
            self._launch(sp, now)
        except Exception as exc:  # noqa: BLE001 - whatever stops one partition's start must not stop the rest
            sp.last_exit = f"could not be started: {type(exc).__name__}: {exc}"
            self._schedule_restart(sp, now, sp.last_exit)

    def _check_liveness(self, sp: SupervisedPartition, now: float) -> bool:
        """Collect a finished probe, act on a hung server, start the next probe when due."""
        policy, part = self.policy, sp.partition
        if sp.probe is not None and sp.probe.done():
            error = sp.probe.exception()
            failure = f"probe raised {type(error).__name__}: {error}" if error else sp.probe.result()
            previous, sp.probe = sp.liveness.consecutive_failures, None
            sp.liveness = sp.liveness.after(failure)
            if failure:
                log.warning("partition %s (pid %d): /v2/health/live probe %d/%d failed: %s", part.name, sp.process.pid,
                            sp.liveness.consecutive_failures, policy.liveness_failures, failure)
            elif previous:
                log.info("partition %s: answering /v2/health/live again after %d failed probe(s)", part.name, previous)
            if sp.liveness.is_hung(policy.liveness_failures):
                self._on_down(sp, now, sp.liveness.hung_reason(policy.liveness_timeout_s))
                return True
        if sp.liveness.probe_due(now, policy.liveness_interval_s, in_flight=sp.probe is not None):
            sp.liveness = sp.liveness.started(now)
            sp.probe = self.probes.submit(probe_live, part.host, part.http_port, policy.liveness_timeout_s)
        return False

    def _watch_stubs(self, sp: SupervisedPartition) -> None:
        """Start watching the backend stubs of a partition that just became ready."""
        part = sp.partition
        ready = [m for m, ok in sp.models_ready.items() if ok]
        counts = served_stub_counts(part.host, part.http_port, ready, python_based_backends(self.layout.backends))
        sp.stubs.server_ready(part.host, part.http_port, sp.process.pid, counts,
                              repository_api_headers(sp.process.settings.restricted))

    def _check_stubs(self, sp: SupervisedPartition, now: float) -> bool:
        """Reload a model that lost a backend stub; restart the partition when that reload failed."""
        changed, restart_because = sp.stubs.tick(now, self.probes)
        if restart_because:
            self._on_down(sp, now, restart_because)
        elif changed:  # a reload's new instances mapped new IPC regions: a later SIGKILL must free them too
            sp.process.note_mapped_regions()
        return changed or bool(restart_because)

    def _check_stable(self, sp: SupervisedPartition, now: float) -> bool:
        """A server ready for `stable_after_s` has recovered: the crash loop is over and the backoff
        starts again from `initial_backoff_s`. The restart budget still counts the restarts of the
        last `window_s`: a partition that crashes again within it, having spent the budget, goes back
        to the crash-loop interval (a flapping partition is not given a fresh budget every minute)."""
        if sp.ready_since is None or now - sp.ready_since < self.policy.stable_after_s:
            return False
        if not (sp.consecutive_failures or sp.in_crash_loop):
            return False
        if sp.in_crash_loop:
            log.info("partition %s: ready for %.0f s: crash loop over", sp.partition.name, now - sp.ready_since)
        sp.consecutive_failures, sp.in_crash_loop = 0, False
        return True

    def _lend_idle_cores(self, now: float) -> bool:
        """Elastic CPU sets: re-pin partitions when one became busy or idle (and every 2 s, so
        threads and stubs started since are pinned too). True when the cores moved."""
        if self.plan.mechanism is not Mechanism.ELASTIC_CPU_SETS:
            return False
        activity, refresh = {}, now - self.last_repin >= 2.0
        for name, sp in self.parts.items():
            running = sp.state is PartitionState.READY and sp.process is not None and sp.process.process.poll() is None
            if running and (refresh or name not in self.members):
                members = group_members(sp.process.pid)
                joined = sorted(set(members) - set(self.members.get(name, members)))
                if joined:  # their CPU time so far is not this tick's work
                    self.activity.rebase(name, cpu_seconds(joined))
                self.members[name] = members
            activity[name] = self.activity.update(name, cpu_seconds(self.members.get(name, ())), now,
                                                  len(sp.partition.cpus)) if running else Activity.DOWN
            if not running:  # starting or restarting: it keeps its home cores, lends nothing
                self.activity.forget(name)
                self.members.pop(name, None)
        home = {p.name: p.cpus for p in self.plan.partitions}
        wanted = lend_idle_cores(home, {p.name: p.compute_share for p in self.plan.partitions}, activity,
                                 core_order=self.plan.core_order)
        moved = wanted != self.cpus_now
        if moved:
            log.info("elastic CPU sets: %s", "; ".join(
                f"{n} {activity[n].value} -> cpus {list(c)}" for n, c in wanted.items()))
        if moved or refresh:
            for name, cpus in wanted.items():
                if name in self.members:
                    pin_threads(self.members[name], cpus)
            self.cpus_now, self.last_repin = wanted, now
        return moved

    def tick(self, now: float) -> bool:
        """Advance every partition's state machine once; True if anything changed."""
        changed = self._lend_idle_cores(now)
        for sp in self.parts.values():
            if sp.state in (PartitionState.STARTING, PartitionState.READY):
                code = sp.process.process.poll()
                if code is not None:
                    self._on_down(sp, now, describe_exit(code))
                    changed = True
                elif sp.state is PartitionState.STARTING:
                    # noted while it loads: one stopped before ready unmaps some as it exits, without
                    # unlinking them (3-11 regions of 1 MiB per `serve --timeout` that expired mid-load)
                    sp.process.note_mapped_regions()
                    if server_ready(sp.partition.host, sp.partition.http_port, sp.partition.metrics_port, timeout=0.5):
                        sp.state, sp.ready_since = PartitionState.READY, now
                        sp.liveness, sp.probe = LivenessHistory(), None
                        part = sp.partition
                        sp.models_ready = {m: model_ready(part.host, part.http_port, m, timeout_s=2.0) for m in part.models}
                        sp.process.note_mapped_regions()
                        self._watch_stubs(sp)
                        not_ready = [m for m, ok in sp.models_ready.items() if not ok]
                        log.log(logging.WARNING if not_ready else logging.INFO, "partition %s: ready (pid %d)%s", part.name,
                                sp.process.pid, f"; models NOT ready: {not_ready} (see its log)" if not_ready else "")
                        changed = True
                    elif now > sp.deadline:  # killed at once by _on_down: a graceful stop of a server still
                        # loading models waited up to 25 s, and supervised nothing else meanwhile
                        self._on_down(sp, now, f"was not ready within {self.policy.ready_timeout_s:.0f} s")
                        changed = True
                elif self._check_liveness(sp, now):
                    changed = True
                else:
                    changed |= self._check_stubs(sp, now) | self._check_stable(sp, now)
            elif sp.state in (PartitionState.BACKOFF, PartitionState.CRASH_LOOP) and now >= sp.deadline:
                self._restart(sp, now)
                changed = True
        states = {sp.state for sp in self.parts.values()}
        if self.status == "starting" and PartitionState.FAILED in states:
            self.status, changed = "failed", True
        elif self.status == "starting" and states == {PartitionState.READY}:
            self.status, changed = "ready", True
            log.info("all %d partitions ready; manifest %s", len(self.parts), self.layout.manifest)
        elif self.status in ("ready", "degraded"):
            new = "ready" if states == {PartitionState.READY} else "degraded"
            changed |= new != self.status
            self.status = new
        return changed

    def stop_all(self) -> None:
        running = [sp for sp in self.parts.values() if sp.process and sp.process.process and sp.process.process.poll() is None]
        stubs = {sp.partition.name: len(scan_stubs(sp.process.pid)) for sp in running}  # before they start exiting
        for sp in running:  # what each maps before SIGTERM (an exit mid-load unmaps regions it never unlinks)
            sp.process.note_mapped_regions()
        for sp in running:  # SIGTERM all first so they shut down in parallel
            try:
                os.killpg(sp.process.pid, signal.SIGTERM)
                os.killpg(sp.process.pid, signal.SIGCONT)  # a stopped server acts on SIGTERM only once continued
            except ProcessLookupError:
                pass
        for sp in running:
            sp.process.stop(stubs_at_stop=stubs[sp.partition.name])
            log.info("partition %s: stopped (pid %d)", sp.partition.name, sp.process.pid)
        for sp in self.parts.values():
            sp.state = PartitionState.STOPPED if sp.state is not PartitionState.FAILED else sp.state

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._request_stop)
        signal.signal(signal.SIGINT, self._request_stop)
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        try:
            if self.plan.mechanism is Mechanism.CUDA_MPS:  # only when some partition holds GPU models
                fallback = start_mps_daemon(self.layout)
                self.mps_started = fallback is None
                if fallback:
                    log.warning("%s", fallback)
                    print(f"[serve] {fallback}", flush=True)
                else:
                    log.info("CUDA MPS control daemon started (pipe %s)", self.layout.mps_pipe)
            prepare_backend_dir(self.installation, self.layout.backends)
            self.cpu_weights, how = plan_cpu_weights_for_this_host(self.plan, f"{os.getpid()}")
            if self.cpu_weights:
                create_cpu_groups(self.cpu_weights)
                log.info("CPU shares via %s: %s", how, "; ".join(f"{n} {w.share}% -> {w.describe()}" for n, w in self.cpu_weights.items()))
            if self.metrics_address:
                self.metrics = SupervisorMetricsServer(*self.metrics_address, self.metrics_text).start()
                log.info("supervisor metrics on %s", self.metrics.url)
            now = time.monotonic()
            for sp in self.parts.values():
                self._launch(sp, now)
            self.write_state()
            while not self.stop_requested and self.status != "failed":
                if self.tick(time.monotonic()) or self.state_unwritten:
                    self._save_state()
                time.sleep(TICK_S)
        except ServerStartError as exc:  # an operator's to fix (ports held, ...): the message says how, no traceback
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            log.error("supervisor failed: %s", exc)
        except Exception as exc:  # anything unexpected: record it, then stop what was started
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            log.exception("supervisor failed")
        finally:
            failed = self.status == "failed"
            self.probes.shutdown(wait=False, cancel_futures=True)
            if self.metrics:
                self.metrics.stop()
            self.stop_all()
            for problem in remove_cpu_groups(self.cpu_weights):
                log.warning("could not remove CPU group %s", problem)
            if self.mps_started:
                stop_mps_daemon(self.layout)
                log.info("CUDA MPS control daemon stopped")
            self.status = "failed" if failed else "stopped"
            self.layout.manifest.unlink(missing_ok=True)
            self.write_state()
            log.info("supervisor exiting (%s)", self.status)
        return 1 if failed else 0

    def _save_state(self) -> bool:
        """`write_state` while serving: a write that fails (a full disk) is logged and tried again at
        the next tick (`state_unwritten`); the partitions keep serving (it used to end the supervisor
        and stop them)."""
        try:
            self.write_state()
        except OSError as exc:
            if not self.state_unwritten:
                log.error("could not write %s or the manifest (%s): serving goes on; retrying every tick",
                          self.layout.supervisor_state, exc)
            self.state_unwritten = True
            return False
        if self.state_unwritten:
            log.info("wrote %s again", self.layout.supervisor_state)
        self.state_unwritten = False
        return True

    def _request_stop(self, signum, frame) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        self.stop_requested = True


def run_supervisor(config: Path, repository: Path, run_dir: Path, force_cpu: bool = False,
                   overrides: dict[str, Any] | None = None, policy: RestartPolicy = RestartPolicy()) -> int:
    """Entry point of `python -m serving supervise` (normally started by `serving serve`)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s supervisor %(levelname)s %(message)s")
    layout = RunLayout(Path(run_dir))
    spec = with_server_overrides(load_serving_spec(config, bool((overrides or {}).get("allow_non_loopback"))), **(overrides or {}))
    plan, gpu = plan_for_this_host(spec, force_cpu=force_cpu)
    log.info("pid %d; %s; mechanism %s; plan %s", os.getpid(), gpu.detail, plan.mechanism.value,
             json.dumps(plan.to_dict()["partitions"], sort_keys=True))
    for note in plan.notes:
        log.warning("%s", note)
    if not plan.latency_summary_quantiles:
        log.warning("latency summaries are off (`[server] latency_summary_quantiles = []`): the P99 alert and the "
                    "dashboard's percentile panels have no data; counters (means) still work (docs/operations.md)")
    metrics = (spec.server.host, spec.server.supervisor_metrics_port)
    return Supervisor(plan, repository, layout, policy, metrics_address=metrics).run()
