"""Errors of the generation runtime: one root, a few kinds a caller acts on differently."""
from __future__ import annotations

from contracts.errors import ServingError


class GenerationError(ServingError):
    """Root of the generation runtime's errors."""


class InvalidGenerationRequest(GenerationError):
    """The request itself is wrong (400 / INVALID_ARGUMENT): do not retry it unchanged."""


class WaitQueueFull(GenerationError):
    """The wait queue of the request's priority is full (503 / UNAVAILABLE): retry with backoff."""


class OutOfKvBlocks(GenerationError):
    """No free or evictable KV block is left (the scheduler preempts or waits; never a client error)."""
