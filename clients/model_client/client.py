"""A synchronous client over HTTP or gRPC with one interface, and clear one-line errors.

Tensor names and data types are read from the server's model metadata, so the client never
repeats a model's interface. Triton's error codes are mapped to a few exception types a caller
can act on: unavailable (server down), not found (model missing), overloaded (503/UNAVAILABLE:
retry with backoff; a queue timeout is a kind of overload), rejected (bad input: do not retry).
Retries, backoff and fallback live in `model_client.resilient`; the asyncio client in
`model_client.aio` shares the helpers below.
"""
from __future__ import annotations

import numbers

import threading
import time
from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Sequence

import numpy as np

from model_client.errors import (
    ClientError,
    ModelNotFoundError,
    ModelRestartingError,
    OverloadedError,
    QueueTimeoutError,
    RequestRejectedError,
    ServerUnavailableError,
)


class Protocol(str, Enum):
    HTTP = "http"
    GRPC = "grpc"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    datatype: str  # Triton wire type: FP32, INT64, BYTES, ...
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelInterface:
    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


#: How the transports say the connection ended before an answer came (geventhttpclient, aiohttp, gRPC):
#: the server went down or restarted mid-request. Unavailable, not bad input: inference is idempotent,
#: so it is retried like a refused connection.
CONNECTION_LOST_TYPES = frozenset({"HTTPConnectionClosed", "ClientConnectionError", "ServerDisconnectedError"})
CONNECTION_LOST_TEXTS = ("connection closed", "server disconnected", "connection reset", "broken pipe",
                         "stream removed", "socket closed", "connection aborted")
#: How they say no connection was made at all (refused, or a host name that does not resolve): checked
#: first, since aiohttp's connect error is a ClientConnectionError too, and gRPC's "Domain name not
#: found" is no missing model.
UNREACHABLE_TYPES = frozenset({"ClientConnectorError"})
UNREACHABLE_TEXTS = ("failed to connect", "connection refused", "cannot connect to host", "errors resolving",
                     "dns resolution failed", "domain name not found", "name or service not known",
                     "temporary failure in name resolution", "nodename nor servname")


def check_url(url: str) -> str:
    """`url` if it is a server's `host:port` as tritonclient takes it; a clear error otherwise (a scheme
    or a path made gRPC answer "overloaded" after retries, and HTTP raise tritonclient's own error)."""
    if not isinstance(url, str) or not url or "://" in url or "/" in url or any(c.isspace() for c in url):
        raise ClientError(f"server url {url!r}: expected host:port (for example 127.0.0.1:8000), without a scheme "
                          f"(http://, grpc://) or a path.")
    return url


def deadline_error(url: str, model: str | None, seconds: float) -> OverloadedError:
    """The answer did not come within the caller's deadline: as gRPC's DEADLINE_EXCEEDED, for every transport."""
    return OverloadedError(f"model {model!r} at {url} did not answer within the client deadline ({seconds:.3g} s).")


