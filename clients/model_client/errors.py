"""Client error types: one root, and the few cases a caller handles differently."""


class ClientError(Exception):
    """Root of every error raised by `model_client`; the message is one readable line."""


class ServerUnavailableError(ClientError):
    """Nothing answers at the endpoint (server down, wrong port)."""


class ModelNotFoundError(ClientError):
    """The server answers but does not serve the requested model (or version)."""


class OverloadedError(ClientError):
    """The model's queue is full (HTTP 503 / gRPC UNAVAILABLE): retry later with backoff."""


class RequestRejectedError(ClientError):
    """The server rejected this request (bad input, timeout in queue); retrying as is won't help."""
