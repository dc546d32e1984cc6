"""Dead backend stubs: which processes are stubs of which model, when to reload, the reload budget,
and the per-partition flow (with a scan and a reload passed in, so no server is needed)."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
from concurrent.futures import Future

import pytest

from contracts.errors import ConfigError
from serving.runtime.security import AdminKey, restricted_api_flags
from serving.runtime.stub_processes import StubProcess, expected_stub_count, parse_stub, python_based_backends, scan_stubs
from serving.runtime.stub_watch import (
    RELOAD_MARKER_PARAMETER, Action, ModelStubs, PartitionStubWatch, ReloadOutcome, StubStatus, after_reload,
    LEFTOVER_GRACE_S, STUBLESS_EXIT_GRACE_S, StubDrainWatch, observe, reload_config, repository_api_headers,
    stale_leftovers,
)
from serving.runtime.supervisor import RestartPolicy

STUB = "/run/backends/python/triton_python_backend_stub"
BUDGET = {"max_reloads": 2, "window_s": 600.0}


def stub_cmdline(model: str, instance: str) -> bytes:
    """A stub's /proc/<pid>/cmdline as Triton 2.51 starts it (seen with `ps` on a running server)."""
    argv = [STUB, f"/repo/{model}/1/model.py", "triton_onnxruntime_cpu_backend_shm_region_1", "1048576", "1048576",
            "4242", "/run/backends/python", "336", instance, "/run/backends/onnxruntime_cpu", ""]
    return "\0".join(argv).encode()


def stat_line(pid: int, comm: str, state: str, pgid: int) -> str:
    return f"{pid} ({comm}) {state} 4242 {pgid} {pgid} 0 -1 4194560 0 0 0 0\n"


def test_a_stub_names_its_model_and_instance_and_a_zombie_or_other_program_is_no_stub():
    assert parse_stub(7, stat_line(7, "triton_python_b", "S", 4242), stub_cmdline("digit_classifier", "digit_classifier_0_1")) == (
        4242, StubProcess(7, "digit_classifier", "digit_classifier_0_1"))
    # a command name with spaces or a parenthesis does not shift the fields after it
    assert parse_stub(8, stat_line(8, "a b) c", "R", 99), stub_cmdline("m", "m_0"))[0] == 99
    assert parse_stub(9, stat_line(9, "triton_python_b", "Z", 4242), b"") == (4242, None)  # dead, not yet reaped
    assert parse_stub(10, stat_line(10, "tritonserver", "S", 4242), b"/bin/tritonserver\0--model-repository=/r\0") == (4242, None)


def test_scan_finds_the_live_stubs_of_one_process_group_only(tmp_path):
    def process(pid, state, pgid, cmdline):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat_line(pid, "triton_python_b", state, pgid))
        (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)

    process(11, "S", 100, stub_cmdline("a", "a_0_0"))
    process(12, "S", 100, stub_cmdline("a", "a_0_1"))
    process(13, "Z", 100, b"")
    process(14, "S", 200, stub_cmdline("a", "a_0_0"))  # another partition's server
    (tmp_path / "self").mkdir()
    (tmp_path / "15").mkdir()  # vanished between listing and reading
    assert scan_stubs(100, proc=tmp_path) == (StubProcess(11, "a", "a_0_0"), StubProcess(12, "a", "a_0_1"))


def test_only_python_based_backends_run_stubs_one_per_instance(tmp_path):
    (tmp_path / "onnxruntime_cpu").mkdir()
    (tmp_path / "onnxruntime_cpu" / "model.py").write_text("")
    (tmp_path / "onnxruntime").mkdir()  # a native backend: a shared library, no model.py
    backends = python_based_backends(tmp_path)
    assert backends == {"python", "onnxruntime_cpu"}
    group = {"kind": "KIND_CPU", "count": 2, "gpus": []}
    assert expected_stub_count({"backend": "onnxruntime_cpu", "instance_group": [group]}, backends) == 2
    assert expected_stub_count({"backend": "python", "instance_group": [group, {"kind": "KIND_CPU", "count": 1}]}, backends) == 3
    assert expected_stub_count({"backend": "python", "instance_group": [{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}]},
                               backends) == 4
    assert expected_stub_count({"backend": "onnxruntime", "instance_group": [group]}, backends) == 0
    assert expected_stub_count({"backend": "", "platform": "ensemble"}, backends) == 0