def classify_triton_error(exc: Exception, url: str, model: str | None = None) -> ClientError:
    """Map a tritonclient/transport exception to one of our error types with a one-line message."""
    message = exc.message() if callable(getattr(exc, "message", None)) else str(exc)
    text = (message or repr(exc)).strip().splitlines()[0]
    status = str(exc.status() if callable(getattr(exc, "status", None)) else "")
    lowered = text.lower()
    if isinstance(exc, TimeoutError):  # a socket or network timeout: no answer in time, as a client deadline
        return OverloadedError(f"model {model!r} at {url} did not answer within the client's network timeout ({text}).")
    kinds = {c.__name__ for c in type(exc).__mro__}
    # A server's own 500 (model code raised) is its answer, whatever words its message holds: a model's
    # "connection reset" was retried as a lost server and its "not found" read as a missing model (a review,
    # 2026-12-07). The words below classify transport errors and Triton's own statuses only.
    if status in INTERNAL_STATUSES and not all(marker in lowered for marker in STUB_DIED_TEXTS):
        return RequestRejectedError(f"request to {model!r} at {url} was rejected: {text}")
    if UNREACHABLE_TYPES & kinds or any(marker in lowered for marker in UNREACHABLE_TEXTS):
        return ServerUnavailableError(f"server at {url} is not reachable ({text}); is it running? try `make serve`.")
    if CONNECTION_LOST_TYPES & kinds or any(marker in lowered for marker in CONNECTION_LOST_TEXTS):
        return ServerUnavailableError(f"server at {url} closed the connection before answering ({text}): it went "
                                      f"down or restarted; retry while your deadline allows.")
    if isinstance(exc, (ConnectionError, OSError)):
        return ServerUnavailableError(f"server at {url} is not reachable ({text}); is it running? try `make serve`.")
    if "shared memory region" in lowered:  # NOT_FOUND over gRPC too, but the model is there (a review, 2026-12-07)
        return RequestRejectedError(f"request to {model!r} at {url} names a shared-memory region the server does not "
                                    f"hold ({text}); register the region first (the shared-memory API needs the admin key).")
    if all(marker in lowered for marker in STUB_DIED_TEXTS):  # a 500, but the server's fault and healed within seconds
        return model_restarting_error(url, model, text)
    if "unknown model" in lowered or "not found" in lowered or "is not ready" in lowered or status in ("StatusCode.NOT_FOUND",):
        return ModelNotFoundError(f"model {model!r} is not served at {url}: {text}")
    wire = {"503": "HTTP 503", "StatusCode.UNAVAILABLE": "gRPC UNAVAILABLE"}.get(status, status or "error")
    if "request timeout expired" in lowered:
        return queue_timeout_error(url, model, f"{wire}: {text}")
    if status == "StatusCode.DEADLINE_EXCEEDED" or "deadline exceeded" in lowered:
        return OverloadedError(f"model {model!r} at {url} did not answer within the client deadline ({text}).")
    if "exceeds maximum queue size" in lowered or status in ("503", "StatusCode.UNAVAILABLE"):
        return OverloadedError(f"model {model!r} at {url} is overloaded ({wire}: {text}); retry later with backoff.")
    if status in GATEWAY_STATUSES:  # an ingress or sidecar between: the server's answer never came
        return gateway_error(status, url, model)
    if status == RATE_LIMITED_STATUS:
        return rate_limited_error(url, model)
    if not _from_triton(exc):  # this process's own failure (a closed event loop, a bug): not the server's verdict
        return ClientError(f"request to {model!r} at {url} failed in the client: {type(exc).__name__}: {text}")
    return RequestRejectedError(f"request to {model!r} at {url} was rejected: {text}")


#: A server's "internal error" answers (HTTP 500, gRPC INTERNAL): model code raised, or a stub died.
INTERNAL_STATUSES = ("500", "StatusCode.INTERNAL")
#: Triton's Python backend, for a request that reached an instance whose stub process died.
STUB_DIED_TEXTS = ("stub process", "is not healthy")
#: HTTP statuses an intermediary (ingress, service mesh sidecar, load balancer) answers when the
#: server behind it did not: transient, so retried, where they were "rejected" (bad input, never retried).
GATEWAY_STATUSES = {"502": "bad gateway", "504": "gateway timeout"}
#: HTTP 429 Too Many Requests: Triton never sends it (a full queue is 503), a rate limit in front of
#: it does (an ingress's limit_req, a mesh's local rate limit). Overload, so retried with backoff, where
#: it was "rejected" and never retried (a review, 2026-12-07).
RATE_LIMITED_STATUS = "429"


def queue_timeout_error(url: str, model: str, what: str) -> QueueTimeoutError:
    """Triton's "Request timeout expired", as the infer and generate clients say it."""
    return QueueTimeoutError(f"request to {model!r} at {url} waited in the queue past its timeout and was rejected "
                             f"({what}); the model is busy: retry with backoff while your deadline allows, or send it "
                             f"at a higher priority.")


def model_restarting_error(url: str, model: str, what: str) -> ModelRestartingError:
    """A dead backend stub ("Stub process ... is not healthy"), as the infer and generate clients say it."""
    return ModelRestartingError(f"model {model!r} at {url} lost a backend process ({what}); the server reloads it "
                                f"within seconds: retry with backoff while your deadline allows.")


