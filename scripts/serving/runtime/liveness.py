"""Liveness of a running partition server: is it still answering at all?

A server that *exits* is noticed by the supervisor through its exit status. A server that stays
alive but stops answering (deadlock, SIGSTOP, a machine thrashing swap) never exits; the supervisor
notices it by probing `GET /v2/health/live` and counting consecutive unanswered probes.
`LivenessHistory` is the pure bookkeeping (when is the next probe due, is the server hung);
`probe_live` is the one probe, with a hard deadline so it never holds its caller longer than its
timeout. The numbers (interval, timeout, failures) live in `serving.runtime.supervisor.RestartPolicy`.

Triton answers /v2/health/live from its HTTP frontend threads without touching a model, a queue or
a backend stub, and inference requests do not hold those threads while they run (Triton hands
them to the core asynchronously), so a saturated server keeps answering it in milliseconds (seen
here: at most 32 ms, p99 20 ms, while 8 threads of batch-64 requests kept both cores busy). What
could delay it is worse than load: a host swapping, a CPU set shared with a runaway process, or
every HTTP thread parsing a huge request body at once. That is why a server is declared hung
only after `failures` probes in a row (default 3) each went unanswered for `timeout` (default 2 s),
i.e. after at least (failures - 1) x interval + timeout = 6 s in which no probe was answered.
What it does not see: a model whose backend stub hangs inside `execute` leaves the server live
(requests to that model time out at the client; see docs/operations.md).
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass, replace

LIVE_PATH = "/v2/health/live"


@dataclass(frozen=True)
class LivenessHistory:
    """Probe history of one partition since it became ready (times are time.monotonic() seconds)."""

    #: When the last probe was started; None before the first one.
    last_probe_at: float | None = None
    consecutive_failures: int = 0
    #: What went wrong with the last failed probe ("timed out after 2 s", "HTTP 503", ...).
    last_failure: str | None = None

    def probe_due(self, now: float, interval_s: float, in_flight: bool) -> bool:
        """One probe per interval (start to start), never two at once."""
        return not in_flight and (self.last_probe_at is None or now - self.last_probe_at >= interval_s)

    def started(self, now: float) -> "LivenessHistory":
        return replace(self, last_probe_at=now)

    def after(self, failure: str | None) -> "LivenessHistory":
        """The history once a probe finished: `failure` is None when the server answered 200."""
        if failure is None:
            return replace(self, consecutive_failures=0, last_failure=None)
        return replace(self, consecutive_failures=self.consecutive_failures + 1, last_failure=failure)

    def is_hung(self, failures: int) -> bool:
        return self.consecutive_failures >= failures

    def hung_reason(self, timeout_s: float) -> str:
        """The partition's last_exit when it is declared hung."""
        return (f"hung: {LIVE_PATH} unanswered {self.consecutive_failures} times in a row ({timeout_s:g} s timeout "
                f"each; last: {self.last_failure})")


def worst_case_detection_s(interval_s: float, failures: int, timeout_s: float) -> float:
    """Longest time from a server stopping to answer to the supervisor declaring it hung: the last
    answered probe may have been just before the hang, then `failures` probes are started one
    interval apart and the last one times out (plus up to one supervisor tick)."""
    return interval_s * failures + timeout_s


def probe_live(host: str, port: int, timeout_s: float) -> str | None:
    """GET /v2/health/live once; None when the server answered 200, else what went wrong.

    Raw socket with one deadline for connect + send + reading the status line: urllib's timeout
    applies to each socket operation, so a server that accepts (the kernel does that even for a
    stopped process) and then trickles could hold it for several timeouts."""
    deadline = time.monotonic() + timeout_s
    request = f"GET {LIVE_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(max(1e-3, deadline - time.monotonic()))
            sock.sendall(request)
            data = b""
            while b"\r\n" not in data:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(1024)
                if not chunk:
                    return "connection closed before a status line"
                data += chunk
    except (TimeoutError, socket.timeout):
        return f"timed out after {timeout_s:g} s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    status_line = data.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) >= 2 and parts[1] == "200":
        return None
    return f"answered {status_line!r}"
