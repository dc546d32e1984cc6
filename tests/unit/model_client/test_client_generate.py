"""model_client.generate's pure parts: what goes on the wire, how responses are read, and what a
caller sees when the transport fails (a loopback socket that never answers; serving itself is
tested against tritonserver in tests/integration)."""
from __future__ import annotations

import json

import pytest

from model_client.errors import ClientError, OverloadedError, RequestRejectedError, ServerUnavailableError
from model_client.generate import GenerationSettings, _chunk_from_json, _classify, _http_body, _rpc_error, generate_http
from model_client.generate_cli import add_generate_command


def test_sampling_parameters_carry_priority_max_tokens_and_deadline_only_when_set():
    assert json.loads(GenerationSettings().sampling_parameters()) == {"max_tokens": 64, "temperature": 0.0}
    fields = json.loads(GenerationSettings(max_tokens=8, priority=1, deadline_ms=1500, seed=3).sampling_parameters())
    assert fields == {"max_tokens": 8, "temperature": 0.0, "priority": 1, "deadline_ms": 1500, "seed": 3}
    assert json.loads(GenerationSettings(stop=("\n", "END")).sampling_parameters())["stop"] == ["\n", "END"]


def test_http_body_uses_the_vllm_tensor_names():
    body = json.loads(_http_body("hi", GenerationSettings(chat=True, system_prompt="Be brief."), stream=True))
    assert body["text_input"] == "hi" and body["stream"] is True and body["exclude_input_in_output"] is True
    assert body["apply_chat_template"] is True and body["system_prompt"] == "Be brief."
    assert json.loads(body["sampling_parameters"])["max_tokens"] == 64


def test_a_generate_event_becomes_a_chunk():
    chunk = _chunk_from_json({"text_output": " Paris", "finish_reason": "length", "num_input_tokens": 5, "output_token_ids": [7, 8]})
    assert chunk.text == " Paris" and chunk.token_ids == (7, 8) and chunk.finish_reason == "length" and chunk.num_input_tokens == 5


def test_errors_map_to_retryable_and_not_retryable():
    assert isinstance(_classify("the wait queue of priority 1 is full", "", "u", "m"), OverloadedError)
    assert isinstance(_classify("busy", "503", "u", "m"), OverloadedError)
    assert isinstance(_classify("text_input is empty", "400", "u", "m"), RequestRejectedError)
    # a gRPC stream's error is a message with no status (the stream ends OK): Triton's queue timeout and a
    # dead stub were "rejected", never retried (a review, 2026-12-07)
    from model_client.errors import ModelRestartingError, QueueTimeoutError

    assert isinstance(_classify("Request timeout expired", "None", "u", "m"), QueueTimeoutError)
    assert isinstance(_classify("Stub process 'smollm2_chat_0_0' is not healthy.", "None", "u", "m"), ModelRestartingError)


def test_a_server_that_is_down_is_unreachable_over_grpc_as_over_http():
    """gRPC reports a refused connection as UNAVAILABLE too: it used to become OverloadedError."""
    import grpc

    refused = "failed to connect to all addresses; Connection refused"
    assert isinstance(_classify(refused, "StatusCode.UNAVAILABLE", "u", "m"), ServerUnavailableError)
    error = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details=refused)
    assert isinstance(_rpc_error(error, "u", "m"), ServerUnavailableError)
    assert isinstance(_classify("Exceeds maximum queue size", "StatusCode.UNAVAILABLE", "u", "m"), OverloadedError)


def test_an_http_generation_with_no_answer_in_time_is_a_client_error_not_a_raw_timeout():
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(ClientError, match="no response from 'smollm2_chat'"):
            list(generate_http(f"127.0.0.1:{listener.getsockname()[1]}", "hi", timeout_s=0.3))
    finally:
        listener.close()