def gateway_error(status: str, url: str, model: str) -> ServerUnavailableError:
    return ServerUnavailableError(f"a gateway between this client and {url} answered HTTP {status} "
                                  f"({GATEWAY_STATUSES[status]}) for {model!r}: the server behind it is down, "
                                  f"restarting or slow; retry while your deadline allows.")


def rate_limited_error(url: str, model: str) -> OverloadedError:
    return OverloadedError(f"something between this client and {url} answered HTTP 429 (too many requests) for "
                           f"{model!r}: a rate limit in front of the server (Triton itself answers 503); retry later "
                           f"with backoff.")


def _from_triton(exc: Exception) -> bool:
    """Whether `exc` is tritonclient's report of the server's answer (or of its transport)."""
    from tritonclient.utils import InferenceServerException

    return isinstance(exc, InferenceServerException)


def interface_from_metadata(model: str, meta: Mapping) -> ModelInterface:
    """ModelInterface from Triton's model metadata as a dict (HTTP JSON, or gRPC as JSON)."""

    def tensors(items):
        return tuple(TensorInfo(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])) for t in items)

    return ModelInterface(model, tensors(meta["inputs"]), tensors(meta["outputs"]))


def utf8_bytes(text: str, what: str) -> bytes:
    """`text` as UTF-8, or a RequestRejectedError naming `what`. A str can hold what UTF-8 cannot
    encode: lone surrogates, as Python makes of a command-line argument or file in another encoding
    (Latin-1 `caf\\xe9`); `.encode` raised UnicodeEncodeError, a traceback from the CLIs, over gRPC
    only (over HTTP the server refused it), per a review on 2026-12-07."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestRejectedError(f"{what} is not valid UTF-8 text: character {exc.start} is {text[exc.start]!r}, "
                                   f"a lone surrogate (bytes in another encoding, such as Latin-1, read as UTF-8); "
                                   f"expected UTF-8 text.") from None


def require_arrays(model: str, inputs: Mapping[str, np.ndarray]) -> None:
    """Every input a numpy array, else a RequestRejectedError naming it (a list raised AttributeError
    deep in the call, which `infer_concurrently` did not catch: the other jobs' results were lost)."""
    if not isinstance(inputs, Mapping):
        raise RequestRejectedError(f"inputs of {model!r}: got {type(inputs).__name__}; expected a mapping of input "
                                   f"name to numpy.ndarray, e.g. {{'image': np.zeros((1, 1, 8, 8), np.float32)}}.")
    for name, array in inputs.items():
        if not isinstance(array, np.ndarray):
            raise RequestRejectedError(f"input {name!r} of {model!r}: got {type(array).__name__}; expected a "
                                       f"numpy.ndarray whose first axis is the batch (np.asarray(..., dtype=...) converts).")


def build_wire_inputs(module, interface: ModelInterface, inputs: Mapping[str, np.ndarray]) -> list:
    """tritonclient InferInput objects (of `module`: http, grpc or their aio twins) for `inputs`."""
    require_arrays(interface.name, inputs)
    known = {t.name: t for t in interface.inputs}
    unknown = set(inputs) - set(known)
    if unknown:
        raise RequestRejectedError(f"model {interface.name!r} has no inputs {sorted(unknown)}; it expects {sorted(known)}.")
    wire_inputs = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), known[name].datatype)
        try:
            tensor.set_data_from_numpy(array)
        except Exception as exc:  # tritonclient's own check (dtype, BYTES content): bad input, never sent
            raise RequestRejectedError(
                f"input {name!r} of model {interface.name!r}: {str(exc).strip().splitlines()[0]} (expected "
                f"{known[name].datatype}, shape {list(known[name].shape)}; got {array.dtype}, shape {list(array.shape)})."
            ) from None
        wire_inputs.append(tensor)
    return wire_inputs


@dataclass(frozen=True)
class InferCall:
    """One request's tritonclient arguments, the same for the sync and the aio clients."""

    inputs: list
    outputs: list
    output_names: list[str]
    kwargs: dict


