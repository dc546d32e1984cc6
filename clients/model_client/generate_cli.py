"""`python -m model_client generate ...`: stream generated text to the terminal.

Examples:
  python -m model_client generate --prompt "Why is the sky blue?" --chat --max-tokens 64
  python -m model_client generate --protocol grpc --async --priority 1 --deadline-ms 3000 --prompt "Write a haiku."
  python -m model_client generate --no-stream --prompt "The capital of France is"
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from model_client.client import Protocol
from model_client.endpoints import add_endpoint_arguments, resolve_url
from model_client.generate import (DEFAULT_GENERATION_MODEL, DEFAULT_READ_TIMEOUT_S, GenerationChunk, GenerationSettings,
                                   generate, generate_async)


def _print(chunk: GenerationChunk, state: dict) -> None:
    sys.stdout.write(chunk.text)
    sys.stdout.flush()
    state["tokens"] += len(chunk.token_ids)
    state["reason"] = chunk.finish_reason or state["reason"]


def cmd_generate(args: argparse.Namespace) -> int:
    protocol = Protocol(args.protocol)
    url = resolve_url(args.model, protocol, args.url, args.manifest)
    settings = GenerationSettings(max_tokens=args.max_tokens, priority=args.priority, deadline_ms=args.deadline_ms,
                                  temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                                  chat=args.chat or args.system_prompt is not None, system_prompt=args.system_prompt, stop=tuple(args.stop or ()))
    state = {"tokens": 0, "reason": ""}
    stream = not args.no_stream
    if args.use_async:
        async def run() -> None:
            async for chunk in generate_async(url, protocol.value, args.prompt, settings, stream, args.model, args.timeout_s):
                _print(chunk, state)
        asyncio.run(run())
    else:
        for chunk in generate(url, protocol.value, args.prompt, settings, stream, args.model, args.timeout_s):
            _print(chunk, state)
    print(file=sys.stdout)
    print(f"[{protocol.value}{' async' if args.use_async else ''}{' stream' if stream else ''}] finish_reason={state['reason']} "
          f"output_tokens={state['tokens']}", file=sys.stderr)
    return 0


def add_generate_command(sub) -> None:
    gen = sub.add_parser("generate", help="generate text with the served LLM, streamed to the terminal")
    gen.add_argument("--prompt", required=True, help="the prompt (with --chat: the user's message)")
    add_endpoint_arguments(gen)
    gen.add_argument("--model", default=DEFAULT_GENERATION_MODEL)
    gen.add_argument("--async", dest="use_async", action="store_true", help="use the asyncio clients")
    gen.add_argument("--no-stream", action="store_true", help="one response with the whole text")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template (shared system prompt)")
    gen.add_argument("--system-prompt", help="replace the default system prompt of the chat template (implies --chat)")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--priority", type=int, default=0, help="1 = realtime (admitted first), 2 = batch, 0 = the model's default")
    gen.add_argument("--deadline-ms", type=float, help="end generation this long after arrival; returns the text so far")
    gen.add_argument("--timeout-s", type=float, default=DEFAULT_READ_TIMEOUT_S,
                     help="give up when the server sends nothing for this long (each read; default %(default)g)")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", help="end the text before this string (repeat for up to 4)")
    gen.set_defaults(func=cmd_generate)