def _serve_once(behaviour):
    """A loopback listener whose first connection gets `behaviour(connection)` after the request."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def run():
        connection, _ = listener.accept()
        connection.recv(65536)
        behaviour(connection)

    threading.Thread(target=run, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}", listener


def _cut_mid_stream(connection):
    event = b'data: {"text_output": "a", "output_token_ids": [1]}\n\n'
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + b"%x\r\n%s\r\n" % (len(event), event))
    connection.close()


@pytest.mark.parametrize("behaviour", [lambda c: c.close(), _cut_mid_stream], ids=["before the headers", "mid-stream"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["blocking", "asyncio"])
def test_a_server_gone_mid_generation_is_unavailable_on_both_http_clients(behaviour, asynchronous):
    """A closed connection escaped raw (RemoteDisconnected, ClientPayloadError), was refused as bad
    input, or, mid-stream, ended as if the answer were complete."""
    import asyncio

    from model_client.generate import generate_http_async

    url, listener = _serve_once(behaviour)
    try:
        with pytest.raises(ServerUnavailableError, match="closed the connection before 'smollm2_chat' finished"):
            if asynchronous:
                asyncio.run(_collect(generate_http_async(url, "hi", timeout_s=5)))
            else:
                list(generate_http(url, "hi", timeout_s=5))
    finally:
        listener.close()


def test_an_unreachable_server_is_unavailable_on_both_http_clients():
    import asyncio
    import socket

    from model_client.generate import generate_http_async

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"127.0.0.1:{probe.getsockname()[1]}"
    probe.close()  # nothing listens there now
    with pytest.raises(ServerUnavailableError, match="is not reachable"):
        asyncio.run(_collect(generate_http_async(url, "hi", timeout_s=5)))
    with pytest.raises(ServerUnavailableError, match="is not reachable"):
        list(generate_http(url, "hi", timeout_s=5))


async def _collect(chunks):
    return [chunk async for chunk in chunks]


def test_generate_command_has_priority_max_tokens_deadline_async_and_protocol():
    import argparse

    parser = argparse.ArgumentParser()
    add_generate_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", "--prompt", "x", "--protocol", "grpc", "--async", "--priority", "1",
                              "--max-tokens", "9", "--deadline-ms", "500"])
    assert (args.protocol, args.use_async, args.priority, args.max_tokens, args.deadline_ms) == ("grpc", True, 1, 9, 500.0)


def test_an_http_error_body_reads_as_one_line_whether_json_or_a_server_sent_event():
    """/generate_stream answers a refused request with an event, `data: {"error": ...}`: the caller got
    the framing and blank lines in the message (a review, 2026-12-06)."""
    from model_client.generate import _error_text

    assert _error_text('data: {"error":"sampling_parameters `max_tokens` = -5: expected 1..1024"}\n\n') == \
        "sampling_parameters `max_tokens` = -5: expected 1..1024"
    assert _error_text('{"error":"text_input is empty"}') == "text_input is empty"
    assert _error_text("<html>bad gateway</html>\nmore") == "<html>bad gateway</html>"


def test_an_unknown_model_is_model_not_found_as_from_the_infer_clients():
    from model_client.errors import ModelNotFoundError

    assert isinstance(_classify("Request for unknown model: 'nosuch' is not found", "400", "u", "nosuch"), ModelNotFoundError)
    assert isinstance(_classify("Request for unknown model: 'nosuch' is not found", "StatusCode.NOT_FOUND", "u", "x"),
                      ModelNotFoundError)


def test_a_grpc_generation_to_a_dead_port_is_unreachable_never_a_raw_stream_error():
    """The stream's error callback can fire before async_stream_infer runs, which then raised
    tritonclient's "The stream is no longer in valid state" (1 run in 5, a traceback in the CLI)."""
    from model_client.generate import generate_grpc

    for _ in range(5):
        with pytest.raises(ServerUnavailableError, match="is not reachable"):
            list(generate_grpc("127.0.0.1:1", "hi", GenerationSettings(max_tokens=2), timeout_s=10))


def test_a_system_prompt_without_chat_is_refused_before_anything_is_sent():
    """The server refuses it by name; it used to be dropped silently from the request body."""
    with pytest.raises(ValueError, match="system_prompt is used only with chat=True"):
        GenerationSettings(system_prompt="You are a pirate.")
    assert GenerationSettings(chat=True, system_prompt="You are a pirate.").system_prompt == "You are a pirate."
