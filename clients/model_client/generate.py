"""Text generation against a decoupled Triton LLM model (vLLM-backend tensor names), streamed.

Sync and async, HTTP and gRPC, one interface: `generate(...)` yields `GenerationChunk`s as the
server sends them; the last one has a `finish_reason`. HTTP uses Triton's generate extension
(`/v2/models/<m>/generate_stream`, server-sent events; `/generate` when not streaming). gRPC uses
the bidirectional stream (a decoupled model cannot answer a unary ModelInfer). Priority,
max_tokens and the deadline travel in `sampling_parameters`; closing the iterator early cancels
the request on the server, which frees its KV blocks at the next step (over HTTP once the server has
written a response: a stream closed while it waits for a slot is seen at its first token; gRPC's
cancel reaches a waiting request at once; docs/generation.md, section 7).
"""
from __future__ import annotations

import asyncio
import functools
import http.client
import json
import queue
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator

from contracts.sampling import SamplingFields
from model_client.client import (
    CONNECTION_LOST_TEXTS,
    GATEWAY_STATUSES,
    RATE_LIMITED_STATUS,
    STUB_DIED_TEXTS,
    UNREACHABLE_TEXTS,
    check_url,
    gateway_error,
    grpc_channel_args,
    model_restarting_error,
    queue_timeout_error,
    rate_limited_error,
    utf8_bytes,
)
from model_client.errors import (
    ClientError, ModelNotFoundError, OverloadedError, RequestRejectedError, ServerUnavailableError,
)

DEFAULT_GENERATION_MODEL = "smollm2_chat"
#: Seconds each read (the response's first bytes, then each next piece) may take before the call gives
#: up: a stalled server or a half-open connection ends in an error instead of a hang. A long generation
#: streams for longer than this in all; with `stream=False` the whole answer must come within it.
DEFAULT_READ_TIMEOUT_S = 300.0


# Connections go straight to the server, whatever the http_proxy / HTTPS_PROXY variables say, as the
# infer clients' HTTP transports do: a proxy set for the outside world must not receive the prompts
# (urllib honoured it even for 127.0.0.1, where the infer calls of the same process did not).
@functools.lru_cache(maxsize=1)
def _direct_opener():
    """urllib's opener without the environment's proxies (built once)."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class GenerationChunk:
    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: str = ""
    num_input_tokens: int = 0


@dataclass(frozen=True)
class GenerationSettings(SamplingFields):
    """What to ask of one generation: the sampling fields (contracts.sampling, vLLM's), with a longer
    default output than vLLM's 16 tokens, and this server's priority, deadline and chat options."""

    max_tokens: int = 64
    priority: int = 0  # 0: the model's default
    deadline_ms: float | None = None
    chat: bool = False
    system_prompt: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.system_prompt and not self.chat:  # the server refuses it too (serving.generation.requests)
            raise ValueError("GenerationSettings.system_prompt is used only with chat=True (the chat template's "
                             "system turn): set chat=True, or put the instructions in the prompt.")

    def sampling_parameters(self) -> str:
        fields = self.sampling_json_fields()
        if self.deadline_ms is not None:
            fields["deadline_ms"] = self.deadline_ms
        if self.priority:
            fields["priority"] = self.priority
        return json.dumps({**fields, **self.extra})


def _no_response(url: str, model: str, timeout_s: float) -> ClientError:
    """Nothing came within `timeout_s` of the previous response (every client times each read alike):
    an OverloadedError, as the infer clients' network timeout and deadline (a documented, retryable kind;
    it was a bare ClientError)."""
    return OverloadedError(f"no response from {model!r} at {url} within {timeout_s} s (the read timeout, timeout_s): "
                           f"the server is stalled or overloaded; retry later, or give a longer timeout_s.")


def _classify(message: str, status: str, url: str, model: str) -> ClientError:
    """A failure as this client's error type. A server that is down is unreachable on every
    transport, although gRPC reports it as UNAVAILABLE too (checked first, so HTTP and gRPC agree)."""
    lowered = message.lower()
    if any(marker in lowered for marker in UNREACHABLE_TEXTS):  # the infer clients' words for both (client.py)
        return ServerUnavailableError(f"server at {url} is not reachable ({message}); is it running? try `make serve`.")
    if any(marker in lowered for marker in CONNECTION_LOST_TEXTS):  # gRPC's "Stream removed (Socket closed)"
        return _connection_lost(url, model, message)  # (was "overloaded": UNAVAILABLE, below)
    if "unknown model" in lowered or status == "StatusCode.NOT_FOUND":  # as the infer clients say it
        return ModelNotFoundError(f"model {model!r} is not served at {url}: {message}")
    # An error on a gRPC stream arrives as a message alone (the stream itself ends OK, with no status:
    # a review, 2026-12-07), so Triton's own words decide there: its queue timeout was "rejected".
    if "request timeout expired" in lowered:
        return queue_timeout_error(url, model, message)
    if all(marker in lowered for marker in STUB_DIED_TEXTS):
        return model_restarting_error(url, model, message)
    if status in ("503", "StatusCode.UNAVAILABLE") or "wait queue" in lowered:
        return OverloadedError(f"model {model!r} at {url} is overloaded ({message}); retry later with backoff.")
    if status in GATEWAY_STATUSES:  # an ingress or sidecar between (as the infer clients say it)
        return gateway_error(status, url, model)
    if status == RATE_LIMITED_STATUS:
        return rate_limited_error(url, model)
    return RequestRejectedError(f"request to {model!r} at {url} was rejected: {message}")


def _rpc_error(exc: Exception, url: str, model: str) -> ClientError:
    """A gRPC stream that failed as a whole (grpc.RpcError: server down, stream reset, deadline)."""
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    code = str(exc.code()) if callable(getattr(exc, "code", None)) else ""
    return _classify(details or repr(exc), code, url, model)


def _connection_lost(url: str, model: str, what: object) -> ServerUnavailableError:
    """The server closed the connection (or the stream ended) before the generation finished."""
    return ServerUnavailableError(f"server at {url} closed the connection before {model!r} finished ({what}); "
                                  f"it went down or restarted.")


def _connect_error(reason: object, url: str, model: str, timeout_s: float) -> ClientError:
    """Why an HTTP connection could not be opened: a connect timeout is an unreachable server too."""
    if isinstance(reason, TimeoutError):
        return ServerUnavailableError(f"server at {url} did not accept a connection within {timeout_s} s ({reason}); "
                                      f"is it running? try `make serve`.")
    if isinstance(reason, OSError):  # refused, unreachable, unknown host: aiohttp's text says none of it
        return ServerUnavailableError(f"server at {url} is not reachable ({reason}); is it running? try `make serve`.")
    return _classify(str(reason), "", url, model)


def _error_text(body: str) -> str:
    """Triton's error message from an HTTP error body: `{"error": ...}`, or one server-sent event
    `data: {"error": ...}` (/generate_stream), else the body's first line."""
    text = body.strip()
    if text.startswith("data:"):
        text = text[5:].strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text.splitlines()[0] if text else body
    return str(parsed.get("error", text)) if isinstance(parsed, dict) else text


