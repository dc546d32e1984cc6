"""Where to send a model's requests: an explicit URL, else run/manifest.json, else Triton's defaults."""
from __future__ import annotations

import json
from pathlib import Path

from model_client.client import Protocol

DEFAULT_MANIFEST = Path(__file__).resolve().parents[2] / "run" / "manifest.json"
TRITON_DEFAULT_URLS = {Protocol.HTTP: "127.0.0.1:8000", Protocol.GRPC: "127.0.0.1:8001"}


def resolve_url(model: str, protocol: Protocol, url: str | None = None, manifest: Path = DEFAULT_MANIFEST) -> str:
    if url:
        return url
    try:
        entry = json.loads(Path(manifest).read_text())["models"].get(model)
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        entry = None
    if entry:
        return entry[protocol.value]
    return TRITON_DEFAULT_URLS[protocol]
