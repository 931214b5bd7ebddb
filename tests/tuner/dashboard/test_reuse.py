"""Pages kept where nothing they are drawn from changed (a warm re-run's dashboards), drawn again otherwise."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from tuner import dashboard
from tuner.dashboard import STAMP, _pages


def _mtimes(pages) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in pages}


@pytest.fixture
def drawn(hand_store, tmp_path):
    db = hand_store()
    folder = tmp_path / "dashboards"
    pages = dashboard.build_all(db, folder, reuse=True)
    for page in pages:                      # an old mtime, so that a page written again shows
        os.utime(page, ns=(1, 1))
    return db, folder, pages


def test_a_build_from_the_same_store_keeps_the_pages(drawn):
    db, folder, pages = drawn
    assert (folder / STAMP).is_file()
    again = dashboard.build_all(db, folder, reuse=True)
    assert again == pages and set(_mtimes(again).values()) == {1}


def test_the_dashboard_command_draws_them_again(drawn):
    db, folder, pages = drawn
    assert set(_mtimes(dashboard.build_all(db, folder)).values()) != {1}


def test_a_changed_row_draws_them_again(drawn):
    db, folder, pages = drawn
    rows = db.results("hand")
    db.replace_results([rows[0].__class__(**{c.name: getattr(rows[0], c.name) for c in rows[0].__table__.columns
                                            if c.name != "id"} | dict(ms=(rows[0].ms or 1.0) * 2))])
    assert all(t != 1 for t in _mtimes(dashboard.build_all(db, folder, reuse=True)).values())


@pytest.mark.parametrize("gone", ["a page", "plotly.min.js"])
def test_a_missing_page_draws_them_again(drawn, gone):
    db, folder, pages = drawn
    (pages[0] if gone == "a page" else folder / "plotly.min.js").unlink()
    again = dashboard.build_all(db, folder, reuse=True)
    assert all(p.is_file() for p in again) and (folder / "plotly.min.js").is_file()
    assert all(t != 1 for t in _mtimes(again).values())


def test_other_options_draw_them_again(drawn):
    db, folder, pages = drawn
    assert all(t != 1 for t in _mtimes(dashboard.build_all(db, folder, plotlyjs="cdn", reuse=True)).values())


def test_a_build_cut_short_leaves_no_stamp_to_trust(drawn, monkeypatch):
    db, folder, pages = drawn
    rows = db.results("hand")
    db.replace_results([rows[0].__class__(**{c.name: getattr(rows[0], c.name) for c in rows[0].__table__.columns
                                            if c.name != "id"} | dict(ms=(rows[0].ms or 1.0) * 3))])

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(_pages, "_write", crash)
    with pytest.raises(OSError):
        dashboard.build_all(db, folder, reuse=True)
    assert not (folder / STAMP).exists()


def test_the_sweeps_outputs_keep_the_pages_of_a_store_that_did_not_change(drawn, tmp_path):
    from tuner import outputs

    db, folder, pages = drawn            # (no row of GPU "g" is timed: no config list, the pages only)
    ctx = SimpleNamespace(study=SimpleNamespace(name="hand"), target=SimpleNamespace(name="sm_90"), gpu_label="g")
    outputs.write_outputs(SimpleNamespace(no_outputs=False, out=str(tmp_path)), ctx, db)
    assert set(_mtimes(pages).values()) == {1}