def test_the_reload_config_differs_from_the_served_one_every_attempt_and_leaves_it_unchanged():
    served = {"name": "m", "backend": "python", "parameters": {"onnx_file": {"string_value": "model.onnx"}}}
    first, second = reload_config(served, 1), reload_config(reload_config(served, 1), 2)
    assert first["parameters"] == {"onnx_file": {"string_value": "model.onnx"}, RELOAD_MARKER_PARAMETER: {"string_value": "1"}}
    assert second["parameters"][RELOAD_MARKER_PARAMETER] == {"string_value": "2"} and first != served
    assert RELOAD_MARKER_PARAMETER not in served["parameters"]
    assert reload_config({"name": "m"}, 3)["parameters"] == {RELOAD_MARKER_PARAMETER: {"string_value": "3"}}


def test_the_repository_api_key_comes_from_the_servers_restricted_flag():
    key = AdminKey("k" * 32, "test")
    assert repository_api_headers(restricted_api_flags(key)) == key.http_headers()
    assert repository_api_headers({}) == {}  # the API is open: no header needed
    assert repository_api_headers(restricted_api_flags(key, ("logging",))) == {}
    assert repository_api_headers({"http_restricted_api": "model-repository:admin-key="}) is None


def test_first_scan_takes_the_generation_and_nothing_happens_while_all_its_stubs_live():
    m, decision = observe(ModelStubs("a", 2), frozenset({11, 12}), 0.0, **BUDGET)
    assert (m.generation, decision.action) == ({11, 12}, Action.NONE)
    # a stub that appears (a load in progress: auto-complete stub, new instances) changes nothing
    assert observe(m, frozenset({11, 12, 13}), 2.0, **BUDGET)[1].action is Action.NONE
    assert observe(m, frozenset({11, 12}), 4.0, **BUDGET) == (m, decision)


def test_a_lost_stub_starts_a_reload_and_the_new_stubs_become_the_generation():
    m = ModelStubs("a", 2, generation=frozenset({11, 12}))
    m, decision = observe(m, frozenset({12}), 10.0, **BUDGET)
    assert (decision.action, decision.detail) == (Action.RELOAD, "lost a backend stub (pid 11)")
    assert (m.status, m.attempts, m.reload_times, m.before) == (StubStatus.RELOADING, 1, (10.0,), {12})
    assert observe(m, frozenset(), 12.0, **BUDGET)[1].action is Action.NONE  # one reload at a time
    # the old instance (12) still runs while Triton unloads it: only 21 and 22 are the new generation
    m, decision = after_reload(m, ReloadOutcome("reloaded", 1.7), frozenset({12, 21, 22}), 12.0)
    assert decision.action is Action.RELOADED and decision.detail == "lost a backend stub (pid 11); reloaded in 1.7 s"
    assert (m.status, m.generation, m.reloads, m.last_reason) == (StubStatus.WATCHING, {21, 22}, 1, decision.detail)
    assert (m.leftovers, m.leftovers_since) == ({12}, 12.0)
    assert observe(m, frozenset({21, 22}), 14.0, **BUDGET)[1].action is Action.NONE  # 12 exiting is no loss


def test_replaced_stubs_still_running_after_the_grace_are_to_be_killed_and_only_those():
    m = ModelStubs("a", 2, generation=frozenset({21, 22}), leftovers=frozenset({12, 13}), leftovers_since=100.0)
    waiting, kill = stale_leftovers(m, frozenset({12, 21, 22}), 100.0 + LEFTOVER_GRACE_S - 0.1)
    assert kill == frozenset() and waiting.leftovers == {12}  # 13 exited by itself
    done, kill = stale_leftovers(waiting, frozenset({12, 21, 22}), 100.0 + LEFTOVER_GRACE_S)
    assert kill == {12} and done.leftovers == frozenset() and done.generation == {21, 22}
    gone, kill = stale_leftovers(waiting, frozenset({21, 22}), 100.0 + LEFTOVER_GRACE_S)
    assert kill == frozenset() and gone.leftovers == frozenset()


def test_a_stopping_server_is_given_up_on_only_after_outliving_its_last_stub_by_the_grace():
    drain = StubDrainWatch(stubs_at_stop=3, now=0.0)
    assert not drain.nothing_left(2, 1.0)  # unloading: stubs still finishing
    assert not drain.nothing_left(0, 1.5)  # the last one just went: Triton exits within ~1 s
    assert not drain.nothing_left(0, 1.0 + STUBLESS_EXIT_GRACE_S - 0.1)
    assert drain.nothing_left(0, 1.0 + STUBLESS_EXIT_GRACE_S)  # measured from the last stub seen
    assert not drain.nothing_left(1, 99.0)  # a stub again (still unloading): wait on


