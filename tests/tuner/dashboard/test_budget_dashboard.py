"""The pages of a budget-only run (no GPU timed a config), the note a page shows until plotly
loads, and an index that names its store portably. Timed pages are tests/tuner/dashboard/test_dashboard.py's."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tuner import dashboard
from tuner.dashboard import BUDGET_METRICS, CELL_PX, store_name, with_plotly_note

S1 = "B1 H2 Nq128 Nk128 D64 bf16"
# The hand store's timed configs made budget-only: they fit, with these registers and spills.
FITTING = {"64x64_w4_s2": (128, 0), "128x64_w8_s2": (168, 0), "128x128_w8_s2": (255, 48), "32x64_w4_s3": (96, 0),
           "64x128_w4_s2": (200, 8)}
NOT_TIMED = dict(status="pending", stage="compile", reason="fits sm_90; timing needs a CUDA GPU", ms=None,
                 tflops=None, host_us=None, timer=None, flash_ms=None, cudnn_ms=None, pct_flash=None, pct_cudnn=None)
REJECTED_LABELS = {"256x256_w8_s3": "smem<br>384K", "256x256_w1_s1": "regs", "16x16_w16_s1": "invalid",
                   "64x32_w4_s1": "compile", "64x16_w4_s2": "wrong", "32x32_w4_s2": "crash", "32x16_w4_s2": "hang",
                   "16x32_w4_s2": "excluded"}
HAND_CONFIGS = list(FITTING) + list(REJECTED_LABELS)


@pytest.fixture
def budget_store(hand_store):
    """The hand store as a budget-only run left it: nothing timed, GPU "none"."""
    overrides = {key: NOT_TIMED | dict(registers=regs, spill_bytes=spill) for key, (regs, spill) in FITTING.items()}
    store = hand_store(overrides)
    with store.session() as session:
        from tuner.store import Result

        session.query(Result).update({"gpu": "none"})
    return store


def _rows(store):
    return [r for r in store.results("hand") if r.shape == S1]


def _cells(figure) -> dict:
    """(block_m, block_n, panel) -> (label, grey z, coloured z, config) on the shown variant."""
    greys = [t for t in figure.data if t.name == "rejected"]
    colours = [t for t in figure.data if t.name == "fits"]
    cells = {}
    for panel, (grey, colour) in enumerate(zip(greys, colours)):
        for i, m in enumerate(grey.y):
            for j, n in enumerate(grey.x):
                hover = grey.customdata[i][j] or colour.customdata[i][j]
                cells[(int(m), int(n), panel)] = (grey.text[i][j] or colour.text[i][j], grey.z[i][j],
                                                  colour.z[i][j], hover[0] if hover else None)
    return cells


def test_the_configs_that_fit_are_coloured_by_shared_memory_against_the_limit(budget_store):
    """Bug caught: every cell grey and labelled "no GPU", in the grey the index says means rejected."""
    rows = _rows(budget_store)
    figure = dashboard.budget_heatmap(rows)
    warps, stages = sorted({r.num_warps for r in rows}), sorted({r.num_stages for r in rows})
    cells = _cells(figure)
    for row in rows:
        panel = warps.index(row.num_warps) * len(stages) + stages.index(row.num_stages)
        label, grey, colour, config = cells[(row.block_m, row.block_n, panel)]
        assert config == row.config
        if row.config in FITTING:
            assert grey is None and colour == pytest.approx(100 * row.smem_bytes / row.smem_limit_bytes, abs=0.1)
            assert label == f"{row.smem_bytes // 1024}K", row.config
        else:
            assert colour is None and grey == 0 and label == REJECTED_LABELS[row.config], row.config
    assert sum(1 for label, *_ in cells.values() if label) == len(rows)
    assert "#d9d9d9" not in {colour for _, colour in figure.layout.coloraxis.colorscale}     # not the grey
    assert "% of the target's limit" in figure.layout.coloraxis.colorbar.title.text


def test_buttons_colour_registers_and_spills_with_their_labels(budget_store):
    rows = _rows(budget_store)
    figure = dashboard.budget_heatmap(rows)
    buttons = figure.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["shared memory", "registers", "spills"]
    warps, stages = sorted({r.num_warps for r in rows}), sorted({r.num_stages for r in rows})
    block_m, block_n = sorted({r.block_m for r in rows}), sorted({r.block_n for r in rows})
    for button, (metric, (_, _, scale, _)) in zip(buttons, BUDGET_METRICS.items()):
        z, text = button.args[0]["z"], button.args[0]["text"]
        assert button.args[1]["coloraxis.colorscale"] == scale
        for row in rows:
            panel = warps.index(row.num_warps) * len(stages) + stages.index(row.num_stages)
            at = (panel, block_m.index(row.block_m), block_n.index(row.block_n))
            value, label = z[at[0]][at[1]][at[2]], text[at[0]][at[1]][at[2]]
            if row.config not in FITTING:
                assert value is None and label == ""
            elif metric == "registers":
                assert value == FITTING[row.config][0] and label == str(FITTING[row.config][0])
            elif metric == "spill_bytes":
                assert value == FITTING[row.config][1] and label == str(FITTING[row.config][1])


def test_the_title_counts_what_fits_says_to_time_it_and_links_the_index(budget_store):
    """Bug caught: a title that says "measured on none", with no count and no way back."""
    rows = _rows(budget_store)
    figure = dashboard.budget_heatmap(rows)
    title = figure.layout.title.text
    assert f"{len(FITTING)} of {len(rows)} configs fit sm_90; time them on a GPU" in title
    assert "measured on" not in title and "budget only" in title
    assert '<a href="index.html">' in title
    legend = figure.layout.annotations[-1].text
    assert "<b>Colour</b>: fits sm_90" in legend and "<b>Grey</b>: rejected" in legend
    # Nothing overlaps: the buttons sit below the three title lines, and every label fits its cell.
    assert figure.layout.margin.t >= 190 and figure.layout.updatemenus[0].pad.b >= 30        # above the panel titles
    columns = len({r.block_n for r in rows}) * len({r.num_stages for r in rows})
    assert figure.layout.width >= CELL_PX * columns
    labels = [line for t in figure.data for row in t.text for cell in row for line in (cell or "").split("<br>")]
    assert max(len(line) for line in labels) <= 8, max(labels, key=len)


def test_build_all_writes_the_budget_page_and_a_portable_index(budget_store, tmp_path):
    out = tmp_path / "pages"
    pages = dashboard.build_all(budget_store, out)
    heatmaps = [p for p in pages if p.name.endswith("-bf16.html")]
    assert heatmaps and all("budget only, no GPU timings" in p.read_text() for p in heatmaps)
    index = (out / "index.html").read_text()
    assert f"budget only: {len(FITTING)} of {len(HAND_CONFIGS)} fit" in index
    assert "From the SQLite store hand.db." in index and str(tmp_path) not in index


def test_a_timed_store_keeps_the_timed_page(hand_store, tmp_path):
    pages = dashboard.build_all(hand_store(), tmp_path)
    heatmaps = [p for p in pages if p.name.endswith("-bf16.html")]
    assert heatmaps and all("budget only" not in p.read_text() and "measured on" in p.read_text() for p in heatmaps)


@pytest.mark.parametrize("url, name", [
    ("sqlite:////tmp/r5/grid1p.db", "the SQLite store grid1p.db"),
    ("sqlite:///.cache/carry/knobs.db", "the SQLite store knobs.db"),
    ("postgresql+psycopg://postgres:secret@10.0.0.7:5432/tuning", "a postgresql store (tuning)"),
])
def test_the_index_names_its_store_without_the_machine(url, name):
    assert store_name(url) == name


@pytest.mark.parametrize("plotlyjs, words", [("cdn", "needs a network"), ("directory", "plotly.min.js in this page")])
def test_every_page_says_it_needs_plotly_until_plotly_loads(plotlyjs, words):
    page = "<html><head></head><body><div>chart</div></body></html>"
    noted = with_plotly_note(page, plotlyjs)
    assert noted.index('id="fa2-plotly-note"') < noted.index("<div>chart</div>") < noted.index("window.Plotly")
    assert words in noted and "<noscript>" in noted
    assert with_plotly_note(noted, plotlyjs) == noted                    # patched once only


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _render(page, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=8000", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(_chromium() is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_note_goes_once_plotly_has_loaded_and_stays_without_it(budget_store, tmp_path):
    out = tmp_path / "pages"
    dashboard.build_all(budget_store, out)
    page = next(out.glob("*-bf16.html"))
    drawn = _render(page, tmp_path, "--dump-dom").stdout
    assert "main-svg" in drawn and 'id="fa2-plotly-note"' not in drawn, drawn[-2000:]
    (out / "plotly.min.js").unlink()                                      # as a page copied without it
    blank = _render(page, tmp_path, "--dump-dom").stdout
    assert 'id="fa2-plotly-note"' in blank and "main-svg" not in blank
    assert "plotly did not load" in blank


def test_a_page_whose_run_is_gone_gives_a_command_that_stores_into_this_store(budget_store, tmp_path):
    """Bug caught (issue 43): without its run's stored command, the title's sweep named no --storage, so pasted it
    wrote another store (fa2-out/tuning.db) than the one the page was drawn from."""
    from tuner.store import Run

    with budget_store.session() as session:
        session.query(Run).delete()
    pages = dashboard.build_all(budget_store, tmp_path / "pages")
    heatmaps = [p for p in pages if p.name.endswith("-bf16.html")]
    assert heatmaps and all(f"--gpu sm_90 --storage {budget_store.url}" in p.read_text().replace("\\u002f", "/")
                            for p in heatmaps)      # the page's JSON writes / as \u002f
    assert "--storage" not in dashboard.budget_heatmap(_rows(budget_store)).layout.title.text   # no store: none
