"""How every `python -m <package>` command ends: the chosen subcommand runs, and the project's own
errors become one `<prog>: error: <message>` line on stderr and exit status 1.

Why one function: the messages of these errors already name what was wrong and what was
expected (contracts.errors), so a traceback would only bury them; anything else is a bug and
keeps its traceback. Each command line used to repeat this block.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence


def run_subcommand(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                   known_errors: tuple[type[Exception], ...]) -> int:
    """Parse `argv`, call the subcommand's `func(args)` (set with `set_defaults(func=...)`), return its status."""
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except known_errors as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
