"""The clients against what sits between them and the server, or around the call: a proxy in the
environment, a gateway answering 502/504, a stalled server, a malformed job among many, a client
reused on another event loop. Real sockets, no server (a review of 2026-12-07 found each; every
test failed before the fix)."""
import asyncio
import socket
import threading
import time

import numpy as np
import pytest

from model_client.aio import AsyncResilientClient, InferenceJob, infer_concurrently
from model_client.client import TritonModelClient
from model_client.errors import ClientError, OverloadedError, ServerUnavailableError
from model_client.generate import GenerationSettings, generate, generate_http
from model_client.policies import NO_RETRY


def _listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s, f"127.0.0.1:{s.getsockname()[1]}"


class _LoopbackServer:
    """Accepts connections on a free loopback port and hands each to `serve` on a thread of its own."""

    def __init__(self):
        self.sock, self.url = _listener()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(connection,), daemon=True).start()

    def serve(self, connection: socket.socket) -> None:
        raise NotImplementedError


class _FakeHttpProxy(_LoopbackServer):
    """Records the first line of every request it receives; answers 502."""

    def __init__(self):
        self.seen = []
        super().__init__()

    def serve(self, connection):
        self.seen.append(connection.recv(4096).split(b"\r\n")[0].decode())
        connection.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        connection.close()


def _closed_port_url():
    s, url = _listener()
    s.close()
    return url


@pytest.fixture
def proxy_env(monkeypatch):
    proxy = _FakeHttpProxy()
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "grpc_proxy"):
        monkeypatch.setenv(var, f"http://{proxy.url}")
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    yield proxy
    proxy.sock.close()


def test_generate_http_does_not_send_prompts_to_the_environment_proxy(proxy_env):
    # tritonclient.http and aiohttp ignore *_proxy; urllib (generate_http) does not.
    server, url = _listener()
    with pytest.raises(ClientError):
        list(generate_http(url, "secret prompt", GenerationSettings(max_tokens=1), timeout_s=1.0))
    server.close()
    assert proxy_env.seen == [], f"request went through the proxy: {proxy_env.seen}"


def test_grpc_infer_does_not_go_through_the_environment_proxy(proxy_env):
    # grpc core honours http_proxy unless grpc.enable_http_proxy=0; the HTTP client of the same library does not.
    url = _closed_port_url()
    with TritonModelClient(url, "grpc", network_timeout_s=2.0) as client:
        with pytest.raises(ServerUnavailableError):
            client.infer("digit_classifier", {"image": np.ones((1, 1, 8, 8), np.float32)})
    assert proxy_env.seen == [], f"gRPC went through the proxy: {proxy_env.seen}"


def test_infer_concurrently_returns_one_result_per_job_when_one_job_is_malformed():
    # Documented: "one InferenceResult per job, in order ... never a silent drop". A job whose input is
    # a list (not an ndarray) raises AttributeError out of gather; the other jobs' results are lost and
    # the still-running ones are orphaned.
    url = _closed_port_url()

    async def main():
        async with AsyncResilientClient("http", url=url, retry=NO_RETRY) as client:
            good = {"image": np.ones((1, 1, 8, 8), np.float32)}
            jobs = [InferenceJob("digit_classifier", good) for _ in range(10)]
            jobs.insert(5, InferenceJob("digit_classifier", {"image": [[0.0] * 64]}))
            return await infer_concurrently(client, jobs, concurrency=2)

    results = asyncio.run(main())
    assert len(results) == 11
    assert isinstance(results[5].error, ClientError)


def test_generate_takes_a_timeout_and_a_stalled_server_is_a_documented_error_type():
    # A server that accepts and then sends nothing (hung model, half-open connection): generate()
    # (and the CLI) waited 300 s per read with no way to shorten it, then raised a bare ClientError.
    server, url = _listener()
    start = time.monotonic()
    try:
        with pytest.raises((OverloadedError, ServerUnavailableError)):
            list(generate(url, "http", "hi", GenerationSettings(max_tokens=1), timeout_s=0.5))
    finally:
        server.close()
    assert time.monotonic() - start < 5


class _FakeGateway(_LoopbackServer):
    """An HTTP intermediary (ingress, sidecar) answering every request with `code` and a non-JSON body."""

    def __init__(self, code: int):
        self.code = code
        super().__init__()

    def serve(self, connection):
        body = b"upstream connect error or disconnect/reset before headers"
        try:
            while connection.recv(65536):
                connection.sendall(b"HTTP/1.1 %d Gateway\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                                   % (self.code, len(body), body))
        except OSError:
            pass


@pytest.mark.parametrize("code", [502, 504])
def test_gateway_errors_are_retryable_not_bad_input(code):
    # A 502/504 from an intermediary is transient; it was RequestRejectedError ("retrying won't help").
    gateway = _FakeGateway(code)
    try:
        with TritonModelClient(gateway.url, "http") as client:
            with pytest.raises((ServerUnavailableError, OverloadedError)):
                client.infer("digit_classifier", {"image": np.ones((1, 1, 8, 8), np.float32)})
    finally:
        gateway.sock.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_error_is_not_reported_as_the_server_rejecting_the_input(protocol):
    # An AsyncResilientClient reused under a second asyncio.run(): its connection belongs to the first
    # loop. It was RequestRejectedError "was rejected: Event loop is closed" (a bad-input error).
    from model_client.errors import RequestRejectedError

    url = _closed_port_url()
    client = AsyncResilientClient(protocol, url=url, retry=NO_RETRY)
    x = {"image": np.ones((1, 1, 8, 8), np.float32)}
    with pytest.raises(ServerUnavailableError):
        asyncio.run(client.infer("digit_classifier", x))
    with pytest.raises(Exception) as second:
        asyncio.run(client.infer("digit_classifier", x))
    assert not isinstance(second.value, RequestRejectedError), f"{type(second.value).__name__}: {second.value}"
    # gRPC's aio call made on the closed loop is never awaited: collected here, its RuntimeWarning is not
    # printed against whichever later test the garbage collector happens to run in
    import gc
    import warnings

    del second
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        gc.collect()


def test_an_http_async_client_made_outside_an_event_loop_says_where_to_make_it():
    from model_client.aio import AsyncTritonModelClient

    with pytest.raises(ClientError, match="created outside a running event loop: create it inside a coroutine"):
        AsyncTritonModelClient(_closed_port_url(), "http")


def test_generate_refuses_a_timeout_that_is_not_positive_seconds():
    for bad in (0, -1, float("inf"), "5", True):
        with pytest.raises(ClientError, match="expected seconds > 0 for each read"):
            generate("127.0.0.1:1", "http", "hi", timeout_s=bad)
