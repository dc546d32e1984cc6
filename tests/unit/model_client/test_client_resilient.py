"""The retry/fallback loops of ResilientClient and AsyncResilientClient, driven by a scripted
connection and a fake clock (no server: this checks the client's decisions, not Triton; the same
loops run against real servers in tests/integration/test_priorities_and_overload.py)."""
from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from model_client.aio import AsyncResilientClient, InferenceJob, infer_concurrently
from model_client.client import classify_triton_error
from model_client.errors import (ClientError, ModelRestartingError, OverloadedError, QueueTimeoutError, RequestRejectedError,
                                  ServerUnavailableError)
from model_client.policies import FallbackPolicy, PriorityLimits, RetryPolicy, backoff_schedule
from model_client.resilient import ResilientClient

X = {"x": np.arange(4, dtype=np.float32).reshape(4, 1)}


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


class ScriptedConnection:
    """Answers each call with the next scripted item for the model: an exception or 'ok'."""

    def __init__(self, script: dict[str, list], clock: FakeClock, call_s: float = 0.01):
        self.script, self.clock, self.call_s = script, clock, call_s
        self.calls: list[tuple[str, int, int | None]] = []

    def infer(self, model, inputs, priority=0, timeout_us=None, client_timeout_s=None):
        self.calls.append((model, len(inputs["x"]), timeout_us))
        self.clock.now += self.call_s
        item = self.script[model].pop(0)
        if isinstance(item, Exception):
            raise item
        return {"y": inputs["x"] * (10 if model == "small" else 1)}

    def close(self):
        pass


class AsyncScriptedConnection(ScriptedConnection):
    async def infer(self, *args, **kwargs):
        return ScriptedConnection.infer(self, *args, **kwargs)

    async def close(self):
        pass


def overloaded():
    return OverloadedError("model 'big' is overloaded: Exceeds maximum queue size; retry later with backoff.")


def make_client(script, retry=RetryPolicy(max_attempts=4, deadline_s=5), fallback=None, limits=None, seed=3):
    clock = FakeClock()
    connection = ScriptedConnection(script, clock)
    client = ResilientClient("grpc", url="fake:1", retry=retry, fallback=fallback, limits=limits,
                             rng=random.Random(seed), sleep=clock.sleep, clock=clock,
                             client_factory=lambda *a: connection)
    return client, connection, clock


def test_overload_is_retried_with_the_seeded_backoff_schedule_until_answered():
    retry = RetryPolicy(max_attempts=4, deadline_s=5)
    client, connection, clock = make_client({"big": [overloaded(), overloaded(), "ok"]}, retry=retry)
    outcome = client.infer("big", X, priority=1)
    assert outcome.calls == 3 and outcome.answered_by == ("big",) and not outcome.degraded
    assert clock.sleeps == list(backoff_schedule(retry, random.Random(3))[:2])
    np.testing.assert_array_equal(outcome.outputs["y"], X["x"])


def test_bad_input_is_never_retried():
    client, connection, clock = make_client({"big": [RequestRejectedError("wrong shape"), "ok"]})
    with pytest.raises(RequestRejectedError, match="wrong shape"):
        client.infer("big", X)
    assert len(connection.calls) == 1 and clock.sleeps == []


def test_attempts_are_bounded_and_the_last_error_reaches_the_caller():
    client, connection, clock = make_client({"big": [overloaded()] * 10}, retry=RetryPolicy(max_attempts=3, deadline_s=60))
    with pytest.raises(OverloadedError, match=r"Gave up after 3 attempt\(s\)"):
        client.infer("big", X)
    assert len(connection.calls) == 3 and len(clock.sleeps) == 2