def test_a_server_that_had_no_stubs_when_stopped_is_never_given_up_on_early():
    """No Python-based model (e.g. TensorRT/ONNX Runtime backends on a GPU host): no stub ever tells
    when in-flight work is done, so it keeps Triton's own exit timeout."""
    drain = StubDrainWatch(stubs_at_stop=0, now=0.0)
    assert not drain.nothing_left(0, 1000.0)


def test_a_reload_that_started_no_new_stub_leaves_no_leftovers_and_rereads_the_generation():
    m, _ = observe(ModelStubs("a", 2, generation=frozenset({11, 12})), frozenset({12}), 10.0, **BUDGET)
    m, decision = after_reload(m, ReloadOutcome("reloaded", 0.1), frozenset({12}), 11.0)
    assert (m.generation, m.leftovers) == (frozenset(), frozenset())  # 12 still serves: never killed
    m, decision = observe(m, frozenset({12}), 12.0, **BUDGET)
    assert decision.action is Action.RELOAD and m.attempts == 2  # and the next attempt's marker differs


def test_too_few_stubs_at_the_first_scan_is_a_loss_too():
    m, decision = observe(ModelStubs("a", 2), frozenset({11}), 0.0, **BUDGET)
    assert (decision.action, decision.detail, m.status) == (Action.RELOAD, "has 1 of its 2 backend stubs", StubStatus.RELOADING)


def test_the_budget_bounds_reloads_per_window_then_the_model_is_left_alone():
    m = ModelStubs("a", 1, generation=frozenset({1}))
    for now, pid in ((0.0, 2), (100.0, 3)):
        m, decision = observe(m, frozenset(), now, **BUDGET)
        assert decision.action is Action.RELOAD
        m, _ = after_reload(m, ReloadOutcome("reloaded", 1.0), frozenset({pid}), now + 1)
    m, decision = observe(m, frozenset(), 200.0, **BUDGET)
    assert decision.action is Action.GIVE_UP and m.status is StubStatus.GAVE_UP
    assert decision.detail == "lost a backend stub (pid 3); 2 reloads in 600 s already: not reloading it again"
    assert observe(m, frozenset({9}), 201.0, **BUDGET)[1].action is Action.NONE  # left alone from now on
    # past the window the budget is back (for a model that was not given up on)
    fresh = ModelStubs("a", 1, generation=frozenset({3}), reload_times=(0.0, 100.0))
    assert observe(fresh, frozenset(), 650.0, **BUDGET)[1].action is Action.RELOAD


def test_a_model_reloaded_by_someone_else_is_adopted_not_reloaded_again():
    m = ModelStubs("a", 2, generation=frozenset({11, 12}))
    m, decision = observe(m, frozenset({21, 22}), 5.0, **BUDGET)
    assert decision.action is Action.ADOPT and m.generation == {21, 22} and m.attempts == 0


def test_a_failed_reload_restarts_the_partition_and_a_not_ready_model_is_left_until_its_stubs_run():
    m, _ = observe(ModelStubs("a", 1, generation=frozenset({11})), frozenset(), 5.0, **BUDGET)
    failed, decision = after_reload(m, ReloadOutcome("failed", 60.0, "TimeoutError: timed out"), frozenset(), 65.0)
    assert decision.action is Action.RESTART_PARTITION
    assert decision.detail == "lost a backend stub (pid 11); reload failed after 60.0 s: TimeoutError: timed out"
    unloaded, decision = after_reload(m, ReloadOutcome("not_ready", 0.1, "Triton reports a not ready (unloaded?)"),
                                      frozenset(), 5.1)
    assert decision.action is Action.NOT_READY and unloaded.status is StubStatus.NOT_READY
    assert unloaded.reload_times == ()  # nothing was sent: no budget spent
    assert observe(unloaded, frozenset(), 7.0, **BUDGET)[1].action is Action.NONE
    back, decision = observe(unloaded, frozenset({31}), 9.0, **BUDGET)
    assert decision.action is Action.ADOPT and (back.status, back.generation) == (StubStatus.WATCHING, {31})


