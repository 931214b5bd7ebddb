"""Where a command may write, asked before anything is made: :func:`unwritable`. Plain Python."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["unwritable"]


def unwritable(path: str | os.PathLike, kind: str = "folder") -> str | None:
    """Why ``path`` (a ``kind``: "folder" to use or make, "file" to write) cannot be written, or None;
    nothing is left behind. Its nearest existing folder decides: it must be a folder this process may
    write in (a read-only mount says no to root as well)."""
    if str(path).strip() == "":
        return f"is empty; give a {kind}"
    target = Path(path).absolute()
    if _exists(target):
        if kind == "folder" and not target.is_dir():
            return "is a file; give a folder (it is made if missing)"
        if kind == "file" and target.is_dir():
            return "is a folder; give a file name"
        if not os.access(target, os.W_OK):
            return "cannot be written here (read-only, or another user's)"
    probe = target.parent
    while not _exists(probe):
        probe = probe.parent
    if not probe.is_dir():
        return f"cannot be made: {probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"cannot be made: {probe} is not writable (read-only, or another user's)"
    longest = max((os.fsencode(part) for part in target.relative_to(probe).parts), key=len, default=b"")
    if len(longest) > _name_max(probe):
        return (f"cannot be made: a name of {len(longest)} bytes, over the {_name_max(probe)} its filesystem "
                f"allows; give a shorter one")
    try:          # permissions do not say all (root; /proc): a file made and removed at once says
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".fa2-tuner-write-test-"):
            pass
    except OSError as exc:
        return f"cannot be made: {probe} is not writable ({exc.strerror or type(exc).__name__})"
    return None


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the filesystem of ``folder`` takes: 255 where it does not say."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _exists(path: Path) -> bool:
    """``path.exists()``, where a path the system refuses to look up (a name too long) does not exist."""
    try:
        return path.exists()
    except OSError:
        return False
