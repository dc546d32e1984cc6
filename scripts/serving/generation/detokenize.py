"""Streaming text from token ids: emit only complete characters.

A byte-level BPE token can end in the middle of a multi-byte UTF-8 character; decoding such a
prefix yields U+FFFD. Each step decodes all generated ids and emits the new suffix, holding back a
trailing U+FFFD until the next token completes the character, so concatenated stream chunks equal
the non-streamed text. A character still incomplete when the generation ends (max_tokens, the
context or a deadline cut it) is never completed: it is dropped, not sent as a U+FFFD, as vLLM's
detokenizer does (the ids are still in `output_token_ids`).
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

    def push(self, token: int) -> str:
        """Add a token; return the text that became complete (may be "")."""
        self._ids.append(token)
        return self._delta()

    def flush(self) -> str:
        """The text still to send at the end: what `push` held back is an incomplete character that
        no token will complete now, so it is dropped (module docstring), not sent as U+FFFD."""
        return self._delta()

    def _delta(self) -> str:
        text = self._decode(self._ids)
        end = len(text)
        while end > self._emitted and text[end - 1] == REPLACEMENT:
            end -= 1
        delta = text[self._emitted:end]
        self._emitted = max(self._emitted, end)
        return delta


class StopStrings:
    """vLLM's `stop`: the generated text ends before the first stop string that appears in it.

    `push` takes each new piece of text and returns what is safe to stream: it holds back the last
    (longest stop string - 1) characters, which could begin a stop string the next piece completes,
    so streamed chunks never show a stop string or part of one; `flush` releases the rest at the
    end. `text` is the whole text so far (cut before the stop string once `stopped`). Without stop
    strings it passes everything through."""

    def __init__(self, stops: Sequence[str] = ()) -> None:
        self.stops = tuple(stops)
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self.text = ""
        self._emitted = 0
        self.stopped = False

    def push(self, piece: str) -> str:
        if self.stopped:
            return ""
        search_from = max(0, len(self.text) - self._hold)
        self.text += piece
        found = [i for i in (self.text.find(s, search_from) for s in self.stops) if i >= 0]
        if found:
            self.text, self.stopped = self.text[:min(found)], True
            return self.flush()
        safe = len(self.text) - self._hold
        out = self.text[self._emitted:safe] if safe > self._emitted else ""
        self._emitted = max(self._emitted, safe)
        return out

    def flush(self) -> str:
        out = self.text[self._emitted:]
        self._emitted = len(self.text)
        return out