def test_a_readiness_check_triton_did_not_answer_is_tried_again_within_the_budget():
    """A timed-out or refused readiness check used to count as "not ready": the model was parked until
    its stubs ran again, which a dead stub never does, so it failed every request until a restart."""
    m, _ = observe(ModelStubs("a", 2, generation=frozenset({11, 12})), frozenset({12}), 5.0, **BUDGET)
    waited, decision = after_reload(m, ReloadOutcome("unanswered", 5.0, "Triton did not answer whether a is ready"),
                                    frozenset({12}), 10.0)
    assert waited.status is StubStatus.WATCHING and waited.reload_times == (5.0,)  # the attempt counts
    again, decision = observe(waited, frozenset({12}), 12.0, **BUDGET)
    assert decision.action is Action.RELOAD and again.attempts == 2
    reloaded, decision = after_reload(again, ReloadOutcome("reloaded", 1.0), frozenset({21, 22}), 13.0)
    assert decision.action is Action.RELOADED and reloaded.generation == {21, 22}
    # a server that never answers spends the budget and is given up on, not retried forever
    stuck, _ = after_reload(again, ReloadOutcome("unanswered", 5.0, "no answer"), frozenset({12}), 17.0)
    assert observe(stuck, frozenset({12}), 19.0, **BUDGET)[0].status is StubStatus.GAVE_UP


def test_without_a_key_the_model_is_marked_and_not_reloaded():
    m, decision = observe(ModelStubs("a", 1, generation=frozenset({11})), frozenset(), 5.0, **BUDGET, can_reload=False)
    assert decision.action is Action.NO_KEY and m.status is StubStatus.NO_KEY and m.attempts == 0


def test_expected_stubs_must_be_positive():
    with pytest.raises(ConfigError, match="expected stubs = 0"):
        ModelStubs("a", 0)
    with pytest.raises(ConfigError, match="stub_reload_timeout_s"):
        RestartPolicy(stub_reload_timeout_s=0)


class InlineExecutor:
    """Runs a submitted call at once (the flow under test, not threading)."""

    def submit(self, fn, *args):
        future = Future()
        future.set_result(fn(*args))
        return future


def test_partition_flow_scans_on_the_beat_reloads_once_logs_and_keeps_counts_over_restarts(caplog):
    live = {"pids": [StubProcess(11, "a", "a_0_0"), StubProcess(12, "a", "a_0_1"), StubProcess(13, "b", "b_0")]}
    calls = []

    def reload(host, port, model, attempt, headers, timeout_s):
        calls.append((host, port, model, attempt, headers, timeout_s))
        live["pids"] = [s for s in live["pids"] if s.model != model] + [StubProcess(21, "a", "a_0_0"), StubProcess(22, "a", "a_0_1")]
        return ReloadOutcome("reloaded", 1.5)

    watch = PartitionStubWatch("main", 2.0, 60.0, 5, 600.0, scan=lambda pgid: tuple(live["pids"]), reload=reload)
    watch.server_ready("127.0.0.1", 9000, 4242, {"a": 2, "b": 1}, {"admin-key": "K"})
    caplog.set_level(logging.INFO, logger="serving.runtime.supervisor")
    assert watch.tick(0.0, InlineExecutor()) == (True, None)  # first scan: the generations (to the state file)
    assert watch.tick(2.0, InlineExecutor()) == (False, None)  # nothing changed
    live["pids"] = live["pids"][1:]  # kill -9 of pid 11
    assert watch.tick(3.0, InlineExecutor()) == (False, None) and not calls  # not due before the interval
    assert watch.tick(4.0, InlineExecutor()) == (True, None)
    assert calls == [("127.0.0.1", 9000, "a", 1, {"admin-key": "K"}, 60.0)]
    assert watch.tick(4.2, InlineExecutor()) == (True, None)  # the reload's outcome
    assert watch.models["a"].generation == {21, 22} and watch.summary()["a"].reloads == 1
    assert "partition main: model a lost a backend stub (pid 11); reloaded in 1.5 s" in caplog.text
    watch.server_down()
    assert watch.tick(20.0, InlineExecutor()) == (False, None)
    watch.server_ready("127.0.0.1", 9000, 5000, {"a": 2, "b": 1}, {"admin-key": "K"})
    assert watch.models["a"].reloads == 1 and watch.models["a"].generation == frozenset()