def _chunk_from_sse_line(raw: bytes, url: str, model: str):
    """One server-sent-events line of /generate_stream: a chunk, None for other lines, or the
    server's error raised as this client's error type."""
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise _not_an_event(raw, url, model) from None
    if not line.startswith("data:"):
        return None
    event = _json_object(line[5:], url, model)
    if "error" in event:
        raise _classify(event["error"], "", url, model)
    return _chunk_from_json(event)


def _not_an_event(text: object, url: str, model: str) -> ClientError:
    shown = text[:200] if isinstance(text, (str, bytes)) else text
    return ClientError(f"the answer from {url} for {model!r} is not the JSON Triton sends ({shown!r}); expected "
                       f"`{{\"text_output\": ...}}` (or, streaming, lines `data: {{...}}`): is a proxy in between rewriting it?")


def _json_object(text: str | bytes, url: str, model: str) -> dict:
    """A generate answer or stream event as a dict, or a ClientError saying what came instead (a
    malformed event raised json.JSONDecodeError, a traceback from the CLI: a review, 2026-12-07)."""
    try:
        event = json.loads(text)
    except ValueError:
        raise _not_an_event(text, url, model) from None
    if not isinstance(event, dict):
        raise _not_an_event(text, url, model)
    return event


def _chunk_from_json(event: dict) -> GenerationChunk:
    def first(name, default):
        value = event.get(name, default)
        return value[0] if isinstance(value, list) and value and name != "output_token_ids" else value

    ids = event.get("output_token_ids", [])
    return GenerationChunk(str(first("text_output", "")), tuple(int(i) for i in (ids if isinstance(ids, list) else [ids])),
                           str(first("finish_reason", "") or ""), int(first("num_input_tokens", 0) or 0))


def _http_body(prompt: str, settings: GenerationSettings, stream: bool) -> bytes:
    _check_texts(prompt, settings)  # refused here as over gRPC (JSON would carry the surrogates)
    body: dict[str, Any] = {"text_input": prompt, "stream": stream, "sampling_parameters": settings.sampling_parameters(),
                            "exclude_input_in_output": True}
    if settings.chat:
        body["apply_chat_template"] = True
        if settings.system_prompt is not None:
            body["system_prompt"] = settings.system_prompt
    return json.dumps(body).encode("utf-8")


