"""`python -m serving serve|stop|status`: run the real tritonserver for the serving configuration.

`serve` returns once the server is ready (or fails with the tail of its log); the server keeps
running in its own session. `stop` stops what `serve` started, using the pids in run/servers.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from serving.errors import ServingError
from serving.manifest import MANIFEST_PATH, PROJECT_ROOT, RUN_DIR, endpoints_entry, read_manifest, write_manifest
from serving.server import (
    ServerSettings,
    TritonServerProcess,
    find_tritonserver,
    http_ready,
    pid_alive,
    prepare_backend_dir,
    stop_pid,
)
from serving.spec import load_serving_spec

STATE_PATH = RUN_DIR / "servers.json"
DEFAULT_CONFIG = PROJECT_ROOT / "model_repository" / "serving.toml"


def _read_state() -> dict:
    try:
        return json.loads(STATE_PATH.read_text())
    except FileNotFoundError:
        return {"servers": {}}


def cmd_serve(args: argparse.Namespace) -> int:
    spec = load_serving_spec(args.config)
    state = _read_state()
    running = {name: s for name, s in state["servers"].items() if pid_alive(s["pid"])}
    if running:
        raise ServingError(f"servers already running ({', '.join(running)}); run `make stop` first.")
    repository = Path(args.config).resolve().parent
    missing = [m.name for m in spec.models if not (repository / m.name / "config.pbtxt").exists()]
    if missing:
        raise ServingError(f"models {missing} are not built into {repository}; run `make build-engines` first.")
    server = spec.server
    host = args.host or server.host
    http_port = args.http_port or server.http_port
    grpc_port = args.grpc_port or server.grpc_port
    metrics_port = args.metrics_port or server.metrics_port
    installation = find_tritonserver(args.tritonserver)
    backend_dir = prepare_backend_dir(installation, RUN_DIR / "backends")
    settings = ServerSettings(
        model_repository=repository, backend_dir=backend_dir, host=host, http_port=http_port,
        grpc_port=grpc_port, metrics_port=metrics_port, models=tuple(m.name for m in spec.models),
    )
    log_path = RUN_DIR / "logs" / "tritonserver-default.log"
    process = TritonServerProcess(installation, settings, log_path).start()
    print(f"[serve] starting {installation.binary} (pid {process.pid}); log: {log_path.relative_to(PROJECT_ROOT)}")
    process.wait_ready(timeout=args.timeout)
    endpoints = endpoints_entry(host, http_port, grpc_port, metrics_port)
    write_manifest({
        "partitions": {"default": {**endpoints, "pid": process.pid, "models": [m.name for m in spec.models], "log": str(log_path)}},
        "models": {m.name: {**endpoints, "partition": "default"} for m in spec.models},
    })
    STATE_PATH.write_text(json.dumps({"servers": {"default": {"pid": process.pid, "http": endpoints["http"]}}}, indent=2))
    print(f"[serve] ready: HTTP {endpoints['http']}  gRPC {endpoints['grpc']}  metrics {endpoints['metrics']}")
    print(f"[serve] models: {', '.join(m.name for m in spec.models)}; manifest: {MANIFEST_PATH.relative_to(PROJECT_ROOT)}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    state = _read_state()
    if not state["servers"]:
        print("[stop] nothing to stop")
    for name, server in state["servers"].items():
        if pid_alive(server["pid"]):
            stop_pid(server["pid"])
            print(f"[stop] stopped {name} (pid {server['pid']})")
        else:
            print(f"[stop] {name} (pid {server['pid']}) was not running")
    STATE_PATH.unlink(missing_ok=True)
    MANIFEST_PATH.unlink(missing_ok=True)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = _read_state()
    if not state["servers"]:
        print("no servers started by `make serve`")
        return 1
    manifest = read_manifest()
    healthy = True
    for name, part in manifest["partitions"].items():
        host, port = part["http"].rsplit(":", 1)
        ready = pid_alive(part["pid"]) and http_ready(host, int(port))
        healthy &= ready
        print(f"{name}: pid {part['pid']} {'READY' if ready else 'NOT READY'} http {part['http']} grpc {part['grpc']} models {part['models']}")
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serving", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start tritonserver in the background; return once ready")
    serve.add_argument("--config", default=str(DEFAULT_CONFIG))
    serve.add_argument("--tritonserver", help="explicit tritonserver binary (else $TRITONSERVER, PATH, nvidia-pytriton)")
    serve.add_argument("--host")
    serve.add_argument("--http-port", type=int)
    serve.add_argument("--grpc-port", type=int)
    serve.add_argument("--metrics-port", type=int)
    serve.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    serve.set_defaults(func=cmd_serve)
    sub.add_parser("stop", help="stop what `serve` started").set_defaults(func=cmd_stop)
    sub.add_parser("status", help="show the servers and their readiness").set_defaults(func=cmd_status)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ServingError as exc:
        print(f"serving: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