def test_partition_flow_kills_the_replaced_stubs_still_running_after_the_grace(caplog):
    leftover = subprocess.Popen(["sleep", "60"])  # stands in for an old instance's stub (a real process to kill)
    try:
        live = {"stubs": (StubProcess(11, "a"), StubProcess(leftover.pid, "a"))}

        def reload(*args):
            live["stubs"] = (StubProcess(leftover.pid, "a"), StubProcess(21, "a"), StubProcess(22, "a"))
            return ReloadOutcome("reloaded", 1.0)

        watch = PartitionStubWatch("main", 2.0, 60.0, 5, 600.0, scan=lambda pgid: live["stubs"], reload=reload)
        watch.server_ready("127.0.0.1", 9000, 4242, {"a": 2}, {})
        watch.tick(0.0, InlineExecutor())
        live["stubs"] = live["stubs"][1:]  # 11 dies
        watch.tick(2.0, InlineExecutor())
        watch.tick(2.2, InlineExecutor())  # reloaded at 2.2: the leftover is given LEFTOVER_GRACE_S
        assert watch.models["a"].leftovers == {leftover.pid}
        watch.tick(2.2 + LEFTOVER_GRACE_S - 1, InlineExecutor())
        assert leftover.poll() is None
        caplog.set_level(logging.WARNING, logger="serving.runtime.supervisor")
        watch.tick(2.2 + LEFTOVER_GRACE_S + 1, InlineExecutor())
        assert leftover.wait(timeout=5) == -signal.SIGKILL
        assert f"SIGKILLed stub pid {leftover.pid} of an instance the reload replaced" in caplog.text
        assert watch.models["a"].generation == {21, 22} and watch.models["a"].leftovers == frozenset()
    finally:
        leftover.kill()
        leftover.wait()


def test_partition_flow_restarts_when_the_reload_fails_and_says_what_to_do_without_a_key(caplog):
    watch = PartitionStubWatch("main", 2.0, 60.0, 5, 600.0, scan=lambda pgid: (),
                               reload=lambda *args: ReloadOutcome("failed", 0.2, "HTTP 400: failed to load"))
    watch.models = {"a": ModelStubs("a", 1, generation=frozenset({11}))}
    watch.server, watch.headers = ("127.0.0.1", 9000, 4242), {}
    assert watch.tick(0.0, InlineExecutor()) == (True, None)
    changed, restart = watch.tick(0.2, InlineExecutor())
    assert restart == "model a lost a backend stub (pid 11); reload failed after 0.2 s: HTTP 400: failed to load"
    caplog.set_level(logging.ERROR, logger="serving.runtime.supervisor")
    watch.models = {"a": ModelStubs("a", 1, generation=frozenset({11}))}
    watch.headers, watch.last_scan_at = None, None
    assert watch.tick(5.0, InlineExecutor()) == (True, None)
    assert watch.tick(8.0, InlineExecutor()) == (False, None)  # said once, not every scan
    assert caplog.text.count("holds no admin key") == 1 and "make admin-key" in caplog.text


def test_a_stub_stopped_for_a_whole_scan_interval_is_killed_and_its_model_reloaded(caplog):
    """A SIGSTOPped stub counted as alive: its instance failed every request it got, nothing was
    reloaded, and SIGCONT later aborted the whole server (a review, 2026-12-06)."""
    stopped = subprocess.Popen(["sleep", "60"])  # stands in for the stub (a real process to kill)
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        live = {"stubs": (StubProcess(11, "a"), StubProcess(stopped.pid, "a", "a_0_1", stopped=True))}
        calls = []

        def reload(host, port, model, *args):
            calls.append(model)
            live["stubs"] = (StubProcess(11, "a"), StubProcess(31, "a"))
            return ReloadOutcome("reloaded", 1.0)

        watch = PartitionStubWatch("main", 2.0, 60.0, 5, 600.0, scan=lambda pgid: live["stubs"], reload=reload)
        watch.server_ready("127.0.0.1", 9000, 4242, {"a": 2}, {})
        caplog.set_level(logging.WARNING, logger="serving.runtime.supervisor")
        watch.tick(0.0, InlineExecutor())  # first seen stopped: maybe a debugger's blink
        assert stopped.poll() is None and not calls
        watch.tick(2.0, InlineExecutor())  # still stopped: killed, and the model lost a stub
        assert stopped.wait(timeout=5) == -signal.SIGKILL
        assert f"SIGKILLed stub pid {stopped.pid} (a_0_1), stopped for a whole scan interval" in caplog.text
        watch.tick(2.1, InlineExecutor())
        assert calls == ["a"]
    finally:
        stopped.kill()
        stopped.wait()


def test_a_stopped_stub_is_told_from_the_proc_state():
    _, stub = parse_stub(7, "7 (triton_python_b) T 1 7 7 0", b"/b/triton_python_backend_stub\0/r/m/1/model.py\0")
    assert stub is not None and stub.stopped and stub.model == "m"
    _, running = parse_stub(7, "7 (triton_python_b) S 1 7 7 0", b"/b/triton_python_backend_stub\0/r/m/1/model.py\0")
    assert running is not None and not running.stopped