def prepare_infer_call(module, protocol: Protocol, interface: ModelInterface, inputs: Mapping[str, np.ndarray],
                       priority: int = 0, timeout_us: int | None = None,
                       output_names: Sequence[str] | None = None, client_timeout_s: float | None = None) -> InferCall:
    """Wire inputs/outputs and the priority, queue-timeout and (gRPC) deadline arguments."""
    is_integer = isinstance(priority, numbers.Integral) and not isinstance(priority, bool)
    if not is_integer or priority < 0:  # Triton's is unsigned
        kind = "" if is_integer else f" (a {type(priority).__name__})"
        raise RequestRejectedError(f"priority {priority!r}{kind}: expected 0 (the model's default level) or a level 1, 2, ... "
                                   f"(1 = realtime, the highest), an integer.")
    priority = int(priority)  # numpy's integers too (a level read from an array): JSON and protobuf take int
    names = list(output_names or [t.name for t in interface.outputs])
    kwargs: dict = {"priority": priority}
    if timeout_us is not None:
        kwargs["timeout"] = int(timeout_us)
    if client_timeout_s is not None and protocol is Protocol.GRPC:
        kwargs["client_timeout"] = float(client_timeout_s)
    return InferCall(build_wire_inputs(module, interface, inputs), [module.InferRequestedOutput(n) for n in names],
                     names, kwargs)


class _DeadlineExceeded(Exception):
    """Raised into a blocking HTTP call by its gevent timer (see `TritonModelClient._call`)."""


