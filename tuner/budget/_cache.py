"""Where compiles are cached, decided here alone, and checked once before any compile worker starts.

Two caches: the tuner's (``$FA2_TUNER_CACHE/budget``, else ``~/.cache/fa2-tuner/budget``: each
config's compile figures and the compile log) and Triton's (``$TRITON_CACHE_DIR``, else
``~/.triton/cache``: the binaries). :func:`settle_caches` is what a command that compiles calls
first, before anything is written, and it makes no folder (each is made by the first write into it):
a folder named by a variable that cannot be written is an error naming the folder and the variable;
a default folder that cannot be written (``HOME`` read-only,
or a file) is replaced by one under the system's temporary folder, said in one line, and the
variable is set in this process so that the workers it spawns use the same folder. A process begun
before that (the sweep's early GPU worker, :mod:`tuner.spawn`) takes the same decision itself at its
start (:func:`tuner.budget.quiet_compiler_pages`).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

__all__ = ["CACHE_ENV", "CacheError", "cache_dir", "settle_caches"]

CACHE_ENV = "FA2_TUNER_CACHE"
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"


class CacheError(Exception):
    """A cache folder that cannot be used: the message names it and the variable to set."""


def cache_dir() -> Path:
    """Where compile results are kept: ``$FA2_TUNER_CACHE/budget`` or ``~/.cache/fa2-tuner/budget``
    (the fallback :func:`settle_caches` chose, where it set ``FA2_TUNER_CACHE``)."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fa2-tuner"
    return Path(root) / "budget"


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot take a new file, e.g. "Read-only file system"; None if it can. Nothing is made: its
    nearest existing folder is tried with a file made and removed at once (those below it are made by the first
    write there), so that a command refused after this check (a bad --storage) leaves no folder behind."""
    nearest = folder.absolute()
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        return f"{os.strerror(errno.ENOTDIR)}: {nearest} is a file"
    try:
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as exc:
        return exc.strerror or f"{type(exc).__name__}: {exc}"
    return None


def _fallback_root() -> Path:
    """The tuner's cache where the default cannot be written: one folder per user under the temporary folder."""
    return Path(tempfile.gettempdir()) / f"fa2-tuner-{os.getuid()}"


def _triton_default() -> Path:
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    return Path(home) / ".triton" / "cache"


def _settle(variable: str, folder, default: Path, fallback: Path, what: str) -> tuple[str, str, str] | None:
    """One cache, whose folder is ``folder(root)``: raises :class:`CacheError` where ``variable`` names a root
    that cannot be written; where the ``default`` root cannot be written, sets ``variable`` to ``fallback``
    and returns (what, the default folder and why, the fallback folder)."""
    named = os.environ.get(variable)
    if named:
        why = _unwritable(folder(Path(named)))
        if why:
            raise CacheError(f"{variable}={named}: {what} cannot be written to {folder(Path(named))} ({why}); set "
                             f"{variable} to a writable folder, or unset it to use the default")
        return None
    why = _unwritable(folder(default))
    if why is None:
        return None
    fallback_why = _unwritable(folder(fallback))
    if fallback_why:
        raise CacheError(f"{what} cannot be written to {folder(default)} ({why}) nor to {folder(fallback)} "
                         f"({fallback_why}); set {variable} to a writable folder")
    os.environ[variable] = str(fallback)
    return variable, f"{what} to {folder(default)} ({why})", str(folder(fallback))


def settle_caches() -> str | None:
    """Check both caches once, before any worker starts. Returns the one-line warning for the fallbacks
    taken (None: none); raises :class:`CacheError` naming the folder and the variable to set."""
    taken = [_settle(CACHE_ENV, lambda root: root / "budget", Path.home() / ".cache" / "fa2-tuner",
                     _fallback_root(), "the compile cache")]
    taken.append(_settle(TRITON_CACHE_ENV, lambda root: root, _triton_default(), cache_dir().parent / "triton",
                         "Triton's cache"))
    taken = [t for t in taken if t]
    if not taken:
        return None
    variables, whats, folders = zip(*taken)
    return (f"warning: cannot write {' nor '.join(whats)}; using {' and '.join(folders)} instead "
            f"(set {' and '.join(variables)} to choose)")