def test_the_total_deadline_bounds_attempts_sleeps_and_the_servers_queue_timeout():
    retry = RetryPolicy(max_attempts=50, base_delay_s=0.2, max_delay_s=0.2, deadline_s=1.0)
    client, connection, clock = make_client({"big": [QueueTimeoutError("Request timeout expired")] * 50}, retry=retry)
    with pytest.raises(QueueTimeoutError, match="Gave up after"):
        client.infer("big", X, timeout_us=5_000_000)
    assert clock.now < 1.0 + 0.01 + 1e-9  # never sleeps past the deadline (plus at most one call)
    sent_timeouts = [t for _, _, t in connection.calls]
    assert sent_timeouts[0] == 1_000_000  # the caller's 5 s shortened to the 1 s deadline
    assert all(b < a for a, b in zip(sent_timeouts, sent_timeouts[1:]))  # shrinking with what is left


def test_realtime_overload_falls_back_to_the_smaller_model_at_once():
    fallback = FallbackPolicy.of({"big": "small"})
    client, connection, clock = make_client({"big": [overloaded()], "small": ["ok"]}, fallback=fallback)
    outcome = client.infer("big", X, priority=1)
    assert outcome.answered_by == ("small",) and outcome.degraded and outcome.calls == 2
    assert clock.sleeps == []  # degrading is immediate; backoff only when both are full
    np.testing.assert_array_equal(outcome.outputs["y"], X["x"] * 10)


def test_batch_priority_does_not_degrade_it_backs_off():
    fallback = FallbackPolicy.of({"big": "small"})
    client, connection, clock = make_client({"big": [overloaded(), "ok"], "small": []}, fallback=fallback)
    outcome = client.infer("big", X, priority=2)
    assert outcome.answered_by == ("big",) and len(clock.sleeps) == 1
    assert [m for m, _, _ in connection.calls] == ["big", "big"]


def test_when_both_models_are_full_the_caller_gets_overloaded_after_bounded_retries():
    fallback = FallbackPolicy.of({"big": "small"})
    retry = RetryPolicy(max_attempts=2, deadline_s=5)
    client, connection, _ = make_client({"big": [overloaded()] * 2, "small": [overloaded()] * 2}, retry=retry, fallback=fallback)
    with pytest.raises(OverloadedError, match="Gave up after 2 attempt") as info:
        client.infer("big", X, priority=1)
    assert "model 'big' is overloaded" in str(info.value) and "Fallback 'small'" in str(info.value)
    assert [m for m, _, _ in connection.calls] == ["big", "small", "big", "small"]


def test_an_unreachable_primary_degrades_to_the_fallback_for_realtime():
    fallback = FallbackPolicy.of({"big": "small"})
    client, _, _ = make_client({"big": [ServerUnavailableError("refused")], "small": ["ok"]}, fallback=fallback)
    assert client.infer("big", X, priority=1).answered_by == ("small",)


def test_the_interface_comes_from_the_fallback_while_the_primary_is_unreachable():
    """`classify --fallback` read the primary's metadata first, with no retry and no fallback: it
    failed on an unreachable primary although `infer` would have degraded."""
    fallback = FallbackPolicy.of({"big": "small"})
    client, connection, _ = make_client({"big": [ServerUnavailableError("refused")], "small": ["ok"]}, fallback=fallback)
    asked = []

    def interface(model, client_timeout_s=None):
        asked.append(model)
        if model == "big":
            raise ServerUnavailableError("server at fake:1 is not reachable (connection refused)")
        return f"interface of {model}"

    connection.interface = interface
    assert client.interface("big", priority=1) == "interface of small" and asked == ["big", "small"]
    asked.clear()
    with pytest.raises(ServerUnavailableError, match="Gave up"):  # batch work keeps its model
        client.interface("big", priority=2)
    assert set(asked) == {"big"}


