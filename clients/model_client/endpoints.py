"""Where to send a model's requests: an explicit URL, else run/manifest.json, else Triton's defaults.

`make serve` writes run/manifest.json with one entry per model (its partition's HTTP, gRPC and
metrics endpoints), so a model and its fallback may live on different servers; clients look the
model up per call, which also follows a partition that the supervisor restarted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from model_client.client import Protocol

from contracts.layout import MANIFEST as DEFAULT_MANIFEST
TRITON_DEFAULT_URLS = {Protocol.HTTP: "127.0.0.1:8000", Protocol.GRPC: "127.0.0.1:8001"}


@dataclass(frozen=True)
class ModelEndpoints:
    """One model's entry in run/manifest.json."""

    model: str
    http: str
    grpc: str
    metrics: str | None = None
    partition: str | None = None

    def url(self, protocol: Protocol | str) -> str:
        return self.http if Protocol(protocol) is Protocol.HTTP else self.grpc


def model_endpoints(model: str, manifest: Path = DEFAULT_MANIFEST) -> ModelEndpoints | None:
    """The manifest's entry for `model`, or None when there is no manifest or no such model."""
    try:
        entry = json.loads(Path(manifest).read_text())["models"].get(model)
    except (FileNotFoundError, json.JSONDecodeError, KeyError, AttributeError, TypeError):
        return None
    if not isinstance(entry, dict) or "http" not in entry or "grpc" not in entry:
        return None
    return ModelEndpoints(model, entry["http"], entry["grpc"], entry.get("metrics"), entry.get("partition"))


def resolve_url(model: str, protocol: Protocol, url: str | None = None, manifest: Path = DEFAULT_MANIFEST) -> str:
    if url:
        return url
    entry = model_endpoints(model, manifest)
    if entry is not None:
        return entry.url(protocol)
    return TRITON_DEFAULT_URLS[Protocol(protocol)]
