"""Launcher and supervisor planning: flags, pinning, MPS environment, manifest, restart policy."""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from contracts.errors import ConfigError
from serving.runtime.launcher import (
    RunLayout, build_manifest, mps_environment, partition_server_process, partition_server_settings, with_server_overrides,
)
from contracts.partition_plan import plan_partitions
from serving.runtime.server import TritonInstallation
from contracts.serving_spec import serving_spec_from_dict
from contracts.supervisor_state import PartitionStatus, SupervisorState, write_supervisor_state
from serving.runtime.supervisor import PartitionState, RestartPolicy, Supervisor, describe_exit, stop_supervisor

SPEC = serving_spec_from_dict({
    "server": {"http_port": 9000, "grpc_port": 9001, "metrics_port": 9002},
    "partitions": {"p": {"compute_share": 50, "memory_mb": 512}, "q": {"compute_share": 50, "memory_mb": 256}},
    "models": {"a": {"recipe": "digit_cnn", "partition": "p"}, "b": {"recipe": "digit_cnn", "partition": "q"}},
    "placement": {"cpu": "cpu_sets"},
})


def _partition(entry: dict) -> PartitionStatus:
    """A partition entry as `make status` gets it: through run/supervisor.json's typed reader."""
    return SupervisorState.from_dict({"supervisor_pid": 1, "partitions": {"p": entry}}).partitions["p"]


INSTALLATION = TritonInstallation(binary=Path("/opt/tritonserver/bin/tritonserver"), backends_dir=Path("/opt/tritonserver/backends"), bundled=False)


def test_server_settings_for_a_partition_load_only_its_models_on_its_ports():
    plan = plan_partitions(SPEC, 2, False)
    args = partition_server_settings(plan, plan.partition("q"), Path("/repo"), Path("/backends")).to_args_list()
    assert "--http-port=9010" in args and "--grpc-port=9011" in args and "--metrics-port=9012" in args
    assert "--model-control-mode=explicit" in args and "--load-model=b" in args and "--load-model=a" not in args


def test_cpu_plan_pins_the_server_and_sizes_onnx_runtime_threads(tmp_path):
    plan = plan_partitions(SPEC, 2, False)
    process = partition_server_process(INSTALLATION, plan, plan.partition("q"), Path("/repo"), RunLayout(tmp_path))
    assert process.cpus == (1,)
    assert process.extra_env["SERVING_INTRA_OP_THREADS"] == "1"
    assert not any(k.startswith("CUDA_MPS") for k in process.extra_env)
    assert process.log_path == tmp_path / "logs" / "tritonserver-q.log"


def test_cpu_shares_plan_runs_on_every_core_with_its_weight(tmp_path):
    from dataclasses import replace

    from serving.runtime.cpu_shares import WeightMethod, plan_cpu_weights
    from contracts.serving_spec import CpuPlacement, Placement

    plan = plan_partitions(replace(SPEC, placement=Placement(CpuPlacement.SHARES)), 2, False)
    weight = plan_cpu_weights({"p": 50, "q": 50}, WeightMethod.NICE, None)["q"]
    process = partition_server_process(INSTALLATION, plan, plan.partition("q"), Path("/repo"), RunLayout(tmp_path), weight)
    assert process.cpus == (0, 1) and process.cpu_weight is weight
    assert process.extra_env["SERVING_INTRA_OP_THREADS"] == "2"  # the backend splits it between instances


