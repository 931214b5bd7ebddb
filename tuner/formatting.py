"""Small helpers the command-line modules share: usage errors and value formatting."""

from __future__ import annotations

import argparse
import sys

__all__ = ["fmt", "pct", "usage_error"]


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """Print the usage line and ``prog: error: message`` to stderr; return exit code 2."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


def fmt(value, spec: str = "", missing: str = "n/a") -> str:
    """``format(value, spec)``, or ``missing`` for None."""
    return missing if value is None else format(value, spec)


def pct(value: float | None) -> str:
    """A percentage with no decimals, ``143%``, or n/a."""
    return fmt(value, ".0f") + ("%" if value is not None else "")
