"""Where to send a model's requests: an explicit URL, else run/manifest.json, else Triton's defaults.

`make serve` writes run/manifest.json with one entry per model (its partition's HTTP, gRPC and
metrics endpoints), so a model and its fallback may live on different servers; clients look the
model up per call, which also follows a partition that the supervisor restarted.
"""
from __future__ import annotations

from pathlib import Path

from model_client.client import Protocol
from model_client.errors import ClientError, ModelNotFoundError

from contracts.layout import MANIFEST as DEFAULT_MANIFEST
from contracts.manifest import ManifestError, ModelEndpoints, read_manifest
TRITON_DEFAULT_URLS = {Protocol.HTTP: "127.0.0.1:8000", Protocol.GRPC: "127.0.0.1:8001"}


def model_endpoints(model: str, manifest: Path = DEFAULT_MANIFEST) -> ModelEndpoints | None:
    """The manifest's entry for `model`, or None when there is no usable manifest or no such model
    (for `ResilientClient.client_for`, which then asks the explicit url; `resolve_url` says why a
    model cannot be found)."""
    try:
        entry = read_manifest(Path(manifest)).models.get(model)
    except ManifestError:
        return None
    return entry if entry is not None and entry.grpc else None


def resolve_url(model: str, protocol: Protocol, url: str | None = None, manifest: Path = DEFAULT_MANIFEST) -> str:
    """`url` when given; else the manifest's server for `model`; Triton's default port only when there
    is no manifest at the default place (a server started without `make serve`; one named elsewhere
    must exist). A manifest that does not list the
    model is an error, not a reason to try port 8000: a typo in the model's name was sent there and
    retried for the whole deadline, and on a host where `make serve` holds 8000 another server than
    the manifest's could have answered (a review, 2-core Intel Xeon, 2026-12-07)."""
    if url:
        return url
    if not Path(manifest).exists():
        if Path(manifest).resolve() != Path(DEFAULT_MANIFEST).resolve():  # named on purpose, and not there
            raise ClientError(f"no manifest at {manifest}; expected the manifest.json that `serving serve --run-dir DIR` "
                              f"writes (DIR/manifest.json), or --url HOST:PORT.")
        return TRITON_DEFAULT_URLS[Protocol(protocol)]
    try:
        served = read_manifest(Path(manifest))
    except ManifestError as exc:
        raise ClientError(f"{exc} (or give --url HOST:PORT)") from None
    entry = served.models.get(model)
    if entry is None:
        raise ModelNotFoundError(f"model {model!r} is not in {manifest}, which lists {sorted(served.models)}; expected one "
                                 f"of those, or --url HOST:PORT for a server that manifest does not describe.")
    address = entry.url(protocol)
    if not address:
        raise ClientError(f"{manifest} gives model {model!r} no {Protocol(protocol).value} endpoint; expected one per protocol, as "
                          f"`serving serve` writes (an older run's manifest? serve again), or --url HOST:PORT.")
    return address


def add_endpoint_arguments(parser) -> None:
    """--protocol, --url and --manifest, as every model_client command takes them."""
    parser.add_argument("--protocol", choices=[p.value for p in Protocol], default="http")
    parser.add_argument("--url", help="host:port of the model's server (default: from --manifest, else Triton's default port)")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST,
                        help="the run's manifest.json, which names each model's server (`serving serve --run-dir DIR` "
                             f"writes DIR/manifest.json; default {DEFAULT_MANIFEST})")


def _count(text: str, least: int, what: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {what}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: 0, 1, 2, ..."""
    return _count(text, 0, "a whole number >= 0")


def positive_int(text: str) -> int:
    """argparse type: 1, 2, ..."""
    return _count(text, 1, "a whole number >= 1")


def add_call_arguments(parser, retry_defaults) -> None:
    """--priority, --timeout-us, --max-attempts and --deadline-s, as every inference command takes them
    (`retry_defaults`: a RetryPolicy whose values are the defaults). The embed command lacked the last
    two and went without retries or deadline (a review, 2026-12-07)."""
    parser.add_argument("--priority", type=non_negative_int, default=0, help="1 = realtime, 2 = batch, 0 = the model's default")
    parser.add_argument("--timeout-us", type=positive_int,
                        help="queue timeout of these requests in microseconds (may only shorten the model's)")
    parser.add_argument("--max-attempts", type=positive_int, default=retry_defaults.max_attempts,
                        help="retry HTTP 503 / gRPC UNAVAILABLE with jittered exponential backoff, up to this many "
                             "attempts (default %(default)s, as RetryPolicy's)")
    parser.add_argument("--deadline-s", type=float, default=retry_defaults.deadline_s,
                        help="total time budget of the call in seconds, metadata and retries included "
                             "(default %(default)s)")
