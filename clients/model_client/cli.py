"""`python -m model_client classify ...`: classify PNG files or held-out test samples.

Examples:
  python -m model_client classify --png clients/model_client/examples/digit-7.png --top-k 3
  python -m model_client classify --protocol grpc --test-samples 0:64 --summary
  python -m model_client classify --test-samples 7 --priority 1 --max-attempts 4 --fallback
  python -m model_client embed --protocol grpc --text "Plain text in, a unit vector out."
  python -m model_client generate --chat --prompt "Why is the sky blue?" --max-tokens 64
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

from model_client.client import Protocol
from model_client.embed_cli import add_embed_command
from model_client.generate_cli import add_generate_command
from model_client.endpoints import add_call_arguments, add_endpoint_arguments, resolve_url
from model_client.errors import ClientError
from model_client.policies import RetryPolicy
from model_client.images import image_array_from_png

from contracts.command_line import run_subcommand
from contracts.digit_split import DigitSplitError, digit_test_split_path, load_digit_test_split
from contracts.layout import ARTIFACTS_DIR

DEFAULT_TEST_SPLIT = digit_test_split_path(ARTIFACTS_DIR)
#: How many images --summary lists before the accuracy line.
SUMMARY_ROWS = 8


def parse_index_range(text: str, total: int) -> np.ndarray:
    """'5' -> [5]; '0:64' -> 0..63; '1,4,9' -> those. Out-of-range indices are an error."""
    try:
        if ":" in text:
            start, stop = (int(p) if p else None for p in text.split(":", 1))
            indices = np.arange(total)[slice(start, stop)]
        else:
            indices = np.array([int(p) for p in text.split(",")])
    except ValueError:
        raise ClientError(f"--test-samples {text!r}: expected N, A:B or N,M,... (integers).") from None
    if len(indices) == 0 or indices.min() < 0 or indices.max() >= total:
        raise ClientError(f"--test-samples {text!r}: indices must be within 0..{total - 1}.")
    return indices


def cmd_classify(args: argparse.Namespace) -> int:
    from model_client.policies import REALTIME_LEVEL

    if args.fallback and args.priority != REALTIME_LEVEL:  # it was ignored silently
        raise ClientError(f"--fallback degrades realtime calls only: add --priority {REALTIME_LEVEL} (batch work backs "
                          f"off and keeps its model, docs/overload.md).")
    protocol = Protocol(args.protocol)
    labels = None
    if args.png:
        images = np.stack([image_array_from_png(p) for p in args.png])
        names = [str(p) for p in args.png]
    elif args.test_samples:
        try:
            all_images, all_labels = load_digit_test_split(args.test_split)
        except DigitSplitError as exc:  # missing ("run `make build-engines` first") or not what the build writes
            raise ClientError(str(exc)) from None
        idx = parse_index_range(args.test_samples, len(all_labels))
        images, labels = all_images[idx], all_labels[idx]
        names = [f"test[{i}]" for i in idx]
    else:
        raise ClientError("nothing to classify: give --png FILE... or --test-samples RANGE.")
    # Always through the resilient client: it splits the images into requests no larger than
    # serving.toml allows for the priority (the starvation guarantee depends on it) and retries 503s.
    predictions, url = classify_resilient(args, protocol, images)
    # --summary: the first SUMMARY_ROWS images, in the same form (--top-k classes, the label), then the accuracy
    for i, (name, pred) in enumerate(list(zip(names, predictions))[:SUMMARY_ROWS if args.summary else None]):
        shown = "  ".join(f"{c}:{s:.3f}" for c, s in zip(pred.labels, pred.scores))
        truth = f"  (label {labels[i]})" if labels is not None else ""
        print(f"{name}: {shown}{truth}")
    if labels is not None:
        correct = sum(p.top1 == int(t) for p, t in zip(predictions, labels))
        print(f"[{protocol.value}] {args.model} at {url}: accuracy on {len(labels)} test samples: "
              f"{correct}/{len(labels)} = {correct / len(labels):.1%}")
    return 0


def classify_resilient(args: argparse.Namespace, protocol: Protocol, images: np.ndarray):
    """classify with retries (503/UNAVAILABLE, jittered backoff), the per-priority request sizes of
    serving.toml, and optionally the small-model fallback (docs/overload.md)."""
    from model_client.client import top_k_predictions
    from model_client.policies import DIGIT_FALLBACKS, FallbackPolicy, PriorityLimits, RetryPolicy
    from model_client.resilient import ResilientClient

    retry = RetryPolicy(max_attempts=args.max_attempts, deadline_s=args.deadline_s)
    fallback = FallbackPolicy.of(DIGIT_FALLBACKS) if args.fallback else None
    with ResilientClient(protocol, url=args.url, manifest=args.manifest, retry=retry, fallback=fallback,
                         limits=PriorityLimits.from_serving_config()) as client:
        started = client.now()  # --deadline-s covers the metadata and the inference together
        interface = client.interface(args.model, args.priority)  # retried, and from the fallback when it must
        outcome = client.infer(args.model, {interface.inputs[0].name: np.ascontiguousarray(images, np.float32)},
                               priority=args.priority, timeout_us=args.timeout_us, started_s=started)
    if outcome.degraded:
        print(f"[degraded] {args.model} was overloaded, unreachable or not served: answered by "
              f"{sorted(set(outcome.answered_by))} after {outcome.calls} call(s)", file=sys.stderr)
    url = resolve_url(args.model, protocol, args.url, args.manifest)
    return top_k_predictions(outcome.outputs[interface.outputs[0].name], args.top_k), url


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="model_client", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    cls = sub.add_parser("classify", help="classify digit images (PNG files or test-split samples)")
    add_endpoint_arguments(cls)
    cls.add_argument("--model", default="digit_classifier", help="the model to ask (default %(default)s)")
    cls.add_argument("--png", nargs="+", type=Path, help="PNG files to classify")
    cls.add_argument("--test-samples", help="indices into the held-out test split: N, A:B or N,M,...")
    cls.add_argument("--test-split", type=Path, default=DEFAULT_TEST_SPLIT)
    cls.add_argument("--top-k", type=int, default=3, help="classes shown per image (default %(default)s)")
    cls.add_argument("--summary", action="store_true", help="print a few predictions and the accuracy only")
    add_call_arguments(cls, RetryPolicy())
    cls.add_argument("--fallback", action="store_true",
                     help="with --priority 1 (realtime): degrade to digit_classifier_small when the model is overloaded, "
                          "unreachable or not served")
    cls.set_defaults(func=cmd_classify)
    add_embed_command(sub)
    add_generate_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # the library's warnings (model_client.resilient: a server not reachable yet, retried until the
    # deadline) reach the terminal as the command's own lines
    logging.basicConfig(format="model_client: %(message)s", level=logging.WARNING)
    return run_subcommand(build_parser(), argv, (ClientError,))


if __name__ == "__main__":
    sys.exit(main())
