"""Progress of long work: a bar with an ETA on a terminal, one line per step elsewhere.

Why both: a user at a terminal wants to tell work from a hang (the text encoder's sensitivity
search runs minutes); a CI log wants short, greppable lines, not carriage-return animations.
tqdm (pinned in requirements/constraints.txt) draws the bar; off a terminal each step prints
`[<what>] <i>/<n> <item> (<elapsed> s, ETA <s> s)`.
"""
from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, Sequence, TextIO, TypeVar

T = TypeVar("T")


def _label(item: object) -> str:
    """A short name for a step: its `name`, or the item itself when it is a plain value; nothing for
    data (a calibration batch is a dict of arrays: printing it would flood the log)."""
    if hasattr(item, "name"):
        text = str(item.name)
    elif isinstance(item, (str, int, float)):
        text = str(item)
    else:
        return ""
    return text if len(text) <= 60 else "..." + text[-57:]


def progress(items: Sequence[T] | Iterable[T], what: str, total: int | None = None, stream: TextIO | None = None,
             tty: bool | None = None, lines: bool = True) -> Iterator[T]:
    """Yield `items`, showing progress on `stream` (stderr): a tqdm bar on a terminal, one line per step
    otherwise (`lines=False`: the caller prints its own line per step, so nothing more off a terminal)."""
    stream = stream or sys.stderr
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    on_terminal = stream.isatty() if tty is None else tty
    if on_terminal:
        from tqdm import tqdm

        yield from tqdm(items, desc=what, total=total, file=stream, unit="step", leave=False, dynamic_ncols=True)
        return
    if not lines:
        yield from items
        return
    start = time.monotonic()
    for i, item in enumerate(items, 1):
        yield item
        elapsed = time.monotonic() - start
        eta = f", ETA {elapsed / i * (total - i):.0f} s" if total else ""
        label = _label(item)
        print(f"[{what}] {i}/{total or '?'}{' ' + label if label else ''} ({elapsed:.0f} s{eta})", file=stream, flush=True)
