"""The clients against a scripted loopback HTTP server: what a caller sees when the transport, not
Triton, misbehaves (a connection closed mid-request, an answer slower than the deadline, metadata
that never comes), which a real tritonserver cannot be made to do on cue. What these check is the
client library's own handling; serving itself is tested against tritonserver (tests/integration).

The server speaks just enough of KServe v2 over HTTP: model metadata (one FP32 input `x` [-1, 2],
one output `y`), and infer, whose answer is chosen by the model name (`ok`, `slow`, `eof`,
`overloaded`, `unread`: never reads the request body) or, for the model `by_value`, by the first
value of the request (1: 400, 2: 503).
"""
from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

from conftest import serve_loopback_http
from model_client.aio import AsyncResilientClient, AsyncTritonModelClient
from model_client.client import TritonModelClient
from model_client.errors import ClientError, OverloadedError, RequestRejectedError, ServerUnavailableError
from model_client.policies import PriorityLimits, RetryPolicy
from model_client.resilient import ResilientClient

SLOW_S = 2.0
X = np.zeros((1, 2), np.float32)


class ScriptedTriton(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls: list[tuple[float, str]] = []

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        model = self.path.strip("/").split("/")[2]
        if model.startswith("slowmeta"):
            time.sleep(SLOW_S)
        self._send(200, {"name": model, "versions": ["1"], "platform": "scripted",
                         "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
                         "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]})

    def do_POST(self):
        if self.path.strip("/").split("/")[2] == "unread":  # a stalled reader: the client's send blocks
            time.sleep(SLOW_S)
            self.close_connection = True
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        header_length = self.headers.get("Inference-Header-Content-Length")
        header = json.loads(body[:int(header_length)] if header_length else body)
        model = self.path.strip("/").split("/")[2]
        ScriptedTriton.calls.append((time.monotonic(), model))
        rows = header["inputs"][0]["shape"][0]
        first = struct.unpack("<f", body[int(header_length):int(header_length) + 4])[0] if header_length else 0.0
        answer = {"model_name": model, "outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 1], "data": [1.0] * rows}]}
        if model.startswith("slow"):
            time.sleep(SLOW_S)
            self._send(200, answer)
        elif model == "eof":  # the server goes away mid-request: the connection closes, no answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif model == "overloaded" or (model == "by_value" and first == 2.0):
            self._send(503, {"error": "Exceeds maximum queue size"})
        elif model == "by_value" and first == 1.0:
            self._send(400, {"error": "inference input 'x': bad values"})
        else:
            self._send(200, answer)


@pytest.fixture()
def url():
    server = serve_loopback_http(ScriptedTriton)
    ScriptedTriton.calls = []
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def timed(function):
    started = time.monotonic()
    try:
        return function(), time.monotonic() - started
    except ClientError as exc:
        return exc, time.monotonic() - started


def timed_async(make_client, model: str, **infer_kwargs):
    """`timed` for an async client: (outputs or the ClientError, seconds)."""
    async def run():
        async with make_client() as client:
            started = time.monotonic()
            try:
                return await client.infer(model, {"x": X}, **infer_kwargs), time.monotonic() - started
            except ClientError as exc:
                return exc, time.monotonic() - started

    return asyncio.run(run())


def test_a_connection_closed_mid_request_is_unavailable_and_retried_not_bad_input(url):
    """It was RequestRejectedError ("connection closed."): never retried, although it is what a
    caller sees when a partition is killed under its request (docs/operations.md)."""
    with TritonModelClient(url) as client:
        error, _ = timed(lambda: client.infer("eof", {"x": X}))
    assert isinstance(error, ServerUnavailableError) and "closed the connection before answering" in str(error)
    with ResilientClient(url=url, retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, deadline_s=1.2), rng=random.Random(0)) as client:
        error, took_s = timed(lambda: client.infer("eof", {"x": X}))
    # retried as a server that went away is: until the deadline, not for max_attempts (3)
    attempts = int(re.search(r"Gave up after (\d+) attempt\(s\)", str(error)).group(1))
    assert isinstance(error, ServerUnavailableError) and 4 <= attempts <= 5 and took_s < 1.2 + 0.5, (str(error), took_s)
    assert {m for _, m in ScriptedTriton.calls} == {"eof"} and len(ScriptedTriton.calls) >= 4  # (geventhttpclient re-sends too)


def test_the_deadline_bounds_a_slow_answer_over_http_sync_and_async(url):
    """Over HTTP the deadline used to bound only the server's queue time: a slow answer held the
    caller for as long as it took (5 s against a 1-s deadline)."""
    retry = RetryPolicy(max_attempts=1, deadline_s=0.3)
    with ResilientClient(url=url, retry=retry) as client:
        error, took = timed(lambda: client.infer("slow", {"x": X}))
    assert isinstance(error, OverloadedError) and "did not answer within the client deadline" in str(error)
    assert took < 1.0

    error, took = timed_async(lambda: AsyncResilientClient(url=url, retry=retry), "slow")
    assert isinstance(error, OverloadedError) and took < 1.0


def test_the_deadline_covers_the_first_calls_metadata_fetch(url):
    with TritonModelClient(url) as client:
        error, took = timed(lambda: client.infer("slowmeta", {"x": X}, client_timeout_s=0.3))
    assert isinstance(error, OverloadedError) and took < 1.0

    error, took = timed_async(lambda: AsyncTritonModelClient(url), "slowmeta", client_timeout_s=0.3)
    assert isinstance(error, OverloadedError) and took < 1.0


def test_after_a_deadline_the_connection_answers_the_next_request_with_its_own_answer(url):
    with TritonModelClient(url) as client:
        assert isinstance(timed(lambda: client.infer("slow", {"x": np.zeros((3, 2), np.float32)}, client_timeout_s=0.2))[0],
                          OverloadedError)
        time.sleep(SLOW_S + 0.3)  # the late 3-row answer has arrived on the interrupted connection by now
        assert client.infer("ok", {"x": X})["y"].shape == (1, 1)


def test_an_array_of_the_wrong_dtype_is_bad_input_naming_the_expected_type(url):
    with TritonModelClient(url) as client:
        error, _ = timed(lambda: client.infer("ok", {"x": X.astype(np.float64)}))
    assert isinstance(error, RequestRejectedError)
    assert "input 'x' of model 'ok'" in str(error) and "expected FP32" in str(error) and "got float64" in str(error)
    assert ScriptedTriton.calls == []  # refused before anything was sent


def test_one_deadline_for_a_call_cut_into_several_requests(url):
    """Each request of a split call used to get a fresh deadline: 3 requests x 1 s took 2.4 s."""
    limits = PriorityLimits(default_level=2, max_items=((1, 1), (2, 1)))
    retry = RetryPolicy(max_attempts=1, deadline_s=0.5)
    with ResilientClient(url=url, retry=retry, limits=limits) as client:
        error, took = timed(lambda: client.infer("slow", {"x": np.zeros((3, 2), np.float32)}, priority=2))
    assert isinstance(error, OverloadedError) and took < 1.0
    assert len(ScriptedTriton.calls) == 1  # the first request used up the deadline: nothing else was sent


def test_when_one_part_of_an_async_split_call_fails_the_others_stop_retrying(url):
    limits = PriorityLimits(default_level=2, max_items=((1, 1), (2, 1)))
    retry = RetryPolicy(max_attempts=50, base_delay_s=0.02, max_delay_s=0.05, deadline_s=5)
    rejected_then_overloaded = np.array([[1.0, 0.0], [2.0, 0.0]], np.float32)

    async def run():
        async with AsyncResilientClient(url=url, retry=retry, limits=limits) as client:
            with pytest.raises(RequestRejectedError):
                await client.infer("by_value", {"x": rejected_then_overloaded}, priority=2)
            gave_up = time.monotonic()
            await asyncio.sleep(0.5)
            return gave_up

    gave_up = asyncio.run(run())
    assert not [t for t, _ in ScriptedTriton.calls if t > gave_up + 0.05]  # used to go on retrying in the background


def test_a_blocking_http_client_used_from_a_second_thread_is_refused_not_hung(url):
    """tritonclient.http's connections belong to the thread that used them first; sharing one hung."""
    with TritonModelClient(url) as client:
        assert client.infer("ok", {"x": X})["y"].shape == (1, 1)
        outcome = []
        worker = threading.Thread(target=lambda: outcome.append(timed(lambda: client.infer("ok", {"x": X}))[0]))
        worker.start()
        worker.join(timeout=10)
    assert isinstance(outcome[0], ClientError) and "make one client per thread" in str(outcome[0])


def test_a_deadline_that_interrupts_sending_the_request_leaves_the_client_usable(url):
    """geventhttpclient gives a connection back to its pool only on a socket error: a request whose
    deadline passed while its body was still being sent kept the pool's one connection, and every
    later call of that client waited for it until its own deadline."""
    with TritonModelClient(url) as client:
        large = np.zeros((4 * 1024 * 1024, 2), np.float32)  # 32 MiB: more than the loopback buffers hold
        error, took = timed(lambda: client.infer("unread", {"x": large}, client_timeout_s=0.3))
        assert isinstance(error, OverloadedError) and took < 1.5
        answer, took = timed(lambda: client.infer("ok", {"x": X}, client_timeout_s=1.0))
    assert not isinstance(answer, ClientError), answer
    assert answer["y"].shape == (1, 1) and took < 0.5


def test_an_async_network_timeout_without_a_deadline_is_an_overload_error_naming_it(url):
    """With no client deadline, aiohttp's own timeout used to end in a TypeError (formatting None)."""
    error, took = timed_async(lambda: AsyncTritonModelClient(url, network_timeout_s=0.3), "slow")
    assert isinstance(error, OverloadedError) and "network timeout" in str(error) and took < 1.5


@pytest.fixture
def silent_tcp():
    """A loopback port that accepts connections and never says a word (a hung server's, over gRPC)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    for connection in held:
        connection.close()
    listener.close()


def test_a_grpc_client_gives_up_on_a_silent_server_after_its_network_timeout_sync_and_async(silent_tcp):
    """gRPC has no socket timeout: `network_timeout_s` was ignored and a call to a server that never
    answers waited 20 s (gRPC's connect deadline) whatever the client was given (a review, 2026-12-06).
    It is now the deadline of a gRPC call that names none, as it bounds every HTTP read."""
    with TritonModelClient(silent_tcp, "grpc", network_timeout_s=1.0) as client:
        error, took_s = timed(lambda: client.infer("ok", {"x": X}))
    assert isinstance(error, ClientError) and took_s < 3.0, (error, took_s)

    async def run():
        async with AsyncTritonModelClient(silent_tcp, "grpc", network_timeout_s=1.0) as client:
            started = time.monotonic()
            try:
                await client.infer("ok", {"x": X})
            except ClientError as exc:
                return exc, time.monotonic() - started
            return None, time.monotonic() - started

    error, took_s = asyncio.run(run())
    assert isinstance(error, ClientError) and took_s < 3.0, (error, took_s)


def test_grpc_clients_keep_tritonclients_channel_options_and_cap_the_reconnect_backoff(monkeypatch):
    """Passing any channel argument replaces tritonclient's own (message sizes, keepalive); the
    reconnect backoff is capped, so a client is answered soon after a restarted partition is ready."""
    import tritonclient.grpc as grpc

    from model_client.client import grpc_channel_args

    args = dict(grpc_channel_args())
    assert args["grpc.max_send_message_length"] == args["grpc.max_receive_message_length"] == grpc.MAX_GRPC_MESSAGE_SIZE
    assert args["grpc.keepalive_timeout_ms"] == grpc.KeepAliveOptions().keepalive_timeout_ms
    assert args["grpc.max_reconnect_backoff_ms"] <= 1000 and args["grpc.initial_reconnect_backoff_ms"] <= 100
    made = []
    real = grpc.InferenceServerClient
    monkeypatch.setattr(grpc, "InferenceServerClient", lambda url, **kwargs: made.append(kwargs) or real(url, **kwargs))
    with TritonModelClient("127.0.0.1:1", "grpc"):
        pass
    assert made and dict(made[0]["channel_args"]) == args


def test_a_negative_priority_and_a_top_k_outside_the_classes_are_refused_before_sending():
    """Triton's priority is unsigned: -1 got a JSON parse error over HTTP and "Value out of range"
    over gRPC; `classify --top-k 0` ended in an IndexError traceback (a review, 2026-12-06)."""
    from model_client.client import ModelInterface, TensorInfo, prepare_infer_call, top_k_predictions
    import tritonclient.http as module

    interface = ModelInterface("m", (TensorInfo("x", "FP32", (-1, 2)),), (TensorInfo("y", "FP32", (-1, 10)),))
    with pytest.raises(RequestRejectedError, match=r"priority -1: expected 0 \(the model's default level\) or a level"):
        prepare_infer_call(module, "http", interface, {"x": X}, priority=-1)
    assert prepare_infer_call(module, "http", interface, {"x": X}, priority=2).kwargs["priority"] == 2
    for k in (0, 11):
        with pytest.raises(ClientError, match=r"top-k .*: expected 1\.\.10"):
            top_k_predictions(np.zeros((1, 10), np.float32), k)


def test_an_http_clients_metadata_from_another_thread_gets_the_one_client_per_thread_error(url):
    with TritonModelClient(url) as client:
        client.interface("ok")
        seen = []
        thread = threading.Thread(target=lambda: seen.append(timed(lambda: client.interface("slow"))[0]))
        thread.start()
        thread.join(timeout=10)
    assert isinstance(seen[0], ClientError) and "make one client per thread" in str(seen[0]), seen