def test_the_async_client_reads_the_interface_from_the_fallback_too():
    fallback = FallbackPolicy.of({"big": "small"})
    clock = FakeClock()
    connection = AsyncScriptedConnection({}, clock)
    asked = []

    async def interface(model, client_timeout_s=None):
        asked.append(model)
        if model == "big":
            raise ServerUnavailableError("server at fake:1 is not reachable (connection refused)")
        return f"interface of {model}"

    connection.interface = interface

    async def run():
        async with AsyncResilientClient("grpc", url="fake:1", fallback=fallback, rng=random.Random(3),
                                        sleep=clock.async_sleep, clock=clock, client_factory=lambda *a: connection) as client:
            return await client.interface("big", priority=1)

    assert asyncio.run(run()) == "interface of small" and asked == ["big", "small"]


def test_async_split_calls_keep_at_most_parts_in_flight_requests_queued():
    """All parts at once, one large call filled the model's whole batch queue by itself."""
    in_flight, most = 0, 0

    class SlowConnection:
        async def infer(self, model, inputs, priority=0, timeout_us=None, client_timeout_s=None):
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.001)
            in_flight -= 1
            return {"y": inputs["x"]}

        async def close(self):
            pass

    async def run():
        async with AsyncResilientClient("grpc", url="fake:1", limits=PriorityLimits(2, ((1, 1), (2, 8))),
                                        parts_in_flight=3, client_factory=lambda *a: SlowConnection()) as client:
            return await client.infer("big", {"x": np.arange(100, dtype=np.float32).reshape(100, 1)}, priority=2)

    outcome = asyncio.run(run())
    assert outcome.calls == 13 and most == 3
    np.testing.assert_array_equal(outcome.outputs["y"][:, 0], np.arange(100))
    with pytest.raises(ClientError, match="parts_in_flight = 0"):
        AsyncResilientClient("grpc", url="fake:1", parts_in_flight=0)


def test_lowest_priority_work_is_sent_in_requests_of_the_allowed_size():
    limits = PriorityLimits(default_level=2, max_items=((1, 1), (2, 3)))
    client, connection, _ = make_client({"big": ["ok", "ok"]}, limits=limits)
    outcome = client.infer("big", X)  # 4 items at the default (batch) level, at most 3 per request
    assert [n for _, n, _ in connection.calls] == [3, 1] and outcome.answered_by == ("big", "big")
    np.testing.assert_array_equal(outcome.outputs["y"], X["x"])
    with pytest.raises(RequestRejectedError, match="at most 1 per request"):
        client.infer("big", X, priority=1)


def test_async_client_makes_the_same_decisions_and_accounts_for_every_job():
    clock = FakeClock()
    fallback = FallbackPolicy.of({"big": "small"})
    connection = AsyncScriptedConnection(
        {"big": [overloaded(), "ok", RequestRejectedError("bad"), overloaded()], "small": ["ok", overloaded()]}, clock)

    async def main():
        async with AsyncResilientClient("grpc", url="fake:1", retry=RetryPolicy(max_attempts=1), fallback=fallback,
                                        rng=random.Random(0), sleep=clock.async_sleep, clock=clock,
                                        client_factory=lambda *a: connection) as client:
            jobs = [InferenceJob("big", X, priority=1), InferenceJob("big", X, priority=2),
                    InferenceJob("big", X, priority=2), InferenceJob("big", X, priority=1)]
            return await infer_concurrently(client, jobs, concurrency=1)

    results = asyncio.run(main())
    assert [r.ok for r in results] == [True, True, False, False]
    assert results[0].outcome.answered_by == ("small",) and results[1].outcome.answered_by == ("big",)
    assert isinstance(results[2].error, RequestRejectedError) and isinstance(results[3].error, OverloadedError)