def test_gpu_plan_gives_mps_variables_and_the_run_dirs_pipe_instead_of_pinning(tmp_path):
    plan = plan_partitions(SPEC, 16, True)
    process = partition_server_process(INSTALLATION, plan, plan.partition("p"), Path("/repo"), RunLayout(tmp_path))
    assert process.cpus is None
    assert process.extra_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert process.extra_env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=512M"
    assert process.extra_env["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "pipe")
    assert mps_environment(RunLayout(tmp_path))["CUDA_MPS_LOG_DIRECTORY"] == str(tmp_path / "mps" / "log")


def test_manifest_keeps_the_format_clients_and_monitoring_read(tmp_path):
    plan = plan_partitions(SPEC, 2, False)
    manifest = build_manifest(plan, RunLayout(tmp_path), {"p": PartitionStatus(pid=11, state="ready", restarts=0),
                                                          "q": PartitionStatus(pid=12, state="ready", restarts=1)})
    assert manifest["models"]["b"] == {"http": "127.0.0.1:9010", "grpc": "127.0.0.1:9011",
                                       "metrics": "http://127.0.0.1:9012/metrics", "partition": "q"}
    q = manifest["partitions"]["q"]
    assert (q["pid"], q["models"], q["cpus"], q["restarts"]) == (12, ["b"], [1], 1)
    assert q["log"] == str(tmp_path / "logs" / "tritonserver-q.log")


def test_command_line_overrides_move_the_base_ports():
    spec = with_server_overrides(SPEC, http_port=19000, grpc_port=19001, metrics_port=19002)
    assert plan_partitions(spec, 2, False).partition("q").http_port == 19010
    assert with_server_overrides(SPEC) is SPEC


def test_backoff_doubles_and_is_capped():
    policy = RestartPolicy(initial_backoff_s=0.5, max_backoff_s=4.0)
    assert [policy.backoff_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_backoff_after_days_of_failures_stays_capped_instead_of_overflowing():
    """A partition crash-looping for ~35 h reaches ~1,025 failures; 0.5 * 2 ** 1024 used to raise
    OverflowError inside the supervisor's tick, which then stopped every partition."""
    policy = RestartPolicy()
    assert policy.backoff_s(1_026) == policy.backoff_s(10**9) == policy.max_backoff_s


def test_a_partition_that_cannot_even_be_started_again_is_retried_and_the_supervisor_keeps_running(tmp_path, monkeypatch):
    supervisor = Supervisor(plan_partitions(SPEC, 2, False), tmp_path / "repository", RunLayout(tmp_path))
    try:
        supervisor.status = "degraded"
        broken, other = supervisor.parts["p"], supervisor.parts["q"]
        broken.state, broken.deadline = PartitionState.BACKOFF, 0.0
        other.state, other.deadline = PartitionState.BACKOFF, 1e9  # not due: the tick leaves it alone

        def refuse(sp, now):
            raise PermissionError("admin key file run/admin.key is readable by its group")

        monkeypatch.setattr(supervisor, "_launch", refuse)
        assert supervisor.tick(10.0)
        assert supervisor.status == "degraded" and supervisor.error is None
        assert broken.last_exit == "could not be started: PermissionError: admin key file run/admin.key is readable by its group"
        assert (broken.state, broken.deadline, broken.consecutive_failures) == (PartitionState.BACKOFF, 10.5, 1)
        assert broken.restart_times == [10.0]
    finally:
        supervisor.probes.shutdown()


def test_restarts_are_bounded_within_the_window():
    policy = RestartPolicy(max_restarts=3, window_s=60)
    assert policy.allows_restart([0, 10], now=20)
    assert not policy.allows_restart([0, 10, 15], now=20)
    assert policy.allows_restart([0, 10, 15], now=70.5)  # the first two have left the window


def test_invalid_policy_is_rejected():
    with pytest.raises(ConfigError, match="backoff"):
        RestartPolicy(initial_backoff_s=5, max_backoff_s=1)


@pytest.mark.parametrize("fields, message", [
    ({"liveness_interval_s": 0}, r"liveness_interval_s = 0: allowed > 0 seconds"),
    ({"liveness_timeout_s": 3.0}, r"liveness_timeout_s = 3.0: allowed 0 < timeout <= liveness_interval_s \(2.0\)"),
    ({"liveness_timeout_s": -1.0}, r"liveness_timeout_s = -1.0: allowed 0 < timeout"),
    ({"liveness_failures": 0}, r"liveness_failures = 0: allowed an integer >= 1"),
    ({"liveness_failures": 2.5}, r"liveness_failures = 2.5: allowed an integer >= 1"),
])
def test_invalid_liveness_settings_are_rejected_naming_field_value_and_what_is_allowed(fields, message):
    with pytest.raises(ConfigError, match=message):
        RestartPolicy(**fields)


def test_liveness_defaults_act_on_a_hang_within_8_s():
    policy = RestartPolicy()
    assert (policy.liveness_interval_s, policy.liveness_timeout_s, policy.liveness_failures) == (2.0, 2.0, 3)
    assert policy.hang_detection_s == 8.0


def test_exit_descriptions_name_the_signal():
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"


def test_stop_with_nothing_running_does_nothing(tmp_path):
    assert stop_supervisor(RunLayout(tmp_path)) == []


def test_a_new_start_stops_the_servers_a_dead_supervisor_left_behind(tmp_path):
    """They run in their own sessions and outlive a SIGKILLed supervisor; a new start deleted the
    state file that recorded them, so they kept their ports and `make stop` found nothing."""
    import subprocess
    import sys

    from serving.runtime.supervisor_control import clear_stale_run

    stand_in = tmp_path / "tritonserver"  # a process whose command line names tritonserver, as a server's does
    stand_in.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    stand_in.chmod(0o755)
    layout, other_run = RunLayout(tmp_path / "run"), RunLayout(tmp_path / "other-checkout" / "run")
    orphan = subprocess.Popen([str(stand_in), f"--backend-directory={layout.backends}"], start_new_session=True)
    # a server of another run (another checkout on the host) whose pid the state file names: the
    # pid was reused since, and it is not ours to stop
    foreign = subprocess.Popen([str(stand_in), f"--backend-directory={other_run.backends}"], start_new_session=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    layout.run_dir.mkdir(parents=True)
    write_supervisor_state(SupervisorState.from_dict(
        {"supervisor_pid": dead.pid, "status": "ready", "partitions": {"main": {"pid": orphan.pid, "state": "ready"},
                                                                       "fallback": {"pid": foreign.pid, "state": "ready"}}}),
        layout.supervisor_state)
    try:
        done = clear_stale_run(layout)
        assert done[0] == f"stopped partition main (pid {orphan.pid}) left behind"
        assert len(done) == 2 and done[1].startswith("marked ") and f"pid {dead.pid}, was gone" in done[1]
        assert orphan.wait(timeout=10) is not None and not layout.supervisor_state.exists()
        assert foreign.poll() is None  # still running
        assert clear_stale_run(layout) == []  # nothing recorded: nothing to do
    finally:
        orphan.kill()
        foreign.kill()


def test_only_a_supervisor_of_this_run_folder_is_taken_for_ours(tmp_path):
    """`make stop` signalled any live pid whose command line held "supervise": after a reboot or a
    SIGKILL the pid in run/ may belong to another checkout's supervisor."""
    import subprocess
    import sys

    from serving.runtime.supervisor_control import is_run_supervisor

    layout = RunLayout(tmp_path / "run")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "serving", "supervise"]
    ours = subprocess.Popen([*sleeper, "--run-dir", str(layout.run_dir)])
    theirs = subprocess.Popen([*sleeper, "--run-dir", str(tmp_path / "elsewhere" / "run")])
    try:
        # Popen can return inside the child's execve, before the kernel has set its new arguments
        # (vfork resumes the parent once the old memory is released): /proc/<pid>/cmdline is empty for
        # that moment, which failed this test once under load. A supervisor `make stop` finds has run long.
        for child in (ours, theirs):
            deadline = time.monotonic() + 10
            while b"supervise" not in Path(f"/proc/{child.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)
        assert is_run_supervisor(ours.pid, layout) and not is_run_supervisor(theirs.pid, layout)
        assert not is_run_supervisor(None, layout)
    finally:
        ours.kill()
        theirs.kill()


def test_status_shows_what_the_supervisor_did_to_a_partition():
    from serving.cli import partition_history_lines

    assert partition_history_lines(_partition({"last_exit": None, "stubs": {"m": {"reloads": 0, "status": "watching"}}})) == []
    lines = partition_history_lines(_partition({
        "last_exit": "hung: /v2/health/live unanswered 3 times in a row",
        "stubs": {"a": {"reloads": 0, "status": "watching"},
                  "b": {"reloads": 2, "status": "watching", "last_reason": "lost a backend stub (pid 7)"},
                  "c": {"reloads": 5, "status": "gave_up", "last_reason": "reload budget spent"}},
    }))
    assert lines == [
        "    last exit: hung: /v2/health/live unanswered 3 times in a row",
        "    model b: backend stub reloads 2, watching; last: lost a backend stub (pid 7)",
        "    model c: backend stub reloads 5, gave_up; last: reload budget spent",
    ]


def test_a_spent_budget_means_a_slow_crash_loop_not_giving_up():
    policy = RestartPolicy(max_restarts=3, window_s=600, crash_loop_backoff_s=300, initial_backoff_s=0.5)
    assert policy.next_restart([0, 10], consecutive_failures=3, now=20) == ("backoff", 2.0)
    assert policy.next_restart([0, 10, 15], consecutive_failures=4, now=20) == ("crash_loop", 300)
    # once the old restarts leave the window, quick restarts are allowed again ...
    assert policy.next_restart([0, 10, 15], consecutive_failures=4, now=700) == ("backoff", 4.0)
    # ... but not while the crash loop lasts (until the partition was ready for stable_after_s): it
    # went back to quick restarts every window_s, 5 starts per ~650 s instead of 1 per 300 s
    assert policy.next_restart([0, 10, 15], consecutive_failures=6, now=700, in_crash_loop=True) == ("crash_loop", 300)


def test_a_state_file_that_cannot_be_written_leaves_the_partitions_serving(tmp_path, monkeypatch):
    """A full disk failed a write of run/supervisor.json inside the loop: the supervisor stopped
    every partition. Now the write is logged once, retried every tick, and serving goes on; its
    metrics say so while it lasts (only the log did, once)."""
    supervisor = Supervisor(plan_partitions(SPEC, 2, False), tmp_path / "repository", RunLayout(tmp_path))
    try:
        def full_disk():
            raise OSError(28, "No space left on device")

        unwritten = lambda: [line for line in supervisor.metrics_text().splitlines()
                             if line.startswith("serving_supervisor_state_unwritten")]
        assert unwritten() == ["serving_supervisor_state_unwritten 0"]
        monkeypatch.setattr(supervisor, "write_state", full_disk)
        assert not supervisor._save_state() and not supervisor._save_state()
        assert supervisor.state_unwritten and supervisor.status == "starting"
        # the log says so once; the metric (and its alert) says so for as long as it lasts
        assert unwritten() == ["serving_supervisor_state_unwritten 1"]
        monkeypatch.setattr(supervisor, "write_state", lambda: None)
        assert supervisor._save_state() and not supervisor.state_unwritten
        assert unwritten() == ["serving_supervisor_state_unwritten 0"]
    finally:
        supervisor.probes.shutdown()


def test_a_partition_whose_port_another_process_holds_is_not_started(tmp_path):
    """A server already on the ports answered the readiness check in place of the partition's own."""
    import socket
    from dataclasses import replace

    from contracts.errors import ServerStartError

    supervisor = Supervisor(plan_partitions(SPEC, 2, False), tmp_path / "repository", RunLayout(tmp_path))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        sp = supervisor.parts["p"]
        sp.partition = replace(sp.partition, host="127.0.0.1", http_port=port)
        with pytest.raises(ServerStartError, match=rf"partition p: port\(s\) \[{port}\] on 127.0.0.1 are held"):
            supervisor._launch(sp, 0.0)
        assert sp.process is None
    finally:
        listener.close()
        supervisor.probes.shutdown()


def test_a_listener_that_does_not_speak_http_is_not_ready_rather_than_an_exception():
    """A bad status line (a gRPC port, a server killed mid-answer) escaped the readiness helpers and
    ended the supervisor's tick loop, with every partition."""
    import socket
    import threading

    from contracts.processes import server_ready
    from serving.runtime.model_readiness import model_readiness, served_model_config

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def answer_garbage():
        for _ in range(3):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"\x00\x00\x12\x04 not http\r\n\r\n")

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        assert server_ready("127.0.0.1", port, None, timeout=2.0) is False
        assert model_readiness("127.0.0.1", port, "m", timeout_s=2.0) is None
        with pytest.raises(OSError, match="no HTTP answer"):
            served_model_config("127.0.0.1", port, "m", timeout_s=2.0)
    finally:
        listener.close()


@pytest.mark.parametrize("fields, message", [
    ({"crash_loop_backoff_s": 1.0}, r"crash_loop_backoff_s = 1.0: allowed >= max_backoff_s \(8.0\)"),
    ({"stable_after_s": -1}, r"stable_after_s = -1: allowed >= 0 seconds"),
])
def test_invalid_crash_loop_settings_are_rejected(fields, message):
    with pytest.raises(ConfigError, match=message):
        RestartPolicy(**fields)


def test_status_names_a_crash_loop_and_when_the_next_attempt_comes():
    from serving.cli import partition_restart_line

    assert partition_restart_line(_partition({"state": "ready", "crash_loop": False})) is None
    line = partition_restart_line(_partition({"state": "crash_loop", "crash_loop": True, "restarts_in_window": 5,
                                              "restart_budget": 5, "window_s": 600.0, "next_attempt_in_s": 287.4,
                                              "crash_loops": 1}))
    assert line == ("    CRASH LOOP: restart budget of 5 spent; 5 restart(s) in the last 600 s; next attempt in 287 s; "
                    "budget spent 1 time(s); alert ServingPartitionCrashLooping")
    assert "restarting in 2.0 s (restart 3 of 5" in partition_restart_line(_partition(
        {"state": "backoff", "next_attempt_in_s": 2.0, "restarts_in_window": 2, "restart_budget": 5, "window_s": 600}))
    # the state file is written when something changes: its countdown is as of then (it stayed at 300 s
    # for the 5 minutes of a crash loop's wait; a review, 2026-12-06)
    aged = partition_restart_line(_partition({"state": "crash_loop", "crash_loop": True, "restarts_in_window": 5,
                                              "restart_budget": 5, "window_s": 600.0, "next_attempt_in_s": 300.0,
                                              "crash_loops": 1}), since_s=100.0)
    assert "next attempt in 200 s" in aged


def test_supervisor_metrics_expose_state_restarts_and_crash_loop():
    from serving.runtime.supervisor_metrics import METRIC_FAMILIES, render_supervisor_metrics

    text = render_supervisor_metrics(SupervisorState.from_dict({
        "supervisor_pid": 1, "status": "degraded", "mechanism": "cpu_sets", "partitions": {
            "main": {"state": "crash_loop", "crash_loop": True, "restarts": 7, "restarts_in_window": 5, "restart_budget": 5,
                     "crash_loops": 2, "stubs": {"enc": {"reloads": 1}}},
            "fallback": {"state": "ready", "crash_loop": False, "restarts": 0}}}))
    lines = set(text.splitlines())
    assert 'serving_partition_crash_loop{partition="main"} 1' in lines
    assert 'serving_partition_crash_loop{partition="fallback"} 0' in lines
    assert 'serving_partition_up{partition="main"} 0' in lines and 'serving_partition_up{partition="fallback"} 1' in lines
    assert 'serving_partition_state{partition="main",state="crash_loop"} 1' in lines
    assert 'serving_partition_state{partition="main",state="ready"} 0' in lines
    assert 'serving_partition_restarts_total{partition="main"} 7' in lines
    assert 'serving_model_stub_reloads_total{partition="main",model="enc"} 1' in lines
    assert 'serving_supervisor_info{status="degraded",mechanism="cpu_sets"} 1' in lines
    assert {f"# TYPE {name} {kind}" for name, (kind, _) in METRIC_FAMILIES.items()} <= lines


def test_a_model_that_failed_to_load_and_a_stub_left_dead_have_their_own_series():
    """A model that fails to load leaves no series in Triton's metrics and its 404s count as no failure,
    and a stub the watch gave up on was only a reload counter: no alert could see either (a review,
    2026-12-06). Models of a partition that is down get no readiness sample (that partition's own
    alert covers them)."""
    from serving.runtime.supervisor_metrics import render_supervisor_metrics

    lines = set(render_supervisor_metrics(SupervisorState.from_dict({
        "supervisor_pid": 1, "status": "ready", "mechanism": "cpu_sets", "partitions": {
            "main": {"state": "ready", "restarts": 0, "models_ready": {"digits": False, "text": True},
                     "stubs": {"text": {"reloads": 5, "status": "gave_up"}, "digits": {"reloads": 0, "status": "watching"}}},
            "fallback": {"state": "backoff", "restarts": 1, "models_ready": {"small": True},
                         "stubs": {"small": {"reloads": 0, "status": "no_key"}}}}})).splitlines())
    assert {'serving_model_ready{partition="main",model="digits"} 0', 'serving_model_ready{partition="main",model="text"} 1'} <= lines
    assert not any(line.startswith('serving_model_ready{partition="fallback"') for line in lines)
    assert {'serving_model_stubs_unhealed{partition="main",model="text"} 1',
            'serving_model_stubs_unhealed{partition="main",model="digits"} 0',
            'serving_model_stubs_unhealed{partition="fallback",model="small"} 1'} <= lines


def test_supervisor_metrics_pass_promtool_check_metrics():
    """`promtool check metrics` (Prometheus's own linter) reads the exposition without a complaint."""
    import shutil
    import subprocess

    from serving.runtime.supervisor_metrics import render_supervisor_metrics

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make setup installs Debian's prometheus package as root)")
    text = render_supervisor_metrics(SupervisorState.from_dict({"supervisor_pid": 1, "status": "ready", "mechanism": "cpu_sets",
                                                                "partitions": {"p": {"state": "ready", "restarts": 1,
                                                                                     "stubs": {"m": {"reloads": 0}}}}}))
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


def test_a_second_serve_of_the_same_run_folder_is_refused_while_the_first_starts(tmp_path):
    """Two `make serve` at once both found no supervisor and both started one (the second then
    cleared the first's state as stale): the one that starts holds the run folder's lock."""
    import subprocess
    import sys

    from contracts.errors import ServerStartError
    from serving.runtime.supervisor_control import start_supervisor, starting_alone

    layout = RunLayout(tmp_path / "run")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom pathlib import Path\nfrom contracts.layout import RunLayout\n"
         "from serving.runtime.supervisor_control import starting_alone\n"
         f"with starting_alone(RunLayout(Path({str(layout.run_dir)!r}))):\n    print('held', flush=True)\n    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ServerStartError, match=rf"another `serve` \(pid {holder.pid}\) is starting the servers of"):
            start_supervisor(tmp_path / "serving.toml", tmp_path, layout, timeout_s=1)
        assert not layout.supervisor_pid.exists()  # nothing was started
    finally:
        holder.kill()
        holder.wait()
    with starting_alone(layout):  # released with its process
        assert layout.serve_lock.read_text().strip() == str(__import__("os").getpid())
