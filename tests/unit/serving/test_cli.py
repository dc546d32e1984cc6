"""What `python -m serving serve` prints about how each partition shares the machine."""
import pytest
from contracts.partition_plan import Mechanism
from contracts.manifest import PartitionEntry
from serving.cli import CPU_PLACEMENT_LINES, partition_share

PART = PartitionEntry("main", cpus=(0,), compute_share=50, mps={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})


def test_each_mechanism_names_its_own_share_and_only_a_gpu_host_shows_mps():
    assert partition_share(Mechanism.ELASTIC_CPU_SETS.value, PART) == "home cpus [0] (elastic)"
    assert partition_share(Mechanism.CPU_SETS.value, PART) == "cpus [0]"
    assert partition_share(Mechanism.CPU_SHARES.value, PART) == "cpus [0] weight 50%"
    assert partition_share(Mechanism.CUDA_MPS.value, PART) == "MPS {'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '50'}"


def test_every_cpu_mechanism_has_its_own_line():
    cpu_mechanisms = [m for m in Mechanism if m is not Mechanism.CUDA_MPS]
    assert set(CPU_PLACEMENT_LINES) == set(cpu_mechanisms)
    assert len(set(CPU_PLACEMENT_LINES.values())) == len(cpu_mechanisms)


def test_allow_non_loopback_on_the_command_line_admits_a_non_loopback_host_from_serving_toml(tmp_path, capsys):
    """The refusal of `[server] host = "0.0.0.0"` says "(or pass --allow-non-loopback)": passed, the
    flag must admit it (it used to be applied only after serving.toml had been refused)."""
    from serving.cli import main

    config = tmp_path / "serving.toml"
    config.write_text('[server]\nhost = "0.0.0.0"\n\n[models.digits]\nrecipe = "digit_cnn"\n')
    assert main(["serve", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 1
    assert "(or pass --allow-non-loopback)" in capsys.readouterr().err
    assert main(["serve", "--config", str(config), "--allow-non-loopback", "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "not a loopback address" not in err and "models ['digits'] are not built into" in err
    # a user's serving.toml is built by the build's CLI (`make build-engines` builds the project's own)
    assert f"run `python -m model_build build --config {config}` first (it installs into " in err, err
    assert "then serve with --repository " in err, err  # the build does not install beside the user's file


def test_a_config_outside_the_model_repository_is_told_where_the_build_installed(tmp_path, capsys):
    """model_build installs into the project's model_repository/ whatever --config says; `serve` looked
    beside the config and said "run `make build-engines` first", which had just been run."""
    from serving.cli import DEFAULT_CONFIG, main

    built = [p.parent.name for p in DEFAULT_CONFIG.parent.glob("*/config.pbtxt")]
    if "digit_classifier" not in built:
        pytest.skip("needs a built digit_classifier (make build-engines)")
    config = tmp_path / "serving.toml"
    config.write_text('[models.digit_classifier]\nrecipe = "digit_cnn"\n')
    assert main(["serve", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert f"--repository {DEFAULT_CONFIG.parent.resolve()}" in err, err


def test_serve_says_how_to_stop_what_it_started_in_its_own_run_dir(tmp_path):
    """`make stop` stops run/ only: a server started with --run-dir elsewhere was told to use it."""
    from contracts.layout import RUN_DIR, RunLayout

    assert RunLayout(RUN_DIR).stop_command == "`make stop`"
    assert RunLayout(tmp_path / "adv run").stop_command == f"`python -m serving stop --run-dir '{tmp_path / 'adv run'}'`"


def test_status_does_not_take_a_reused_pid_for_the_supervisor_nor_a_dead_stub_left_alone_for_healthy(tmp_path, capsys):
    """`status` said "running" for any live process with the recorded pid (reused after a reboot), and
    exited 0 while a model ran with a stub the supervisor had given up on (a review, 2026-12-06)."""
    import os

    from contracts.layout import RunLayout
    from contracts.supervisor_state import SupervisorState, write_supervisor_state
    from serving.cli import main

    layout = RunLayout(tmp_path / "run")
    layout.run_dir.mkdir(parents=True)
    write_supervisor_state(SupervisorState.from_dict({
        "supervisor_pid": os.getpid(), "status": "ready", "mechanism": "cpu_sets", "partitions": {
            "p": {"state": "ready", "restarts": 0, "stubs": {"m": {"reloads": 5, "status": "gave_up"}}}}}),
        layout.supervisor_state)
    assert main(["status", "--run-dir", str(layout.run_dir)]) == 1
    out = capsys.readouterr().out
    assert f"supervisor pid {os.getpid()} NOT RUNNING" in out and "model m: backend stub reloads 5, gave_up" in out


def test_what_to_run_names_the_run_folder_that_was_served(tmp_path):
    """A second `serve` of another run folder was told to run `make stop`, which stops the default
    run/ (another, healthy deployment) or nothing (a review, 2026-12-06)."""
    from contracts.errors import ServerStartError
    from contracts.layout import RUN_DIR, RunLayout
    from contracts.supervisor_state import SupervisorState, write_supervisor_state
    from serving.runtime import supervisor_control

    layout = RunLayout(tmp_path / "other run")
    assert RunLayout(RUN_DIR).restart_command == "`make stop && make serve`"
    assert layout.restart_command.startswith(f"`python -m serving stop --run-dir '{tmp_path / 'other run'}'`, then")
    layout.run_dir.mkdir(parents=True)
    write_supervisor_state(SupervisorState.from_dict({"supervisor_pid": 4242, "status": "ready", "partitions": {}}),
                           layout.supervisor_state)
    supervisor_control_is_running = supervisor_control.is_run_supervisor
    try:
        supervisor_control.is_run_supervisor = lambda pid, run: True
        with pytest.raises(ServerStartError, match=r"already running \(pid 4242\); run `python -m serving stop --run-dir"):
            supervisor_control._start_supervisor(tmp_path / "serving.toml", tmp_path, layout, 1.0, ())
    finally:
        supervisor_control.is_run_supervisor = supervisor_control_is_running


def test_a_run_folder_that_cannot_be_written_is_one_line_for_serve_and_stop(tmp_path, monkeypatch):
    """`serve` and `stop` on a read-only or full run folder ended in Python tracebacks (a review, 2026-12-06)."""
    import errno
    from pathlib import Path

    from contracts.errors import ServerStartError
    from contracts.layout import RunLayout
    from serving.runtime import supervisor_control

    layout = RunLayout(tmp_path / "run")
    layout.run_dir.mkdir()
    layout.manifest.write_text("{}")
    real_open, real_unlink = open, Path.unlink

    def read_only_open(path, *args, **kwargs):
        if str(path) == str(layout.serve_lock):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", read_only_open)
    with pytest.raises(ServerStartError, match=r"run folder .* cannot be written \(Read-only file system\).*--run-dir"):
        with supervisor_control.starting_alone(layout):
            pass
    monkeypatch.setattr("builtins.open", real_open)

    def read_only_unlink(self, missing_ok=False):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "unlink", read_only_unlink)
    done = supervisor_control.stop_supervisor(layout)
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert any("could not remove" in line and "manifest.json" in line for line in done), done


def test_stop_marks_the_state_of_a_supervisor_that_died_without_saying_so(tmp_path, capsys):
    """After a SIGKILL or a reboot, `stop` said "nothing to stop" and left supervisor.json saying
    "ready": `status` kept reporting a running supervisor (a review, 2026-12-06)."""
    from contracts.layout import RunLayout
    from contracts.supervisor_state import SupervisorState, read_supervisor_state, write_supervisor_state
    from serving.cli import main

    layout = RunLayout(tmp_path / "run")
    layout.run_dir.mkdir(parents=True)
    write_supervisor_state(SupervisorState.from_dict({"supervisor_pid": 999_999_999, "status": "ready", "partitions": {}}),
                           layout.supervisor_state)
    assert main(["stop", "--run-dir", str(layout.run_dir)]) == 0
    assert "marked" in capsys.readouterr().out and read_supervisor_state(layout.supervisor_state).status == "stopped"
    assert main(["status", "--run-dir", str(layout.run_dir)]) == 1
    assert "no partitions running" in capsys.readouterr().out


def test_status_asks_the_partitions_port_when_the_state_file_names_a_pid_that_is_gone(tmp_path, capsys):
    """With the disk full the supervisor cannot rewrite its state: a restarted partition served while
    `status` said NOT READY for the dead pid on file (a review, 2026-12-06)."""
    import json
    from http.server import BaseHTTPRequestHandler

    from conftest import serve_loopback_http
    from contracts.layout import RunLayout
    from contracts.supervisor_state import SupervisorState, write_supervisor_state
    from serving.cli import main

    class Ready(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's API
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = serve_loopback_http(Ready)
    try:
        layout = RunLayout(tmp_path / "run")
        layout.run_dir.mkdir(parents=True)
        port = server.server_address[1]
        layout.manifest.write_text(json.dumps({"models": {}, "partitions": {"main": {"http": f"127.0.0.1:{port}", "models": []}}}))
        write_supervisor_state(SupervisorState.from_dict({"supervisor_pid": 999_999_999, "status": "ready", "partitions": {
            "main": {"pid": 999_999_998, "state": "ready", "restarts": 0}}}), layout.supervisor_state)
        main(["status", "--run-dir", str(layout.run_dir)])
        out = capsys.readouterr().out
        assert "main: pid 999999998 (run/supervisor.json is stale: that pid is gone) READY" in out, out
    finally:
        server.shutdown()
        server.server_close()


def test_serve_refuses_configs_of_an_older_serving_toml_and_warns_about_another_files(tmp_path, monkeypatch, capsys):
    """The build records which serving.toml each config was rendered from (contracts.rendered_configs):
    an edit since is refused with the command that renders that very file; configs rendered from
    another file with other settings are served with a warning."""
    from contracts.errors import ServingError
    from contracts.rendered_configs import settings_digest, write_rendered_from
    from serving import cli

    monkeypatch.setattr(cli, "ARTIFACTS_DIR", tmp_path / "artifacts")
    mine = tmp_path / "mine.toml"
    mine.write_text("[priorities.realtime]\nlevel = 1\nmax_queue_size = 24\n")
    write_rendered_from(tmp_path / "artifacts" / "m", mine, settings_digest(mine.read_text()))
    cli._check_rendered_configs(mine, ["m"])  # current: nothing said
    assert capsys.readouterr().err == ""
    mine.write_text(mine.read_text().replace("24", "20"))
    with pytest.raises(ServingError, match=r"mine.toml changed since the served configs of \['m'\] were rendered from it: "
                                           r"Triton would serve the old settings. Run `python -m model_build build --config "):
        cli._check_rendered_configs(mine, ["m"])
    other = tmp_path / "other.toml"
    other.write_text("[priorities.realtime]\nlevel = 1\nmax_queue_size = 8\n")
    cli._check_rendered_configs(other, ["m"])
    assert "WARNING: the configs of ['m'] were rendered from" in capsys.readouterr().err