@pytest.mark.parametrize("message, status, expected", [
    ("[request id: <id_unknown>] Exceeds maximum queue size", "503", OverloadedError),
    ("[request id: <id_unknown>] Exceeds maximum queue size", "StatusCode.UNAVAILABLE", OverloadedError),
    ("Request timeout expired", "StatusCode.UNAVAILABLE", QueueTimeoutError),
    ("Request timeout expired", "503", QueueTimeoutError),
    ("unexpected shape for input 'image'", "400", RequestRejectedError),
    # a gRPC server that dies mid-request: UNAVAILABLE like a full queue, but it is the server that is gone
    ("Stream removed", "StatusCode.UNAVAILABLE", ServerUnavailableError),
    ("Socket closed", "StatusCode.UNAVAILABLE", ServerUnavailableError),
    # a host name that does not resolve: no server, not a missing model nor an overload (a review, 2026-12-06)
    ("DNS resolution failed for nosuchhost.invalid:8001: C-ares status is not ARES_SUCCESS qtype=A "
     "name=nosuchhost.invalid is_balancer=0: Domain name not found", "StatusCode.UNAVAILABLE", ServerUnavailableError),
    ("errors resolving h:1/: [field:hostname lookup error:Failed to parse port in name: h:1/]",
     "StatusCode.UNAVAILABLE", ServerUnavailableError),
    # a shared-memory region the server does not hold: NOT_FOUND, but the model is served (a review, 2026-12-07)
    ("Unable to find shared memory region: 'nope'", "StatusCode.NOT_FOUND", RequestRejectedError),
    ("Unable to find shared memory region: 'nope'", "404", RequestRejectedError),
    # a dead backend stub: the server's fault, healed by the supervisor within seconds, so retried and
    # degraded like overload; it read "rejected", as if the input were bad (a review, 2026-12-07)
    ("Stub process 'digit_classifier_0_0' is not healthy.", "500", ModelRestartingError),
    ("Stub process 'digit_classifier_0_0' is not healthy.", "StatusCode.INTERNAL", ModelRestartingError),
    # model code that raised: its words are not the transport's nor Triton's (retried as a lost server /
    # read as a missing model before)
    ("Failed to process the request(s) for model 'm_0_0', message: KeyError: 'label' not found", "500",
     RequestRejectedError),
    ("Failed to process the request(s) for model 'm_0_0', message: ConnectionResetError: connection reset by peer",
     "StatusCode.INTERNAL", RequestRejectedError),
])
def test_triton_errors_map_to_what_a_caller_can_act_on(message, status, expected):
    from tritonclient.utils import InferenceServerException

    error = classify_triton_error(InferenceServerException(msg=message, status=status), "h:1", "m")
    assert type(error) is expected
    assert "\n" not in str(error)


def test_an_explicit_url_names_the_primarys_server_and_the_fallback_is_found_in_the_manifest(tmp_path):
    """With `url=` (the CLI's --url) the fallback was sent to the primary's server too, which does not
    serve it (its own partition): realtime calls never degraded (a review, 2026-12-06: 187 of 300
    overloaded instead of answered by the small model)."""
    import json

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"models": {
        "big": {"http": "main:8000", "grpc": "main:8001", "partition": "main"},
        "small": {"http": "fallback:8010", "grpc": "fallback:8011", "partition": "fallback"}}}))
    clock, opened = FakeClock(), []

    def connect(url, *_):
        opened.append(url)
        return ScriptedConnection({"big": [overloaded()], "small": ["ok"]}, clock)

    client = ResilientClient("grpc", url="elsewhere:9001", manifest=manifest, fallback=FallbackPolicy.of({"big": "small"}),
                             retry=RetryPolicy(max_attempts=1), rng=random.Random(0), sleep=clock.sleep, clock=clock,
                             client_factory=connect)
    outcome = client.infer("big", X, priority=1)
    assert outcome.answered_by == ("small",) and opened == ["elsewhere:9001", "fallback:8011"]
    # a fallback the manifest does not know is asked at the explicit url, as before
    opened.clear()
    client = ResilientClient("grpc", url="elsewhere:9001", manifest=tmp_path / "none.json",
                             fallback=FallbackPolicy.of({"big": "small"}), retry=RetryPolicy(max_attempts=1),
                             rng=random.Random(0), sleep=clock.sleep, clock=clock, client_factory=connect)
    client.infer("big", X, priority=1)
    assert opened == ["elsewhere:9001"]


