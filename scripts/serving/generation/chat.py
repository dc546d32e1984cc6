"""The SmolLM2 chat template (ChatML), rendered without Jinja: system, user, then the assistant's turn.

The GGUF's template inserts a default system prompt when the conversation has none; the build
reads that prompt from the GGUF (generation.json) so the served default is the model's own. Every
chat request therefore starts with the same system-prompt tokens: the prefix the KV cache shares.
"""
from __future__ import annotations


def render_chat_prompt(user: str, system: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")
