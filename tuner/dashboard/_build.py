"""Every page of the store, drawn knowing which store: :func:`build_all`."""

from __future__ import annotations

from pathlib import Path

from tuner.dashboard._budget_map import drawn_from
from tuner.dashboard._pages import DEFAULT_DIR, build_all as build_pages
from tuner.store import Store

__all__ = ["build_all"]


def build_all(db: Store, directory: Path = DEFAULT_DIR, *args, **kwargs) -> list[Path]:
    """:func:`tuner.dashboard._pages.build_all`, its budget-only pages' fallback command naming ``db``'s URL
    (:func:`tuner.dashboard._budget_map.drawn_from`)."""
    with drawn_from(db.url):
        return build_pages(db, directory, *args, **kwargs)
