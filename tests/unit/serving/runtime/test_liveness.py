"""Liveness bookkeeping (when to probe, when a server is hung) and the probe's hard deadline.

The probe tests talk to small loopback sockets standing in for a server that answers, refuses,
never answers or trickles: what is tested is the probe's own HTTP handling and deadline."""
from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from conftest import serve_loopback_http
from serving.runtime.liveness import LivenessHistory, probe_live, worst_case_detection_s
from serving.runtime.supervisor import RestartPolicy


def test_first_probe_is_due_at_once_then_one_per_interval_never_two_at_once():
    history = LivenessHistory()
    assert history.probe_due(100.0, 2.0, in_flight=False)
    history = history.started(100.0)
    assert not history.probe_due(101.9, 2.0, in_flight=False)
    assert history.probe_due(102.0, 2.0, in_flight=False)
    assert not history.probe_due(105.0, 2.0, in_flight=True)


def test_consecutive_failures_make_a_hang_and_one_answer_resets_the_count():
    history = LivenessHistory()
    for _ in range(2):
        history = history.after("timed out after 2 s")
    assert history.consecutive_failures == 2 and not history.is_hung(3)
    history = history.after(None)
    assert history.consecutive_failures == 0 and history.last_failure is None
    for _ in range(3):
        history = history.after("timed out after 2 s")
    assert history.is_hung(3)
    assert history.hung_reason(2.0) == ("hung: /v2/health/live unanswered 3 times in a row (2 s timeout each; "
                                        "last: timed out after 2 s)")


def simulate_hang(policy: RestartPolicy, hang_at: float, tick_s: float = 0.2, horizon_s: float = 60.0) -> float:
    """Drive LivenessHistory as the supervisor's tick loop does (a probe finishes after 1 ms while
    the server answers, after the timeout once it hangs); return when the server is declared hung."""
    history, finishes_at, failure = LivenessHistory(), None, None
    for step in range(int(horizon_s / tick_s)):
        now = step * tick_s
        if finishes_at is not None and now >= finishes_at:
            history, finishes_at = history.after(failure), None
            if history.is_hung(policy.liveness_failures):
                return now
        if history.probe_due(now, policy.liveness_interval_s, in_flight=finishes_at is not None):
            history = history.started(now)
            answered = now < hang_at
            finishes_at = now + (0.001 if answered else policy.liveness_timeout_s)
            failure = None if answered else "timed out"
    raise AssertionError(f"hang at {hang_at} s never declared")


@pytest.mark.parametrize("policy", [RestartPolicy(), RestartPolicy(liveness_interval_s=1.0, liveness_timeout_s=0.5,
                                                                    liveness_failures=2)])
def test_a_hang_is_declared_within_interval_x_failures_plus_timeout_and_never_sooner_than_the_misses(policy):
    tick = 0.2
    worst = policy.hang_detection_s
    assert worst == policy.liveness_interval_s * policy.liveness_failures + policy.liveness_timeout_s
    least = (policy.liveness_failures - 1) * policy.liveness_interval_s + policy.liveness_timeout_s
    delays = [simulate_hang(policy, hang_at=10.0 + phase / 20) - (10.0 + phase / 20) for phase in range(40)]
    assert max(delays) <= worst + tick + 1e-9, delays
    assert min(delays) >= least - tick - 1e-9, delays
    assert max(delays) - min(delays) >= policy.liveness_interval_s - 2 * tick  # the phase of the hang matters


def test_worst_case_detection_of_the_defaults_is_8_s():
    assert worst_case_detection_s(2.0, 3, 2.0) == RestartPolicy().hang_detection_s == 8.0


# --- the probe itself, against loopback sockets -----------------------------------------------------

class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(self.status if self.path == "/v2/health/live" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = serve_loopback_http(type("Handler", (_Health,), {}))
    yield server
    server.shutdown()
    server.server_close()


def test_probe_is_none_on_200_and_names_any_other_status(health_server):
    port = health_server.server_address[1]
    assert probe_live("127.0.0.1", port, 1.0) is None
    health_server.RequestHandlerClass.status = 503
    failure = probe_live("127.0.0.1", port, 1.0)
    assert failure is not None and " 503 " in failure


def test_probe_of_a_closed_port_fails_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the probe: nothing listens
    started = time.monotonic()
    assert "ConnectionRefusedError" in probe_live("127.0.0.1", port, 1.0)
    assert time.monotonic() - started < 0.5


def test_probe_of_a_server_that_accepts_but_never_answers_ends_at_its_timeout():
    """What a SIGSTOPped tritonserver looks like: the kernel completes the connection, nobody reads."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        started = time.monotonic()
        failure = probe_live("127.0.0.1", listener.getsockname()[1], 0.3)
        elapsed = time.monotonic() - started
    assert failure == "timed out after 0.3 s"
    assert 0.3 <= elapsed < 0.6


def test_probe_deadline_covers_the_whole_exchange_not_each_read():
    """A server that sends a byte every 0.1 s would hold a per-read timeout forever."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        stop = threading.Event()

        def trickle():
            conn, _ = listener.accept()
            with conn:
                while not stop.is_set():
                    conn.sendall(b"H")
                    time.sleep(0.1)

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        started = time.monotonic()
        failure = probe_live("127.0.0.1", listener.getsockname()[1], 0.5)
        elapsed = time.monotonic() - started
        stop.set()
        thread.join(timeout=2)
    assert failure == "timed out after 0.5 s" and elapsed < 0.9
