"""Client error types: one root, and the few cases a caller handles differently."""


class ClientError(Exception):
    """Root of every error raised by `model_client`; the message is one readable line."""


class ServerUnavailableError(ClientError):
    """Nothing answers at the endpoint (server down, wrong port)."""


class ModelNotFoundError(ClientError):
    """The server answers but does not serve the requested model (or version)."""


class OverloadedError(ClientError):
    """The model's queue is full (HTTP 503 / gRPC UNAVAILABLE): retry later with backoff."""


class QueueTimeoutError(OverloadedError):
    """The request waited in the model's queue past its timeout and was rejected (Triton answers
    HTTP 503 / gRPC UNAVAILABLE "Request timeout expired"): the server is too busy for that
    deadline; retry with backoff only while the caller's own deadline allows."""


class ModelRestartingError(OverloadedError):
    """An instance of the model lost its backend process (Triton answers "Stub process ... is not
    healthy") and the server's supervisor reloads it within seconds: transient, so retried with
    backoff and degraded to a fallback like overload, not "rejected" as if the input were bad."""


class RequestRejectedError(ClientError):
    """The server (or the client, before sending) rejected this request as invalid (bad input,
    too many items for its priority): retrying it as is won't help."""