def test_every_command_takes_a_manifest_for_a_server_started_with_another_run_dir(tmp_path):
    from model_client.cli import build_parser

    for command in (["classify"], ["embed"], ["generate", "--prompt", "hi"]):
        args = build_parser().parse_args([*command, "--manifest", str(tmp_path / "m.json")])
        assert args.manifest == tmp_path / "m.json" and args.url is None and args.protocol == "http"


def test_aiohttps_refused_connection_is_unreachable_not_a_connection_closed_mid_request():
    import aiohttp

    refused = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None), OSError(111, "Connect call failed"))
    error = classify_triton_error(refused, "127.0.0.1:1", "m")
    assert type(error) is ServerUnavailableError and "is not reachable" in str(error), error


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "grpc://h:8001", "127.0.0.1:8000/", "h:1/v2", "", "h :1"])
def test_a_url_with_a_scheme_or_a_path_is_refused_naming_the_expected_form(url):
    """gRPC answered such a url with UNAVAILABLE, classified "overloaded" and retried; HTTP raised
    tritonclient's own exception, a traceback in the CLI."""
    from model_client.client import TritonModelClient

    for protocol in ("http", "grpc"):
        with pytest.raises(ClientError, match=r"expected host:port \(for example 127.0.0.1:8000\), without a scheme"):
            TritonModelClient(url, protocol)


def test_an_unreachable_server_is_said_once_with_how_long_the_call_keeps_trying(caplog):
    """An unreachable server is retried until the deadline (it rides out a partition's restart): a
    command run with no server up sat silent for those 10 s, like a hang (a first-run review). The
    first refusal now says so, once per server, not once per attempt; an overload says nothing."""
    refused = ServerUnavailableError("server at fake:1 is not reachable (connection refused); is it running?")
    client, connection, clock = make_client({"big": [refused] * 5 + ["ok", overloaded(), "ok"]},
                                            retry=RetryPolicy(max_attempts=3, deadline_s=7))
    with caplog.at_level("WARNING", logger="model_client"):
        assert client.infer("big", X).calls == 6
        assert client.infer("big", X).calls == 2
    said = [r.getMessage() for r in caplog.records if r.name == "model_client"]
    assert len(said) == 1 and "fake:1 is not reachable" in said[0] and "deadline of 7 s" in said[0], said

    async def unreachable_async():
        async_connection = AsyncScriptedConnection({"big": [refused, refused, "ok"]}, clock)
        async with AsyncResilientClient("grpc", url="fake:2", retry=RetryPolicy(max_attempts=3, deadline_s=4),
                                        sleep=clock.async_sleep, clock=clock,
                                        client_factory=lambda *a: async_connection) as async_client:
            return await async_client.infer("big", X)

    caplog.clear()
    with caplog.at_level("WARNING", logger="model_client"):
        assert asyncio.run(unreachable_async()).calls == 3
    assert [r.getMessage().count("deadline of 4 s") for r in caplog.records if r.name == "model_client"] == [1]


def test_threads_sharing_a_client_share_one_connection_per_server():
    """Eight threads on a fresh shared client made eight connections and kept one; the other seven were
    never closed (a review, 2026-12-07, with gRPC, whose client may be shared)."""
    import threading
    import time as real_time

    made = []

    def slow_factory(url, protocol, timeout_s):
        real_time.sleep(0.05)  # a connection takes a while: the threads overlap here
        made.append(url)
        return object()

    client = ResilientClient("grpc", url="127.0.0.1:1", client_factory=slow_factory)
    got = []
    threads = [threading.Thread(target=lambda: got.append(client.client_for("m"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == ["127.0.0.1:1"] and len({id(c) for c in got}) == 1
