"""contracts.processes: stop_pid (SIGTERM first, SIGKILL when the group lingers or has nothing left to finish), the /proc readers, and readiness."""
import http.server
import subprocess
import time

import pytest

from conftest import serve_loopback_http
from contracts.processes import (cpu_idle_and_total, cpu_ticks, free_loopback_ports, kill_process_group, pid_alive, proc_stat_fields,
                                 server_ready, stop_pid)


def term_ignoring_group() -> subprocess.Popen:
    """A process group leader that ignores SIGTERM, as a tritonserver waiting out its exit timeout does."""
    process = subprocess.Popen(["bash", "-c", "trap '' TERM; echo trapped; while true; do sleep 0.1; done"],
                               start_new_session=True, stdout=subprocess.PIPE, text=True)
    # Wait for bash to say the trap is set: a fixed sleep raced bash's start-up on a loaded machine
    # (SIGTERM before the trap ends the group at once, and both tests below fail).
    assert process.stdout.readline() == "trapped\n"
    process.stdout.close()
    return process


def test_a_group_that_ignores_sigterm_is_killed_after_the_timeout():
    process = term_ignoring_group()
    started = time.monotonic()
    stop_pid(process.pid, timeout=1.0)
    assert 1.0 <= time.monotonic() - started < 4.0 and not pid_alive(process.pid)


def test_nothing_left_to_finish_ends_the_sigterm_wait_at_once():
    process = term_ignoring_group()
    polls = []

    def nothing_left_to_finish():
        polls.append(time.monotonic())
        return len(polls) >= 3  # the third look finds nothing left

    started = time.monotonic()
    stop_pid(process.pid, timeout=30.0, nothing_left_to_finish=nothing_left_to_finish)
    assert time.monotonic() - started < 3.0 and not pid_alive(process.pid)
    assert len(polls) == 3  # not polled again once it said so, nor during the SIGKILL wait


def group_with_a_term_ignoring_member(leader_exits_itself: bool) -> tuple[subprocess.Popen, int]:
    """A group leader (a tritonserver) that exits on SIGTERM, or at once on its own (a crash), and a
    member of its group that ignores SIGTERM (a backend stub that outlives it): (leader, member pid)."""
    script = ("(trap '' TERM; exec sleep 60) & echo $!; " +
              ("exit 0" if leader_exits_itself else "trap 'exit 0' TERM; while true; do sleep 0.1; done"))
    leader = subprocess.Popen(["bash", "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True)
    member = int(leader.stdout.readline())
    leader.stdout.close()
    time.sleep(0.3)  # the member's trap is set before any SIGTERM
    return leader, member


def member_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return proc_stat_fields(stat.read())[0] == "Z"  # killed, not yet reaped by init
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("leader_exits_itself", [False, True], ids=["stopped", "crashed first"])
def test_stopping_a_group_leaves_no_member_behind_once_its_leader_is_gone(leader_exits_itself):
    """A tritonserver that exited (on SIGTERM, or by crashing before anyone stopped it) left Python-
    backend stubs of its group running, orphaned for good: eight LLM stubs of 1.5-1.7 GB each were
    found 45 minutes after their test servers crashed (2026-12-06)."""
    leader, member = group_with_a_term_ignoring_member(leader_exits_itself)
    try:
        if leader_exits_itself:
            leader.wait(timeout=5)
            kill_process_group(leader.pid)  # what a stop of a server found dead does
        else:
            stop_pid(leader.pid, timeout=2.0)
        deadline = time.monotonic() + 3
        while not member_gone(member) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert member_gone(member), "a member of the stopped group is still running"
    finally:
        subprocess.run(["kill", "-9", str(member)], capture_output=True)
        leader.wait(timeout=5)


def test_a_proc_stat_line_is_split_after_the_command_name_even_with_parentheses_in_it():
    line = "4242 (onnx (worker) 1) S 1 77 1 0 -1 4194368 10 0 0 0 123 45 0 0 20 0 1 0 100 0 0"
    fields = proc_stat_fields(line)
    assert (fields[0], int(fields[2])) == ("S", 77), "state first, the process group third"
    assert cpu_ticks(line) == 168, "user + system ticks"


def test_cpu_lines_give_idle_with_iowait_and_total_ticks_per_cpu():
    text = "cpu  300 0 100 600 5 0 0 0 0 0\ncpu0 100 0 50 350 5 0 0 0 0 0\ncpu1 200 0 50 250\nintr 12345\n"
    assert cpu_idle_and_total(text) == {"cpu": (605, 1005), "cpu0": (355, 505), "cpu1": (250, 500)}


class _Answers200(http.server.BaseHTTPRequestHandler):
    """Answers 200 on Triton's readiness and metrics paths, 404 elsewhere."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path in ("/v2/health/ready", "/metrics") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_server_is_ready_only_once_its_metrics_endpoint_answers_too():
    """Triton starts its metrics service after HTTP: HTTP readiness alone is not the whole server."""
    http_port, metrics_port = free_loopback_ports(2)
    http_server = serve_loopback_http(_Answers200, http_port)
    try:
        assert not server_ready("127.0.0.1", http_port, metrics_port, timeout=0.5), "metrics not listening yet"
        assert server_ready("127.0.0.1", http_port, None, timeout=0.5), "a server without metrics: HTTP is enough"
        metrics_server = serve_loopback_http(_Answers200, metrics_port)
        try:
            assert server_ready("127.0.0.1", http_port, metrics_port, timeout=0.5)
        finally:
            metrics_server.shutdown()
            metrics_server.server_close()
    finally:
        http_server.shutdown()
        http_server.server_close()
    assert not server_ready("127.0.0.1", http_port, metrics_port, timeout=0.5), "nothing listening"


def test_ports_in_use_names_a_held_port_and_refuses_an_address_that_is_not_this_machines():
    import socket

    from contracts.processes import ports_in_use

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        held = listener.getsockname()[1]
        assert ports_in_use("127.0.0.1", [held]) == [held]
        assert ports_in_use("0.0.0.0", [held]) == [held]  # every address includes the loopback one
    finally:
        listener.close()
    assert ports_in_use("127.0.0.1", [held]) == []
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: not "another process holds it"
    with pytest.raises(OSError, match=r"cannot listen on 192.0.2.1:\d+ .*expected an address of this machine"):
        ports_in_use("192.0.2.1", [held])


def test_a_log_tail_can_start_where_this_run_began(tmp_path):
    """Run logs are appended to: a failed start shows its own lines, not the run before's."""
    from contracts.processes import log_tail

    log = tmp_path / "run.log"
    log.write_text("earlier run 1\nearlier run 2\n")
    start = log.stat().st_size
    assert log_tail(log, 5, start) == "(nothing written in this run)"
    with open(log, "a") as out:
        out.write("this run\n")
    assert log_tail(log, 5, start) == "this run"
    assert log_tail(log, 2) == "earlier run 2\nthis run"
    assert log_tail(tmp_path / "none.log", 5, start) == "(no log written)"
