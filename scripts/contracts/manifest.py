"""run/manifest.json: which server (endpoints) serves each model. Written by `serving serve`,
read by the clients, the perf sweeps and the monitoring stack."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from contracts.errors import ServingError

from contracts.layout import PROJECT_ROOT, RUN_DIR
MANIFEST_PATH = RUN_DIR / "manifest.json"


def endpoints_entry(host: str, http_port: int, grpc_port: int, metrics_port: int) -> dict[str, str]:
    return {
        "http": f"{host}:{http_port}",
        "grpc": f"{host}:{grpc_port}",
        "metrics": f"http://{host}:{metrics_port}/metrics",
    }


def write_manifest(manifest: Mapping[str, Any], path: Path = MANIFEST_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    tmp.replace(path)
    return path


def read_manifest(path: Path = MANIFEST_PATH) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ServingError(f"no server manifest at {path}: start the servers with `make serve`.") from None


def model_endpoints(model: str, path: Path = MANIFEST_PATH) -> dict[str, str]:
    manifest = read_manifest(path)
    try:
        return manifest["models"][model]
    except KeyError:
        raise ServingError(
            f"model {model!r} is not in {path}; served models: {sorted(manifest.get('models', {}))}."
        ) from None