def generate_http(url: str, prompt: str, settings: GenerationSettings = GenerationSettings(), stream: bool = True,
                  model: str = DEFAULT_GENERATION_MODEL, timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> Iterator[GenerationChunk]:
    import urllib.error
    import urllib.request

    endpoint = f"http://{url}/v2/models/{model}/{'generate_stream' if stream else 'generate'}"
    request = urllib.request.Request(endpoint, data=_http_body(prompt, settings, stream), headers={"Content-Type": "application/json"})
    try:
        response = _direct_opener().open(request, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        raise _classify(_error_text(exc.read().decode("utf-8", "replace")), str(exc.code), url, model) from None
    except urllib.error.URLError as exc:
        raise _connect_error(exc.reason, url, model, timeout_s) from None
    except TimeoutError:  # connected, but no response headers in time
        raise _no_response(url, model, timeout_s) from None
    except (ConnectionError, http.client.HTTPException) as exc:  # closed before the response headers
        raise _connection_lost(url, model, repr(exc)) from None
    with response:
        try:
            if not stream:
                yield _chunk_from_json(_json_object(response.read(), url, model))
                return
            for raw in response:  # server-sent events: "data: {...}" lines
                chunk = _chunk_from_sse_line(raw, url, model)
                if chunk is not None:
                    yield chunk
                    if chunk.finish_reason:
                        return
        except TimeoutError:  # nothing more within `timeout_s` of the previous read
            raise _no_response(url, model, timeout_s) from None
        except (ConnectionError, http.client.HTTPException) as exc:
            raise _connection_lost(url, model, repr(exc)) from None
        # a stream that ends without a finish reason was cut: not a (short) answer
        raise _connection_lost(url, model, "the stream ended without a finish reason")


def _check_texts(prompt: str, settings: GenerationSettings) -> None:
    utf8_bytes(prompt, "the prompt")
    if settings.system_prompt is not None:
        utf8_bytes(settings.system_prompt, "the system prompt")


def _grpc_inputs(module, prompt: str, settings: GenerationSettings, stream: bool) -> list:
    import numpy as np

    _check_texts(prompt, settings)

    def tensor(name, value, dtype):
        wire = module.InferInput(name, [1], dtype)
        wire.set_data_from_numpy(np.array([value], dtype=object if dtype == "BYTES" else bool))
        return wire

    inputs = [tensor("text_input", prompt.encode("utf-8"), "BYTES"), tensor("stream", stream, "BOOL"),
              tensor("sampling_parameters", settings.sampling_parameters().encode("utf-8"), "BYTES"),
              tensor("exclude_input_in_output", True, "BOOL")]
    if settings.chat:
        inputs.append(tensor("apply_chat_template", True, "BOOL"))
        if settings.system_prompt is not None:
            inputs.append(tensor("system_prompt", settings.system_prompt.encode("utf-8"), "BYTES"))
    return inputs


def _chunk_from_result(result) -> GenerationChunk:
    def value(name, default):
        array = result.as_numpy(name)
        return default if array is None or array.size == 0 else array.reshape(-1)[0]

    text, reason = value("text_output", b""), value("finish_reason", b"")
    ids = result.as_numpy("output_token_ids")
    return GenerationChunk(text.decode("utf-8") if isinstance(text, bytes) else str(text),
                           tuple(int(i) for i in ([] if ids is None else ids.reshape(-1))),
                           reason.decode("utf-8") if isinstance(reason, bytes) else str(reason), int(value("num_input_tokens", 0)))


def generate_grpc(url: str, prompt: str, settings: GenerationSettings = GenerationSettings(), stream: bool = True,
                  model: str = DEFAULT_GENERATION_MODEL, timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> Iterator[GenerationChunk]:
    import tritonclient.grpc as grpc

    results: queue.Queue = queue.Queue()
    client = grpc.InferenceServerClient(url, channel_args=grpc_channel_args())
    finished = False
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer(model, _grpc_inputs(grpc, prompt, settings, stream))
        except grpc.InferenceServerException as exc:  # the stream already failed: its callback says why
            try:
                _, error = results.get(timeout=1.0)
            except queue.Empty:
                error = exc
            finished = True
            raise _classify(error.message() if hasattr(error, "message") else str(error), str(error.status()), url,
                            model) from None
        while True:
            try:
                result, error = results.get(timeout=timeout_s)
            except queue.Empty:
                raise _no_response(url, model, timeout_s) from None
            if error is not None:
                finished = True
                raise _classify(error.message() if hasattr(error, "message") else str(error), str(error.status()), url, model)
            chunk = _chunk_from_result(result)
            yield chunk
            if chunk.finish_reason:
                finished = True
                return
    finally:
        client.stop_stream(cancel_requests=not finished)  # an abandoned iterator cancels the request
        client.close()


async def generate_http_async(url: str, prompt: str, settings: GenerationSettings = GenerationSettings(), stream: bool = True,
                              model: str = DEFAULT_GENERATION_MODEL, timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> AsyncIterator[GenerationChunk]:
    import aiohttp

    endpoint = f"http://{url}/v2/models/{model}/{'generate_stream' if stream else 'generate'}"
    try:
        # per read, as the blocking clients: a long generation streams for longer than `timeout_s` in all
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.post(endpoint, data=_http_body(prompt, settings, stream), headers={"Content-Type": "application/json"}) as response:
                if response.status != 200:
                    raise _classify(_error_text(await response.text()), str(response.status), url, model)
                if not stream:
                    yield _chunk_from_json(_json_object(await response.read(), url, model))
                    return
                async for raw in response.content:
                    chunk = _chunk_from_sse_line(raw, url, model)
                    if chunk is not None:
                        yield chunk
                        if chunk.finish_reason:
                            return
                raise _connection_lost(url, model, "the stream ended without a finish reason")
    except asyncio.TimeoutError:
        raise _no_response(url, model, timeout_s) from None
    except aiohttp.ClientConnectorError as exc:  # no connection at all: unreachable, as over the other transports
        raise _connect_error(exc.os_error, url, model, timeout_s) from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        raise _connection_lost(url, model, repr(exc)) from None
    except aiohttp.ClientConnectionError as exc:
        raise _classify(str(exc), "", url, model) from None


async def generate_grpc_async(url: str, prompt: str, settings: GenerationSettings = GenerationSettings(), stream: bool = True,
                              model: str = DEFAULT_GENERATION_MODEL, timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> AsyncIterator[GenerationChunk]:
    import grpc
    import tritonclient.grpc.aio as grpc_aio

    async with grpc_aio.InferenceServerClient(url, channel_args=grpc_channel_args()) as client:
        async def requests():
            yield {"model_name": model, "inputs": _grpc_inputs(grpc_aio, prompt, settings, stream)}

        responses = client.stream_infer(requests())
        try:
            while True:  # `timeout_s` per response, as the blocking clients (a stream_timeout would cap the whole stream)
                try:
                    result, error = await asyncio.wait_for(responses.__anext__(), timeout_s)
                except StopAsyncIteration:  # ended without a finish reason: cut, not a (short) answer
                    raise _connection_lost(url, model, "the stream ended without a finish reason") from None
                except asyncio.TimeoutError:
                    raise _no_response(url, model, timeout_s) from None
                except grpc.RpcError as exc:  # tritonclient's response iterator passes grpc.aio's own errors on
                    raise _rpc_error(exc, url, model) from None
                if error is not None:
                    raise _classify(error.message() if hasattr(error, "message") else str(error), str(error.status()), url, model)
                chunk = _chunk_from_result(result)
                yield chunk
                if chunk.finish_reason:
                    return
        finally:
            responses.cancel()  # no-op when finished; cancels the request when the caller stopped early


def generate(url: str, protocol: str, prompt: str, settings: GenerationSettings = GenerationSettings(), stream: bool = True,
             model: str = DEFAULT_GENERATION_MODEL, timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> Iterator[GenerationChunk]:
    """The text for `prompt`, piece by piece (`stream`) or in one piece; `timeout_s` per read
    (DEFAULT_READ_TIMEOUT_S); a whole generation's bound is `settings.deadline_ms`, which the server keeps."""
    call = generate_http if protocol == "http" else generate_grpc
    return call(check_url(url), prompt, settings, stream, model, _read_timeout(timeout_s))


def generate_async(url: str, protocol: str, prompt: str, settings: GenerationSettings = GenerationSettings(), stream: bool = True,
                   model: str = DEFAULT_GENERATION_MODEL, timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> AsyncIterator[GenerationChunk]:
    """As `generate`, for asyncio."""
    call = generate_http_async if protocol == "http" else generate_grpc_async
    return call(check_url(url), prompt, settings, stream, model, _read_timeout(timeout_s))


def _read_timeout(timeout_s: float) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise ClientError(f"timeout_s = {timeout_s!r}: expected seconds > 0 for each read (default {DEFAULT_READ_TIMEOUT_S:g}).")
    return float(timeout_s)
