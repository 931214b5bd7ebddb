"""Small helpers the command-line modules share: usage errors and value formatting."""

from __future__ import annotations

import argparse
import re
import shlex
import sys

__all__ = ["fmt", "headline", "pct", "sweep_command", "usage_error"]


def nonempty(text: str) -> str:
    """An argparse ``type`` for a flag whose empty value means nothing (``--storage ''``): refused, exit 2,
    rather than taken as the flag's default."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty: give a value, or leave the flag out for its default")
    return text


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """Print the usage line and ``prog: error: message`` to stderr; return exit code 2."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


def sweep_command(study, target: str, storage: str | None = None) -> str:
    """The sweep command that runs ``study`` (a :class:`tuner.study.Study`: its ``flags`` load it again, the
    file or shipped name with ``--pass`` where it is another pass) for ``target``, on the store ``storage``."""
    flags = getattr(study, "flags", "") or f"--study {shlex.quote(study.name)}"
    return f"python -m tuner.sweep {flags} --gpu {target}" + (f" --storage {shlex.quote(storage)}" if storage else "")


def fmt(value, spec: str = "", missing: str = "n/a") -> str:
    """``format(value, spec)``, or ``missing`` for None."""
    return missing if value is None else format(value, spec)


def pct(value: float | None) -> str:
    """A percentage with no decimals, ``143%``, or n/a."""
    return fmt(value, ".0f") + ("%" if value is not None else "")


# Lines of a compiler's error that say nothing on their own: separators, carets, headers, the repro command.
_FILLER = re.compile(r"^(=+|-+|\^+|`ptxas` stderr:|Repro command:.*|please share the reproducer.*|at \d+:\d+:)$")


def headline(reason: str | None, width: int = 160) -> str:
    """A long error's one line for a log: its type, then the compiler's own diagnostic where there is
    one (``ptxas fatal : ...``, ``error: ...``, ``LLVM ERROR: ...``); else the first meaningful line, or
    for a ``CompilationError`` (the source lines, a caret, then the message) the last."""
    text = (reason or "").strip()
    kind, _, rest = text.partition(": ") if re.match(r"^\w+: ", text) else ("", "", text)
    lines = [" ".join(line.split()) for line in rest.splitlines()]
    lines = [line for line in lines if line and not _FILLER.match(line)]
    diagnostic = [line for line in lines if re.match(r"^(ptxas (error|fatal)|error:|LLVM ERROR)", line, re.I)]
    said = (diagnostic or [""])[0] or (lines[-1] if kind == "CompilationError" and lines else lines[0] if lines else "")
    line = f"{kind}: {said}" if kind else said
    return line if len(line) <= width else line[:width - 3] + "..."
