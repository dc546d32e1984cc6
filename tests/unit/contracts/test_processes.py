"""contracts.processes.stop_pid: SIGTERM first, SIGKILL when the group lingers or has nothing left to finish."""
import subprocess
import time

from contracts.processes import pid_alive, stop_pid


def term_ignoring_group() -> subprocess.Popen:
    """A process group leader that ignores SIGTERM, as a tritonserver waiting out its exit timeout does."""
    process = subprocess.Popen(["bash", "-c", "trap '' TERM; while true; do sleep 0.1; done"], start_new_session=True)
    time.sleep(0.2)  # the trap is set
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