#: gRPC's reconnect backoff, capped. Its default (1 s, x1.6 after each failed connect, jittered, up
#: to 120 s) is kept per server address for the whole process, so after a partition restart gRPC
#: clients, new ones too, were answered 0.8-4.3 s after the server was ready (HTTP at once; a
#: review, 2026-12-06): a refused connect is cheap to retry, and a restart takes ~5 s. Not
#: `grpc.min_reconnect_backoff_ms`: it is also the least time one connect attempt is given (20 s),
#: and a server busy enough to answer its handshake late must not be unreachable for that.
GRPC_RECONNECT_BACKOFF_MS = {"grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 1000}


def grpc_channel_args() -> list[tuple[str, int]]:
    """tritonclient's own channel options (its message-size limits and keepalive defaults: passing
    any channel argument replaces all of them) plus the capped reconnect backoff, and no proxy: gRPC
    honours the environment's http_proxy (even for 127.0.0.1) where the HTTP transports do not, so
    with a proxy set for the outside world gRPC calls went to it (a review, 2026-12-07)."""
    import tritonclient.grpc as grpc

    keepalive = grpc.KeepAliveOptions()
    return [("grpc.max_send_message_length", grpc.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", grpc.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
            *GRPC_RECONNECT_BACKOFF_MS.items(), ("grpc.enable_http_proxy", 0)]


class TritonModelClient:
    """One connection to one server; safe to reuse across calls (not across threads for HTTP)."""

    def __init__(self, url: str, protocol: Protocol | str = Protocol.HTTP, network_timeout_s: float = 30.0):
        self.url = check_url(url)
        self.protocol = Protocol(protocol)
        self._network_timeout_s = network_timeout_s
        if self.protocol is Protocol.HTTP:
            import tritonclient.http as module

            self._module = module
            self._client = self._http_client()
            #: The thread that first used it: gevent's hub, hence its connections, belong to that thread.
            self._thread: int | None = None
        else:
            import tritonclient.grpc as module

            self._module = module
            self._client = module.InferenceServerClient(url, channel_args=grpc_channel_args())
        self._interfaces: dict[str, ModelInterface] = {}

    def _http_client(self):
        return self._module.InferenceServerClient(
            self.url, connection_timeout=self._network_timeout_s, network_timeout=self._network_timeout_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "TritonModelClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, model: str, client_timeout_s: float | None, function, *args, **kwargs):
        """`function(*args, **kwargs)`, its errors classified. Over HTTP a `client_timeout_s` bounds the
        wait: tritonclient.http blocks in gevent, so a gevent timer interrupts it, and the connections
        are then replaced (geventhttpclient gives a connection back to its pool only on a socket
        error: one interrupted while sending the request stayed taken, and every later call of this
        client waited for it until its own deadline); gRPC calls take the deadline as their own
        `client_timeout`."""
        try:
            if self.protocol is Protocol.HTTP and client_timeout_s is not None:
                import gevent

                with gevent.Timeout(max(client_timeout_s, 0.001), _DeadlineExceeded):
                    return function(*args, **kwargs)
            return function(*args, **kwargs)
        except _DeadlineExceeded:
            self._replace_http_client()
            raise deadline_error(self.url, model, client_timeout_s) from None
        except Exception as exc:  # tritonclient raises its own and transport errors
            raise classify_triton_error(exc, self.url, model) from None

    def _replace_http_client(self) -> None:
        """A new tritonclient HTTP client (fresh connections) instead of one whose call was interrupted."""
        stale, self._client = self._client, self._http_client()
        try:
            stale.close()
        except Exception:  # noqa: BLE001 - closing what was interrupted may fail; the new client is what counts
            pass

    def _check_thread(self) -> None:
        """An HTTP client stays with the thread that first used it: sharing one used to hang (a read
        waited in the other thread's gevent hub) or fail with gevent's own words."""
        if self.protocol is Protocol.HTTP and self._thread != threading.get_ident():
            if self._thread is not None:
                raise ClientError(f"this HTTP client of {self.url} is used by another thread: tritonclient.http's "
                                  f"connections are not shared across threads; make one client per thread.")
            self._thread = threading.get_ident()

    def interface(self, model: str, client_timeout_s: float | None = None) -> ModelInterface:
        """The model's inputs and outputs (fetched once; within `client_timeout_s` when given)."""
        if model not in self._interfaces:
            self._check_thread()
            if client_timeout_s is None and self.protocol is Protocol.GRPC:
                client_timeout_s = self._network_timeout_s
            grpc = {"client_timeout": client_timeout_s} if self.protocol is Protocol.GRPC else {}
            meta = self._call(model, client_timeout_s, self._client.get_model_metadata, model, **grpc)
            if self.protocol is Protocol.GRPC:
                from google.protobuf.json_format import MessageToDict

                meta = MessageToDict(meta, preserving_proto_field_name=True)

            self._interfaces[model] = interface_from_metadata(model, meta)
        return self._interfaces[model]

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], priority: int = 0, timeout_us: int | None = None,
              output_names: Sequence[str] | None = None, client_timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """Run one request. `priority` 0 means the model's default level; `timeout_us` shortens the
        queue timeout (the server rejects the request if it waits longer); `client_timeout_s` bounds
        the whole call, the first call's metadata fetch included (OverloadedError when it passes)."""
        self._check_thread()
        if client_timeout_s is None and self.protocol is Protocol.GRPC:
            client_timeout_s = self._network_timeout_s  # gRPC has no socket timeout: the call's deadline
        deadline = None if client_timeout_s is None else time.monotonic() + client_timeout_s
        interface = self.interface(model, client_timeout_s)
        left = None if deadline is None else deadline - time.monotonic()
        call = prepare_infer_call(self._module, self.protocol, interface, inputs, priority, timeout_us, output_names, left)
        result = self._call(model, left, self._client.infer, model, call.inputs, outputs=call.outputs, **call.kwargs)
        return {n: result.as_numpy(n) for n in call.output_names}


@dataclass(frozen=True)
class Prediction:
    labels: tuple[int, ...]
    scores: tuple[float, ...]

    @property
    def top1(self) -> int:
        return self.labels[0]


def top_k_predictions(probabilities: np.ndarray, k: int) -> list[Prediction]:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= probabilities.shape[-1]:
        raise ClientError(f"top-k {k!r}: expected 1..{probabilities.shape[-1]} (the model's classes).")
    order = np.argsort(-probabilities, axis=-1)[:, :k]
    return [
        Prediction(tuple(int(c) for c in row), tuple(float(probabilities[i, c]) for c in row))
        for i, row in enumerate(order)
    ]


def classify(client: TritonModelClient, model: str, images: np.ndarray, top_k: int = 3, **infer_kwargs) -> list[Prediction]:
    """Classify a batch of [N, 1, 8, 8] images; the model's first input/output are used."""
    interface = client.interface(model)
    outputs = client.infer(model, {interface.inputs[0].name: np.ascontiguousarray(images, dtype=np.float32)}, **infer_kwargs)
    return top_k_predictions(outputs[interface.outputs[0].name], top_k)
