"""`python -m serving serve|stop|status`: one tritonserver per partition, under a supervisor.

`serve` plans the partitions (contracts.partition_plan), starts the supervisor in the background
(pid in run/supervisor.pid) and returns once every partition is ready (or fails with the logs'
tails); the supervisor restarts a crashed partition. `stop` stops the supervisor first (it stops
its servers), then anything left behind. `status` shows every partition. `supervise` is the
supervisor itself (started by `serve`; not meant to be typed).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import sys
from pathlib import Path

from contracts.errors import ServingError
from serving.runtime.launcher import with_server_overrides
from serving.runtime.model_readiness import check_models_loaded
from serving.runtime.native import preload_environment
from contracts.layout import ARTIFACTS_DIR, MODEL_REPOSITORY, PROJECT_ROOT, RUN_DIR, SERVING_CONFIG, RunLayout
from contracts.manifest import Manifest, PartitionEntry, read_manifest
from contracts.partition_plan import Mechanism, plan_for_this_host
from contracts.processes import http_ready, pid_alive, stop_pid
from contracts.rendered_configs import check_rendered_configs
from serving.runtime.security import RESTRICTED_APIS, check_bind_host, create_admin_key_file, load_admin_key
from contracts.serving_spec import load_serving_spec
from contracts.supervisor_state import PartitionStatus
from serving.runtime.supervisor import RestartPolicy, read_supervisor_state, run_supervisor, start_supervisor, stop_supervisor
from serving.runtime.supervisor_control import is_run_supervisor
from serving.runtime.supervisor_metrics import UNHEALED_STUB_STATES
from contracts.command_line import run_subcommand

DEFAULT_CONFIG = SERVING_CONFIG

#: What a partition's compute share means on a host without a GPU, per mechanism (`serve` prints it).
CPU_PLACEMENT_LINES = {
    Mechanism.CPU_SHARES: "CPU shares: every partition may use every core, its compute_share is its weight when they compete",
    Mechanism.CPU_SETS: "partitions are pinned CPU sets, never lent",
    Mechanism.ELASTIC_CPU_SETS: "partitions are pinned to their home cores and an idle one lends its cores to the busy ones",
}


def partition_share(mechanism: str, part: PartitionEntry) -> str:
    """How one partition of the manifest shares the machine, as `serve` prints it: its cores (and
    weight) on CPU, its MPS limits on a GPU."""
    if mechanism == Mechanism.CPU_SETS.value:
        return f"cpus {list(part.cpus)}"
    if mechanism == Mechanism.ELASTIC_CPU_SETS.value:
        return f"home cpus {list(part.cpus)} (elastic)"
    if mechanism == Mechanism.CPU_SHARES.value:
        return f"cpus {list(part.cpus)} weight {part.compute_share}%"
    return f"MPS {dict(part.mps)}"


def _overrides(args: argparse.Namespace) -> dict:
    return {"host": args.host, "http_port": args.http_port, "grpc_port": args.grpc_port, "metrics_port": args.metrics_port,
            "allow_non_loopback": args.allow_non_loopback, "supervisor_metrics_port": args.supervisor_metrics_port}


def _short(path: Path) -> str:
    try:
        return str(Path(path).relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def _build_command(config: Path) -> str:
    """The command that builds what `config` serves: the Makefile's target for the project's own
    serving.toml, the build's CLI for a user's file (make build-engines would build the default one)."""
    return ("`make build-engines`" if Path(config).resolve() == DEFAULT_CONFIG.resolve()
            else f"`python -m model_build build --config {_short(config)}`")


def _check_rendered_configs(config: Path, models: list[str]) -> None:
    """Refuse configs rendered from an older version of `config`; warn about configs rendered from
    another serving.toml with other settings (contracts.rendered_configs)."""
    found = check_rendered_configs(config, models, ARTIFACTS_DIR)
    render = _build_command(config)
    if found.stale:
        raise ServingError(f"{_short(config)} changed since the served configs of {list(found.stale)} were rendered from it: "
                           f"Triton would serve the old settings. Run {render} (cached: it re-renders every config in "
                           f"seconds) and serve again.")
    if found.other_settings:
        sources = sorted({source for _, source in found.other_settings})
        print(f"[serve] WARNING: the configs of {[m for m, _ in found.other_settings]} were rendered from {sources}, whose "
              f"batching, priority, model or partition settings differ from {_short(config)}'s: Triton serves what those "
              f"configs hold. To serve this file's, run {render}.", file=sys.stderr)


def cmd_serve(args: argparse.Namespace) -> int:
    layout = RunLayout(Path(args.run_dir))
    spec = with_server_overrides(load_serving_spec(args.config, args.allow_non_loopback), **_overrides(args))
    repository = Path(args.repository or Path(args.config).resolve().parent).resolve()
    missing = [m.name for m in spec.models if not (repository / m.name / "config.pbtxt").exists()]
    if missing:
        built_there = DEFAULT_CONFIG.parent.resolve()
        if repository != built_there and all((built_there / name / "config.pbtxt").exists() for name in missing):
            raise ServingError(f"models {missing} are not built into {repository} (the folder of --config); `make "
                               f"build-engines` installs every model into {built_there} whatever its config: pass "
                               f"--repository {built_there}.")
        where = "" if repository == built_there else (
            f" (it installs into {built_there} whatever the config's folder), then serve with --repository {built_there}")
        raise ServingError(f"models {missing} are not built into {repository}; run {_build_command(args.config)} first{where}.")
    if repository == MODEL_REPOSITORY.resolve():  # where the build installs, and records what from
        _check_rendered_configs(Path(args.config), [m.name for m in spec.models])
    plan, gpu = plan_for_this_host(spec, force_cpu=args.cpu_sets)
    bind_warning = check_bind_host(spec.server.host, spec.server.allow_non_loopback)
    if bind_warning:
        print(f"[serve] {bind_warning}", file=sys.stderr)
    # the servers are started by the supervisor, whose own warning goes to its log only: say it here too
    _, native_warning = preload_environment(plan.cond_wait_cap_us, dict(os.environ), gzip_level=plan.http_gzip_level,
                                            max_input_bytes=plan.max_input_bytes)
    if native_warning:
        print(f"[serve] WARNING: {native_warning}", file=sys.stderr)
    admin_key = load_admin_key()  # checked here (location, mode) so a bad key file fails before anything starts
    print(f"[serve] admin APIs ({', '.join(RESTRICTED_APIS)}) locked with "
          + (f"the key from {admin_key.source}" if admin_key else
             "a one-off key (no TRITON_ADMIN_KEY, no key file): create one with `make admin-key`"))
    if not gpu.present:
        print(f"[serve] {gpu.detail}: {CPU_PLACEMENT_LINES.get(plan.mechanism, plan.mechanism.value)}; CUDA MPS is not started")
    else:
        print(f"[serve] {gpu.detail}: starting the CUDA MPS control daemon (pipe and logs under {_short(layout.mps_pipe.parent)})")
    for note in plan.notes:
        print(f"[serve] NOTE: {note}")
    extra = (["--cpu-sets"] if args.cpu_sets else []) + list(args.supervise_arg)
    for flag, value in _overrides(args).items():
        if value:
            extra += [f"--{flag.replace('_', '-')}"] + ([] if value is True else [str(value)])
    print(f"[serve] supervisor log: {_short(layout.supervisor_log)}; waiting for {len(plan.partitions)} partition(s)")
    manifest = start_supervisor(Path(args.config).resolve(), repository, layout, timeout_s=args.timeout, extra_args=extra)
    for name, part in manifest.partitions.items():
        share = partition_share(manifest.mechanism, part)
        print(f"[serve] {name}: ready pid {part.pid} HTTP {part.http} gRPC {part.grpc} metrics {part.metrics} "
              f"{share} threads {part.intra_op_threads} memory {part.memory_mb} MiB models {list(part.models)}")
    state = read_supervisor_state(layout)
    for name, part in (state.partitions if state else {}).items():
        if part.failed_models:
            print(f"[serve] WARNING: partition {name} serves without {part.failed_models}: they failed to load "
                  f"(see {_short(layout.partition_log(name))})")
    print(f"[serve] manifest: {_short(layout.manifest)}; stop with {layout.stop_command}")
    return _report_failed_models(manifest, layout, admin_key)


def _report_failed_models(manifest: Manifest, layout: RunLayout, admin_key) -> int:
    """Models that failed to load (missing/corrupt file) are named with Triton's reason; the others
    keep being served (tritonserver runs with --exit-on-error=false). Exit code 1 if any failed."""
    failed = {}
    for name, part in manifest.partitions.items():
        host, _, port = str(part.http).rpartition(":")
        for model, reason in check_models_loaded(host, int(port), list(part.models), admin_key, layout.partition_log(name)).items():
            failed[model] = reason
            print(f"[serve] ERROR: model {model} (partition {name}) failed to load: {reason}", file=sys.stderr)
    if failed:
        print(f"[serve] {len(failed)} model(s) not served: {sorted(failed)}; every other model is served. "
              f"Fix the model files, then restart: {layout.restart_command}.", file=sys.stderr)
    return 1 if failed else 0


def cmd_supervise(args: argparse.Namespace) -> int:
    spec = with_server_overrides(load_serving_spec(args.config, args.allow_non_loopback), **_overrides(args))
    bind_warning = check_bind_host(spec.server.host, spec.server.allow_non_loopback)
    if bind_warning:  # stderr is the supervisor log
        print(f"supervisor {bind_warning}", file=sys.stderr, flush=True)
    policy = RestartPolicy(initial_backoff_s=args.initial_backoff, max_restarts=args.max_restarts, window_s=args.restart_window,
                           crash_loop_backoff_s=args.crash_loop_backoff, stable_after_s=args.stable_after)
    return run_supervisor(Path(args.config), Path(args.repository), Path(args.run_dir), force_cpu=args.cpu_sets,
                          overrides=_overrides(args), policy=policy)


def cmd_stop(args: argparse.Namespace) -> int:
    layout = RunLayout(Path(args.run_dir))
    done = stop_supervisor(layout)
    for line in done or ["nothing to stop"]:
        print(f"[stop] {line}")
    return 0


def partition_restart_line(part: PartitionStatus, since_s: float = 0.0) -> str | None:
    """The restart budget and, when the partition is waiting to restart, when and why (for `status`).
    `since_s`: how old the state file is. The supervisor writes it when something changes, so its
    countdown is as of then: shown as is, a crash loop said "next attempt in 300 s" for 5 minutes."""
    if part.next_attempt_in_s is not None:
        part = dataclasses.replace(part, next_attempt_in_s=max(0.0, part.next_attempt_in_s - max(0.0, since_s)))
    if part.crash_loop:
        # "in the last window" counts down while the loop lasts (attempts every crash_loop_backoff_s)
        return (f"    CRASH LOOP: restart budget of {part.restart_budget} spent; {part.restarts_in_window} restart(s) "
                f"in the last {part.window_s:.0f} s; "
                + (f"next attempt in {part.next_attempt_in_s:.0f} s" if part.next_attempt_in_s is not None else "retrying")
                + f"; budget spent {max(part.crash_loops, 1)} time(s); alert ServingPartitionCrashLooping")
    if part.state == "backoff":
        return (f"    restarting in {part.next_attempt_in_s or 0:.1f} s (restart {part.restarts_in_window + 1} "
                f"of {part.restart_budget} in {part.window_s:.0f} s)")
    return None


def partition_history_lines(part: PartitionStatus) -> list[str]:
    """What the supervisor did to a partition, for `status`: its last exit (crash or hang) and every
    model whose backend stub it reloaded or could not heal (from run/supervisor.json)."""
    lines = [f"    last exit: {part.last_exit}"] if part.last_exit else []
    for model, stubs in sorted(part.stubs.items()):
        if stubs.eventful:
            lines.append(f"    model {model}: backend stub reloads {stubs.reloads}, {stubs.status}"
                         + (f"; last: {stubs.last_reason}" if stubs.last_reason else ""))
    return lines


def cmd_status(args: argparse.Namespace) -> int:
    layout = RunLayout(Path(args.run_dir))
    state = read_supervisor_state(layout)
    if not state or not state.running:
        last = f" (last run {state.status}{': ' + state.error if state.error else ''})" if state else ""
        print(f"no partitions running from `make serve`{last}")
        return 1
    manifest = read_manifest(layout.manifest) if layout.manifest.exists() else Manifest()
    # this run's supervisor, not any process that has its pid now (reused after a reboot or a kill)
    supervisor_up = is_run_supervisor(state.supervisor_pid, layout)
    print(f"supervisor pid {state.supervisor_pid} {'running' if supervisor_up else 'NOT RUNNING'}; "
          f"status {state.status}; mechanism {state.mechanism}")
    healthy = supervisor_up
    for name, part in state.partitions.items():
        endpoints = manifest.partitions.get(name, PartitionEntry(name))
        host, _, port = (endpoints.http or ":").rpartition(":")
        # the partition's own port decides: the state file can be stale (written when something changes,
        # and not at all while the disk is full), and then names a pid that is gone while a restarted
        # server answers
        ready = bool(port) and http_ready(host, int(port))
        unready = check_models_loaded(host, int(port), list(endpoints.models), None, layout.partition_log(name)) if ready else {}
        healthy &= ready and not unready
        stale = " (run/supervisor.json is stale: that pid is gone)" if ready and part.pid and not pid_alive(part.pid) else ""
        print(f"  {name}: pid {part.pid}{stale} {'READY' if ready else 'NOT READY'} ({part.state}, restarts {part.restarts}) "
              f"http {endpoints.http} grpc {endpoints.grpc} cpus {list(endpoints.cpus)} models {list(endpoints.models)}")
        restart_line = partition_restart_line(part, time.time() - state.updated_at if state.updated_at else 0.0)
        if restart_line:
            print(restart_line)
        for model, reason in unready.items():
            print(f"    model {model} NOT READY: {reason}")
        for line in partition_history_lines(part):
            print(line)
        # a dead stub the supervisor no longer reloads: part of that model's requests fail
        healthy &= not any(stubs.status in UNHEALED_STUB_STATES for stubs in part.stubs.values())
    return 0 if healthy else 1


def cmd_build_native(args: argparse.Namespace) -> int:
    """`make setup`: compile serving/runtime/native/*.c into the environment (one line per helper either way)."""
    from serving.runtime.native import build_helpers

    for helper, path, what in build_helpers():
        print(f"[setup] {helper.name}: {what}" if path else f"[setup] WARNING: {what}")
    return 0


def cmd_admin_key(args: argparse.Namespace) -> int:
    """Create the key file if missing; never print the key."""
    path, created = create_admin_key_file(args.key_file)
    if created:
        print(f"[admin-key] created {path} (mode 0600); servers started from now on require it for the "
              f"{', '.join(RESTRICTED_APIS)} APIs")
    else:
        print(f"[admin-key] {path} already exists (mode 0600); to rotate it see docs/operations.md")
    return 0


def _add_server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="the serving.toml to serve (default: %(default)s)")
    parser.add_argument("--repository", help="model repository (default: the folder holding --config)")
    parser.add_argument("--run-dir", default=str(RUN_DIR), help="pids, logs, manifest (default: run/)")
    parser.add_argument("--host", help="override [server] host")
    parser.add_argument("--http-port", type=int, help="override the base HTTP port (partition i adds i * stride)")
    parser.add_argument("--grpc-port", type=int, help="override the base gRPC port")
    parser.add_argument("--metrics-port", type=int, help="override the base metrics port")
    parser.add_argument("--supervisor-metrics-port", type=int, help="override [server] supervisor_metrics_port")
    parser.add_argument("--cpu-sets", action="store_true", help="use CPU sets even on a GPU host (no MPS)")
    parser.add_argument("--allow-non-loopback", action="store_true",
                        help="allow --host / [server] host other than loopback (logged as a warning)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serving", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start one tritonserver per partition under a supervisor; return once ready")
    _add_server_args(serve)
    serve.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for every partition to be ready (default %(default)s)")
    serve.add_argument("--supervise-arg", action="append", default=[], metavar="ARG",
                       help="passed on to the supervisor's command line, e.g. --supervise-arg=--max-restarts=2 "
                            "(restart policy flags: see `python -m serving supervise --help`)")
    serve.set_defaults(func=cmd_serve)
    supervise = sub.add_parser("supervise", help="(internal) the supervisor process that `serve` starts")
    _add_server_args(supervise)
    supervise.add_argument("--initial-backoff", type=float, default=RestartPolicy.initial_backoff_s,
                           help="seconds before the first restart of a partition that went down, doubling after (default %(default)s)")
    supervise.add_argument("--max-restarts", type=int, default=RestartPolicy.max_restarts,
                           help="restarts within --restart-window before a partition is in a crash loop (default %(default)s)")
    supervise.add_argument("--restart-window", type=float, default=RestartPolicy.window_s,
                           help="seconds over which --max-restarts are counted (default %(default)s)")
    supervise.add_argument("--crash-loop-backoff", type=float, default=RestartPolicy.crash_loop_backoff_s,
                           help="seconds between attempts once the restart budget is spent")
    supervise.add_argument("--stable-after", type=float, default=RestartPolicy.stable_after_s,
                           help="seconds ready before a partition counts as recovered")
    supervise.set_defaults(func=cmd_supervise)
    stop = sub.add_parser("stop", help="stop the supervisor, then every server it started")
    stop.add_argument("--run-dir", default=str(RUN_DIR))
    stop.set_defaults(func=cmd_stop)
    admin_key = sub.add_parser("admin-key", help="create the admin key file (mode 0600, outside the repo) if missing")
    admin_key.add_argument("--key-file", help="default: $TRITON_ADMIN_KEY_FILE or ~/.config/triton-model-serving/admin-key")
    admin_key.set_defaults(func=cmd_admin_key)
    native = sub.add_parser("build-native", help="(make setup) build the helpers preloaded into tritonserver: condition-wait cap, HTTP gzip level, request guard")
    native.set_defaults(func=cmd_build_native)
    status = sub.add_parser("status", help="show the partitions and their readiness")
    status.add_argument("--run-dir", default=str(RUN_DIR))
    status.set_defaults(func=cmd_status)
    return run_subcommand(parser, argv, (ServingError,))


if __name__ == "__main__":
    sys.exit(main())
