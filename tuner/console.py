"""A command run as a console program: ``python -m tuner.<command>`` and ``fa2-tuner`` end through :func:`run`.

What a terminal, a pipe or a service may hand a command, made safe before the command starts: an output
that cannot encode a character (a C locale: ``µs`` in a table) prints a stand-in for it, not a
``UnicodeEncodeError``; a closed stdout or stderr (``2>&-``) becomes ``/dev/null``, for the command and the
processes it starts; a reader that stops early (``| head -1``) ends the command quietly, with the exit
code 141 a shell gives a program the pipe's signal ended (as ``yes | head -1`` does); an SQLite store
another process keeps locked past the lock timeout is one line of error, exit 1; a Ctrl-C that no
handler of the command's took ends it with one line and 130. SIGTERM (``kill``, a service manager, a
batch scheduler) is taken as Ctrl-C is, as :class:`Terminated`, a KeyboardInterrupt: the command's own
Ctrl-C handling serves it too (the sweep finishes the trials in flight and marks the run interrupted),
and it ends with 143, as a shell reports a program SIGTERM ended. Plain Python, no project imports.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["BROKEN_PIPE", "INTERRUPTED", "TERMINATED", "Terminated", "call", "run", "settle_streams"]

BROKEN_PIPE = 128 + 13          # 128 + SIGPIPE: what a shell reports for a program a closed pipe ended
INTERRUPTED = 128 + 2           # 128 + SIGINT: a program Ctrl-C ended
TERMINATED = 128 + 15           # 128 + SIGTERM: a program kill (or a service manager) ended
_TERMS: list[int] = []          # the SIGTERMs the running command was sent


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (see the module's docstring)."""


def _on_sigterm(_signum, _frame) -> None:
    """The first SIGTERM says what happens, in one line; each raises :class:`Terminated` (a second one, as a
    second Ctrl-C, drops what the first let finish)."""
    if not _TERMS:
        print("\nterminated (SIGTERM): stopping as for Ctrl-C; what is in flight finishes and is kept first "
              "(SIGTERM again to drop it)", file=sys.stderr, flush=True)
    _TERMS.append(1)
    raise Terminated


def settle_streams() -> None:
    """stdout and stderr that never fail a command for their own sake (see the module's docstring)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:                   # closed: /dev/null in its place, inherited by child processes too
            devnull = os.open(os.devnull, os.O_WRONLY)       # the lowest free descriptor: often fd itself
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
            os.set_inheritable(fd, True)      # Python opens descriptors close-on-exec; children need this one
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 (the process's stream, open until it ends)
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, stream := open(os.devnull, "w"))  # noqa: SIM115 (as above)
        if hasattr(stream, "reconfigure") and (stream.encoding or "").lower().replace("-", "") != "utf8":
            stream.reconfigure(errors="replace")


def call(main: Callable[..., int | None], *args) -> int:
    """``main(*args)``'s exit code, with the streams settled first; a reader gone away ends it quietly;
    SIGTERM taken as Ctrl-C, ending with :data:`TERMINATED` (where the command's own handling returned 130)."""
    settle_streams()
    _TERMS.clear()
    main_thread = threading.current_thread() is threading.main_thread()       # signals are the main thread's
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        code = _call(main, *args)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return TERMINATED if _TERMS and code == INTERRUPTED else code


def _call(main: Callable[..., int | None], *args) -> int:
    try:
        code = main(*args)
        sys.stdout.flush()
    except KeyboardInterrupt:       # Ctrl-C or SIGTERM that no handler of the command took: what was done is kept
        if not _TERMS:
            print("\ninterrupted (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # Python flushes stdout once more at exit, into the closed pipe: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE
    except Exception as exc:
        if not _locked(exc):
            raise
        # SQLite waited its lock timeout for another process's write transaction: say so, not a traceback.
        print(f"error: the database is locked by another process (a write held longer than the lock timeout): "
              f"{str(exc).splitlines()[0][:200]}; let it finish, or give another --storage", file=sys.stderr)
        return 1
    return int(code or 0)


def _locked(exc: BaseException) -> bool:
    """SQLite's (or SQLAlchemy's wrapping of it) lock timeout, as either raises it."""
    return type(exc).__name__ == "OperationalError" and "database is locked" in str(exc)


def run(main: Callable[..., int | None]) -> None:
    """The end of a command module: ``sys.exit(call(main))``."""
    sys.exit(call(main))
