"""`python -m model_client embed ...`: embed plain text with the served text embedder.

Examples:
  python -m model_client embed --text "How do I serve a model?" --text "Triton serves models."
  python -m model_client embed --protocol grpc --file sentences.txt --output vectors.npy
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from model_client.client import Protocol
from model_client.embeddings import DEFAULT_TEXT_MODEL, embed_resilient
from model_client.endpoints import add_call_arguments, add_endpoint_arguments, non_negative_int, resolve_url
from model_client.errors import ClientError
from model_client.policies import RetryPolicy


def read_texts(text_args: list[str] | None, file: Path | None) -> list[str]:
    """--text values, then the lines of --file ('-' = stdin), each line one text (newline removed)."""
    texts = list(text_args or [])
    if file is not None:
        try:
            content = sys.stdin.read() if str(file) == "-" else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # missing, a directory, unreadable; not UTF-8
            raise ClientError(f"--file {file}: cannot read UTF-8 text ({exc}); expected a text file, one text per line.") from None
        texts += [line for line in content.splitlines() if line.strip()]
    if not texts:
        raise ClientError("nothing to embed: give --text TEXT (repeatable) or --file PATH (one text per line).")
    return texts


def cmd_embed(args: argparse.Namespace) -> int:
    """Through the resilient client, as `classify`: requests no larger than serving.toml allows for the
    priority (the starvation guarantee), 503s retried, an unreachable server ridden out, one deadline."""
    from model_client.policies import PriorityLimits
    from model_client.resilient import ResilientClient

    texts = read_texts(args.text, args.file)
    if args.output is not None and not args.output.parent.is_dir():  # before the work, not after it
        raise ClientError(f"--output {args.output}: folder {args.output.parent} does not exist; expected a path in an "
                          f"existing folder for the .npy file.")
    protocol = Protocol(args.protocol)
    retry = RetryPolicy(max_attempts=args.max_attempts, deadline_s=args.deadline_s)
    with ResilientClient(protocol, url=args.url, manifest=args.manifest, retry=retry,
                         limits=PriorityLimits.from_serving_config()) as client:
        result = embed_resilient(client, texts, model=args.model, priority=args.priority, timeout_us=args.timeout_us)
    url = resolve_url(args.model, protocol, args.url, args.manifest)
    for i, (text, vector, norm) in enumerate(zip(result.texts, result.vectors, result.norms)):
        head = " ".join(f"{v:+.4f}" for v in vector[:args.show_dims])
        shown = text if len(text) <= 60 else text[:57] + "..."
        print(f"[{i}] norm {norm:.6f}  dim {vector.shape[0]}  [{head} ...]  {shown!r}")
    if len(texts) > 1:
        print("cosine to [0]: " + "  ".join(f"[{i}] {result.cosine(0, i):.4f}" for i in range(1, len(texts))))
    if args.output:
        np.save(args.output, result.vectors)
        print(f"wrote {len(texts)} x {result.vectors.shape[1]} float32 vectors to {args.output}")
    print(f"[{protocol.value}] {args.model} at {url}: {len(texts)} text(s) embedded")
    return 0


def add_embed_command(sub) -> None:
    """Register `embed` on the model_client argument parser's subcommands."""
    emb = sub.add_parser("embed", help="embed plain text with the served sentence embedder (vectors and norms)",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_endpoint_arguments(emb)
    emb.add_argument("--model", default=DEFAULT_TEXT_MODEL)
    emb.add_argument("--text", action="append", help="a text to embed (repeatable)")
    emb.add_argument("--file", type=Path, help="UTF-8 file with one text per line ('-' reads stdin)")
    add_call_arguments(emb, RetryPolicy())
    emb.add_argument("--show-dims", type=non_negative_int, default=4, help="leading vector components to print")
    emb.add_argument("--output", type=Path, help="save the vectors as a .npy file [N, dim]")
    emb.set_defaults(func=cmd_embed)
