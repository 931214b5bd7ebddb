"""Pages that need no rebuild: a digest of everything the pages are drawn from, kept beside them.

A sweep that measured nothing new (a warm re-run) would draw the same pages again, seconds of plotly for
nothing. :func:`build_all` (the sweep's call, ``reuse=True``) keeps the pages where the folder's stamp
holds the digest of the same inputs and every page it lists is there; ``python -m tuner.dashboard``
always draws them again.

The digest covers every column of the rows, finalists and profiles drawn, the command of each run that
stored a drawn row, the build's options, plotly's version and the source of this package, so a change
to any of them draws the pages again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

STAMP = ".fa2-pages.json"          # in the pages' folder


def _columns(record) -> list:
    return [repr(getattr(record, column.name)) for column in record.__table__.columns]


def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def digest(rows: list, finalists: list, profiles: list, commands: dict[int, str], options: tuple) -> str:
    """The digest of a build's inputs (see the module's docstring)."""
    import plotly

    parts = {"source": _source_digest(), "plotly": plotly.__version__, "options": repr(options),
             "rows": [_columns(r) for r in rows], "finalists": [_columns(f) for f in finalists],
             "profiles": [_columns(p) for p in profiles],
             "commands": sorted((run_id, commands.get(run_id)) for run_id in {r.run_id for r in rows})}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def kept_pages(directory: Path, wanted: str, plotlyjs: str) -> list[Path] | None:
    """The pages of ``directory`` where its stamp holds ``wanted`` and every page (and plotly.min.js, for
    ``plotlyjs="directory"``) is still there; None: draw them."""
    try:
        stamp = json.loads((directory / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("digest") != wanted or not isinstance(stamp.get("pages"), list):
        return None
    pages = [directory / name for name in stamp["pages"]]
    needed = pages + ([directory / "plotly.min.js"] if plotlyjs == "directory" else [])
    return pages if pages and all(path.is_file() for path in needed) else None


def write_stamp(directory: Path, wanted: str, pages: list[Path]) -> None:
    """Record the digest the pages were drawn from (written last: pages half written leave the old stamp,
    whose digest no longer matches once the store has changed)."""
    (directory / STAMP).write_text(json.dumps({"digest": wanted, "pages": [p.name for p in pages]}),
                                   encoding="utf-8")
