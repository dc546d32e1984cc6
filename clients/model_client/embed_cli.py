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

from model_client.client import Protocol, TritonModelClient
from model_client.embeddings import DEFAULT_TEXT_MODEL, embed
from model_client.endpoints import add_endpoint_arguments, resolve_url
from model_client.errors import ClientError


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


def _request_ranges(count: int, priority: int, model: str):
    """Split as serving.toml's per-priority request sizes for `model` ask (the starvation guarantee)."""
    from model_client.policies import PriorityLimits

    return PriorityLimits.from_serving_config().plan_requests(count, priority, (model,))


def cmd_embed(args: argparse.Namespace) -> int:
    texts = read_texts(args.text, args.file)
    protocol = Protocol(args.protocol)
    url = resolve_url(args.model, protocol, args.url, args.manifest)
    with TritonModelClient(url, protocol) as client:
        result = embed(client, texts, model=args.model, request_ranges=_request_ranges(len(texts), args.priority, args.model),
                       priority=args.priority, timeout_us=args.timeout_us)
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
    emb.add_argument("--priority", type=int, default=0, help="1 = realtime, 2 = batch, 0 = the model's default")
    emb.add_argument("--timeout-us", type=int, help="queue timeout for these requests (may only shorten the model's)")
    emb.add_argument("--show-dims", type=int, default=4, help="leading vector components to print")
    emb.add_argument("--output", type=Path, help="save the vectors as a .npy file [N, dim]")
    emb.set_defaults(func=cmd_embed)
