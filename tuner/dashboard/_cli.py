"""``python -m tuner.dashboard``: the command line."""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from pathlib import Path

from tuner.dashboard._build import build_all
from tuner.dashboard._pages import DEFAULT_DIR
from tuner.formatting import nonempty, usage_error
from tuner.paths import unwritable
from tuner.store import DEFAULT_URL, Store, StoreError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.dashboard", description="Rebuild every heatmap and roofline from the store.",
        epilog=f"examples:\n  python -m tuner.dashboard\n  python -m tuner.dashboard --storage sqlite:///h200.db "
               f"--out pages --study article\n(default store {DEFAULT_URL})",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", default=DEFAULT_URL, type=nonempty, help=f"database URL (default {DEFAULT_URL})")
    parser.add_argument("--out", default=str(DEFAULT_DIR), help=f"folder for the pages (default {DEFAULT_DIR})")
    parser.add_argument("--study", action="append", help="only this study (repeatable; default every study)")
    parser.add_argument("--shape", action="append", help="heatmaps of this shape only, e.g. \"B4 H8 Nq4096 Nk4096 "
                                                         "D64 bf16\" (repeatable; default every shape)")
    parser.add_argument("--plotlyjs", choices=("directory", "cdn"), default="directory",
                        help="plotly.min.js beside the pages (offline; default) or from plotly's CDN")
    args = parser.parse_args(argv)
    if not args.out.strip():        # Path("") is the working folder: the pages would land among its files
        return usage_error(parser, f"--out {args.out!r} is empty; give a folder, e.g. {DEFAULT_DIR}")
    problem = unwritable(args.out, "folder")        # a file, a read-only folder, a name too long
    if problem:
        return usage_error(parser, f"--out {args.out!r} {problem}")
    args.out = Path(args.out)
    try:
        db = Store(args.storage, create=False, reads_only=True)      # a read-only mount will do
        present = sorted({r.study for r in db.results()})
    except StoreError as exc:
        return usage_error(parser, f"--storage: {exc}")
    if not present:
        return usage_error(parser, f"{args.storage} has no results yet; a sweep stores them there: "
                                   f"python -m tuner.sweep --gpu sm_89 --storage {shlex.quote(args.storage)} "
                                   "(--gpu: your target)")
    unknown = sorted(set(args.study or []) - set(present))
    if unknown:
        return usage_error(parser, f"--study {unknown[0]!r} is not in the store; it has {', '.join(present)}")
    known = {r.shape for r in db.results() if not args.study or r.study in args.study}
    missing = sorted(set(args.shape or []) - known)
    if missing:
        return usage_error(parser, f"--shape {missing[0]!r} is not in the store; it has {', '.join(sorted(known))}")
    problem = writable_folder(args.out)
    if problem:
        return usage_error(parser, f"--out {str(args.out)!r}: {problem}")
    try:
        pages = build_all(db, args.out, args.study, args.plotlyjs, args.shape)
    except OSError as exc:
        return usage_error(parser, f"--out {str(args.out)!r}: cannot write the pages: {exc.strerror or exc}")
    print(f"wrote {len(pages)} pages to {args.out}/ (open {args.out / 'index.html'})")
    return 0


def writable_folder(folder: Path) -> str | None:
    """Why the pages cannot go in ``folder`` (made if missing), or None: tried by making it and a
    file in it, since permissions alone do not say (root, a read-only mount)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fa2-tuner-write-test-"):
            pass
    except OSError as exc:
        return f"cannot write there ({exc.strerror or type(exc).__name__}); give a folder you can write to"
    return None if os.access(folder, os.W_OK) else "cannot write there; give a folder you can write to"
