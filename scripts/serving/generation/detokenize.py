"""Streaming text from token ids: emit only complete characters.

A byte-level BPE token can end in the middle of a multi-byte UTF-8 character; decoding such a
prefix yields U+FFFD. Each step decodes all generated ids and emits the new suffix, holding back a
trailing U+FFFD until the next token completes the character, so concatenated stream chunks equal
the non-streamed text.
"""
from __future__ import annotations

from typing import Callable, Sequence

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._emitted = 0

    @property
    def text(self) -> str:
        return self._decode(self._ids)

    def push(self, token: int, final: bool = False) -> str:
        """Add a token; return the text that became complete (may be "")."""
        self._ids.append(token)
        return self.flush() if final else self._delta(hold_back=True)

    def flush(self) -> str:
        return self._delta(hold_back=False)

    def _delta(self, hold_back: bool) -> str:
        text = self._decode(self._ids)
        end = len(text)
        if hold_back:
            while end > self._emitted and text[end - 1] == REPLACEMENT:
                end -= 1
        delta = text[self._emitted:end]
        self._emitted = max(self._emitted, end)
        return delta
