"""A command run as a console program: ``python -m tuner.<command>`` and ``fa2-tuner`` end through :func:`run`.

What a terminal, a pipe or a service may hand a command, made safe before the command starts: an output
that cannot encode a character (a C locale: ``µs`` in a table) prints a stand-in for it, not a
``UnicodeEncodeError``; a closed stdout or stderr (``2>&-``) becomes ``/dev/null``, for the command and the
processes it starts; a reader that stops early (``| head -1``, ``2>&1 | head -1``) ends the command quietly,
with the exit code 141 a shell gives a program the pipe's signal ended (as ``yes | head -1`` does); an output
that cannot take what is written to it (``>/dev/full``, a full disk) is one line of error, exit 1; an SQLite store
another process keeps locked past the lock timeout is one line of error, exit 1; a Ctrl-C that no
handler of the command's took ends it with one line and 130. SIGTERM (``kill``, a service manager, a
batch scheduler) is taken as Ctrl-C is, as :class:`Terminated`, a KeyboardInterrupt: the command's own
Ctrl-C handling serves it too (the sweep finishes the trials in flight and marks the run interrupted),
and it ends with 143, as a shell reports a program SIGTERM ended. Plain Python, no project imports.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["BROKEN_PIPE", "INTERRUPTED", "TERMINATED", "Terminated", "call", "quiet_stderr", "run", "settle_streams"]

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


class _WatchedStdout(io.FileIO):
    """The process's stdout as the command writes it, noting a write that failed: an error that ends the command
    is then known to be its output's (a full disk), not one of the files it writes."""

    failed: OSError | None = None

    def write(self, data) -> int | None:
        try:
            return super().write(data)
        except OSError as exc:
            if not isinstance(exc, BrokenPipeError):      # a reader gone away is no failure (see _call)
                _WatchedStdout.failed = exc
            raise


class _QuietStderr(io.FileIO):
    """The process's stderr where a write fails other than by a reader gone (``2>/dev/full``, a full disk): what it
    says is lost, not the command; fd 2 then points at /dev/null, for the processes started after too."""

    def write(self, data) -> int | None:
        try:
            return super().write(data)
        except BrokenPipeError:
            raise
        except OSError:
            _to_devnull(self.fileno())
            return len(data)


def _watch_stdout() -> None:
    """``sys.stdout``, where it is the process's own (not a test's capture), rewrapped around :class:`_WatchedStdout`
    with the same encoding, buffering and flushing."""
    stream = sys.stdout
    if stream is not sys.__stdout__ or not isinstance(stream, io.TextIOWrapper) or stream.closed:
        return
    sys.stdout = _rewrapped(stream, _WatchedStdout)


def quiet_stderr() -> None:
    """``sys.stderr``, where it is the process's own, rewrapped around :class:`_QuietStderr`: a command's, and
    each worker process's (they inherit the command's stderr, ``2>/dev/full`` included)."""
    stream = sys.stderr
    if stream is sys.__stderr__ and isinstance(stream, io.TextIOWrapper) and not stream.closed:
        sys.stderr = _rewrapped(stream, _QuietStderr)


def _rewrapped(stream: io.TextIOWrapper, raw_type: type[io.FileIO]) -> io.TextIOWrapper:
    """``stream``'s descriptor behind ``raw_type``, with the same encoding, buffering and flushing."""
    with contextlib.suppress(OSError):      # what it held is lost; the new wrapper takes what comes after
        stream.flush()
    raw = raw_type(stream.fileno(), "w", closefd=False)
    unbuffered = isinstance(stream.buffer, io.RawIOBase)        # python -u, PYTHONUNBUFFERED
    return io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding=stream.encoding,
                            errors=stream.errors, line_buffering=stream.line_buffering,
                            write_through=stream.write_through)


def _to_devnull(fd: int) -> None:
    """``fd`` pointed at /dev/null, so that what is still buffered for it goes nowhere, quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


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
    _watch_stdout()
    quiet_stderr()


def call(main: Callable[..., int | None], *args) -> int:
    """``main(*args)``'s exit code, with the streams settled first; a reader gone away ends it quietly;
    SIGTERM taken as Ctrl-C, ending with :data:`TERMINATED` (where the command's own handling returned 130)."""
    settle_streams()
    _TERMS.clear()
    _WatchedStdout.failed = None
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
    except SystemExit:          # argparse's --help or usage error: what it printed is flushed here too
        failed = _flush_stdout()
        if failed is None:
            raise
        return failed
    except KeyboardInterrupt:       # Ctrl-C or SIGTERM that no handler of the command took: what was done is kept
        if not _TERMS:
            print("\ninterrupted (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        return _reader_gone()
    except OSError:
        if _WatchedStdout.failed is None:       # not the output's: a file the command writes, say
            raise
        return _output_failed(_WatchedStdout.failed)
    except Exception as exc:
        if not _locked(exc):
            raise
        # SQLite waited its lock timeout for another process's write transaction: say so, not a traceback.
        print(f"error: the database is locked by another process (a write held longer than the lock timeout): "
              f"{str(exc).splitlines()[0][:200]}; let it finish, or give another --storage", file=sys.stderr)
        return 1
    return _flush_stdout() or int(code or 0)


def _flush_stdout() -> int | None:
    """stdout flushed now rather than at exit, where a failure is a traceback and 120: None if all of the output
    was written (a failed write the command let pass counts), else the exit code."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    except OSError:
        if _WatchedStdout.failed is None:       # not a stdout this module watches (a test's capture): as it was
            raise
    return None if _WatchedStdout.failed is None else _output_failed(_WatchedStdout.failed)


def _reader_gone() -> int:
    """A reader that stopped early: :data:`BROKEN_PIPE`, quietly. Python flushes stdout and stderr once more at
    exit, into the closed pipe (exit 120): stdout is pointed at /dev/null first (as Python's documentation does),
    and stderr too where it is the pipe (``2>&1 | head``: an error line the command printed is still buffered)."""
    _to_devnull(sys.stdout.fileno())
    try:
        sys.stderr.flush()
    except OSError:
        _to_devnull(sys.stderr.fileno())
    return BROKEN_PIPE


def _output_failed(exc: OSError) -> int:
    """stdout could not be written (``>/dev/full``, a full disk): one line on stderr, exit 1. stdout is pointed at
    /dev/null first: Python's own flush at exit would fail too, with a traceback and 120."""
    _to_devnull(sys.stdout.fileno())
    try:
        print(f"error: cannot write the output (stdout): {exc.strerror or exc}; it is incomplete: give it room "
              f"(a full disk?) or send it elsewhere", file=sys.stderr, flush=True)
    except OSError:           # stderr as well: nothing can be said, and nothing left for the flush at exit
        _to_devnull(sys.stderr.fileno())
    return 1


def _locked(exc: BaseException) -> bool:
    """SQLite's (or SQLAlchemy's wrapping of it) lock timeout, as either raises it."""
    return type(exc).__name__ == "OperationalError" and "database is locked" in str(exc)


def run(main: Callable[..., int | None]) -> None:
    """The end of a command module: ``sys.exit(call(main))``."""
    sys.exit(call(main))
