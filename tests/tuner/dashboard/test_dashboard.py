"""Dashboards: every cell says the right thing, the buttons carry the right data, the roof is right.

Two stores: a hand-written one (every status, and a config timed on one shape only)
and ``tests/fixtures/h200_results.json.gz``, the rows of three shapes from the H200 sweeps of
studies ``article`` and ``head_dim_128`` (2026-11-30): real verdicts, real timings.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import shutil
import subprocess

import pytest
from conftest import FIXTURES

from tuner import dashboard
from tuner.gpus import GpuSpec
from tuner.store import Result, Run, Store

FIXTURE = FIXTURES / "h200_results.json.gz"
SHAPE = "B4 H8 Nq4096 Nk4096 D64 bf16"
S1 = "B1 H2 Nq128 Nk128 D64 bf16"
EXPECTED_LABELS = {"256x256_w8_s3": "smem<br>384K", "256x256_w1_s1": "regs", "16x16_w16_s1": "invalid",
                   "64x32_w4_s1": "compile", "64x16_w4_s2": "wrong", "32x32_w4_s2": "crash",
                   "32x16_w4_s2": "hang", "16x32_w4_s2": "excluded", "32x64_w4_s3": "no GPU",
                   "64x128_w4_s2": "crash"}      # on the causal shape; timed on the other


def _decode(table, values: dict) -> dict:
    out = {}
    for column in table.columns:
        value = values.get(column.name)
        if isinstance(value, str) and column.type.python_type is dt.datetime:
            value = dt.datetime.fromisoformat(value)
        out[column.name] = value
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Store:
    """A store holding the rows recorded on the H200."""
    with gzip.open(FIXTURE, "rt") as handle:
        data = json.load(handle)
    db = Store(f"sqlite:///{tmp_path_factory.mktemp('db') / 'h200.db'}")
    with db.session() as session:
        session.add_all(Run(**_decode(Run.__table__, run)) for run in data["runs"])
        session.add_all(Result(**_decode(Result.__table__, row)) for row in data["results"])
    return db


def _cells(figure) -> dict[tuple, tuple]:
    """(block_m, block_n, panel) -> (label, grey z, coloured z, hover fields) read off the figure."""
    greys = [t for t in figure.data if t.name == "rejected"]
    colours = [t for t in figure.data if t.name == "timed"]
    cells = {}
    for panel, (grey, colour) in enumerate(zip(greys, colours)):
        for i, m in enumerate(grey.y):
            for j, n in enumerate(grey.x):
                label = grey.text[i][j] or colour.text[i][j]
                hover = grey.customdata[i][j] or colour.customdata[i][j]
                cells[(int(m), int(n), panel)] = (label, grey.z[i][j], colour.z[i][j], hover)
    return cells


# ------------------------------------------------------------------ the hand-written store


def test_every_cell_is_labelled_for_its_own_config_and_status(hand_store):
    rows = [r for r in hand_store().results("hand") if r.shape == S1]
    figure = dashboard.heatmap(rows)
    warps = sorted({r.num_warps for r in rows})
    stages = sorted({r.num_stages for r in rows})
    cells = _cells(figure)
    for row in rows:
        panel = warps.index(row.num_warps) * len(stages) + stages.index(row.num_stages)
        label, grey, colour, hover = cells[(row.block_m, row.block_n, panel)]
        expected = f"{row.tflops:.0f}" if row.status == "timed" else EXPECTED_LABELS[row.config]
        assert label == expected, row.config
        assert hover[0] == row.config and hover[1] == row.status and row.config in EXPECTED_LABELS | {
            "64x64_w4_s2": 1, "128x64_w8_s2": 1, "128x128_w8_s2": 1}
        if row.status == "timed":
            assert grey is None and colour == pytest.approx(row.tflops, rel=1e-3)
        else:
            assert grey == 0 and colour is None
    shown = sum(1 for label, *_ in cells.values() if label)
    assert shown == len(rows)                           # no cell without a row is labelled


def test_buttons_switch_the_colour_to_each_metric_with_its_values(hand_store):
    rows = [r for r in hand_store().results("hand") if r.shape == S1]
    figure = dashboard.heatmap(rows)
    buttons = figure.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["TFLOP/s", "% of SDPA-flash", "% of SDPA-cuDNN", "GPU ms", "host µs"]
    stages = sorted({r.num_stages for r in rows})
    warps = sorted({r.num_warps for r in rows})
    block_m, block_n = sorted({r.block_m for r in rows}), sorted({r.block_n for r in rows})
    for button, column in zip(buttons, ["tflops", "pct_flash", "pct_cudnn", "ms", "host_us"]):
        z = button.args[0]["z"]
        for row in rows:
            panel = warps.index(row.num_warps) * len(stages) + stages.index(row.num_stages)
            value = z[panel][block_m.index(row.block_m)][block_n.index(row.block_n)]
            if row.status == "timed":
                assert value == pytest.approx(getattr(row, column), rel=1e-3), (column, row.config)
            else:
                assert value is None, (column, row.config)
        lower_better = column in ("ms", "host_us")
        assert button.args[1]["coloraxis.colorscale"] == ("Viridis_r" if lower_better else "Viridis")


def test_the_roof_is_right_at_known_points():
    h200 = GpuSpec.from_name("h200")
    assert dashboard.roof_tflops(h200, 10.0) == pytest.approx(48.0)          # 4.8 TB/s x 10 FLOP/B
    assert dashboard.roof_tflops(h200, 100.0) == pytest.approx(480.0)
    assert dashboard.roof_tflops(h200, 1000.0) == pytest.approx(989.0)       # the compute peak
    ridge = 989.0 / 4.8
    assert dashboard.roof_tflops(h200, ridge) == pytest.approx(989.0)


def test_compulsory_bytes_count_q_k_v_o_and_lse_once():
    from tuner.kernels.triton_fwd import KERNEL
    from tuner.problem import Problem

    problem = Problem(batch=2, heads=3, n_q=100, n_k=50, head_dim=64, dtype="bf16")
    assert KERNEL.compulsory_bytes(problem) == 2 * 3 * ((2 * 100 * 64 + 2 * 50 * 64) * 2 + 4 * 100)


# ---------------------------------------------------------------------- the H200 rows


def test_heatmap_has_a_cell_per_config_with_the_right_reasons(recorded):
    rows = [r for r in recorded.results("article", "sm_90") if r.shape == SHAPE]
    assert len(rows) == 750
    figure = dashboard.heatmap(rows)
    cells = _cells(figure)
    assert len([t for t in figure.data if t.name == "rejected"]) == 5 * 6            # warps x stages panels
    assert len(cells) == 750 and all(grey is not None or colour is not None for _, grey, colour, _ in cells.values())
    by_status = {}
    for row in rows:
        by_status[row.status] = by_status.get(row.status, 0) + 1
    assert sum(colour is not None for _, _, colour, _ in cells.values()) == by_status["timed"]
    labels = [label for label, _, colour, _ in cells.values() if colour is None]
    assert sum(label.startswith("smem<br>") for label in labels) == by_status.get("over_smem", 0)
    assert labels.count("regs") == by_status.get("over_registers", 0)
    assert labels.count("invalid") == by_status.get("invalid", 0)
    assert labels.count("compile") == by_status.get("compile_error", 0)


def test_heatmap_title_names_target_gpu_versions_and_date(recorded):
    rows = [r for r in recorded.results("article", "sm_90") if r.shape == SHAPE]
    title = dashboard.heatmap(rows).layout.title.text
    for fragment in ("target sm_90", "NVIDIA H200", "triton 3.6.0", "torch 2.11", "driver 580", "2026-11-30"):
        assert fragment in title


def test_roofline_points_sit_under_the_roof_and_within_reach_of_it(recorded):
    rows = [r for r in recorded.results() if r.status == "timed"]
    spec = GpuSpec.from_name("h200")
    for row in rows:
        intensity = dashboard.intensity(row)
        assert row.tflops <= dashboard.roof_tflops(spec, intensity), (row.config, row.shape)
    best = max(r.tflops for r in rows)
    assert best > 0.3 * spec.peak_bf16_tflops      # a roof 1000x too low, or points 1000x too high, fails here
    figure = dashboard.roofline([r for r in rows if r.study == "article"])
    roof = next(t for t in figure.data if "roof" in (t.name or ""))
    assert all(y == pytest.approx(dashboard.roof_tflops(spec, x)) for x, y in zip(roof.x, roof.y))


def test_build_all_writes_small_offline_pages_and_an_index(recorded, tmp_path):
    pages = dashboard.build_all(recorded, tmp_path)
    names = {p.name for p in pages}
    assert "index.html" in names and (tmp_path / "plotly.min.js").exists()
    assert len([n for n in names if n.endswith("roofline.html")]) == 2          # two studies
    index = (tmp_path / "index.html").read_text()
    for page in pages:
        if page.name != "index.html":
            assert page.name in index
            text = page.read_text()
            assert 'src="plotly.min.js"' in text and "cdn.plot.ly" not in text
            assert page.stat().st_size <= 300_000, (page.name, page.stat().st_size)


def test_dashboard_cli_refuses_a_file_as_out_and_a_missing_store(recorded, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("x")
    assert dashboard.main(["--storage", recorded.url, "--out", str(file)]) == 2
    assert "is a file" in capsys.readouterr().err and file.read_text() == "x"
    missing = tmp_path / "typo.db"
    assert dashboard.main(["--storage", f"sqlite:///{missing}", "--out", str(tmp_path / "o")]) == 2
    assert "no such database file" in capsys.readouterr().err and not missing.exists()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_dashboards_render_in_headless_chromium_without_console_errors(recorded, tmp_path):
    dashboard.build_all(recorded, tmp_path)
    page = tmp_path / dashboard.page_name("article", SHAPE, "sm_90", "NVIDIA H200 (sm_90)")
    # Errors a page script throws are written into the DOM, where --dump-dom shows them.
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "<head>", "<head><script>window.__errors=[];window.addEventListener('error',e=>window.__errors.push("
                  "String(e.message)));setTimeout(()=>{document.title='ERRORS:'+window.__errors.length+':'+"
                  "window.__errors.join('|')+':SVG:'+document.querySelectorAll('.main-svg').length},3000);"
                  "</script>", 1))
    result = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=8000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120)
    title = re.search(r"<title>(.*?)</title>", result.stdout, re.S)
    assert title, result.stderr[-2000:]
    assert title.group(1).startswith("ERRORS:0::SVG:"), title.group(1)
    assert int(title.group(1).rsplit(":", 1)[1]) > 0          # plotly drew its SVG
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    assert not console, console


def test_knob_variants_get_a_selector_that_opens_on_the_fastest_variant(hand_store):
    """A study with knobs has rows of several variants per cell: each variant gets its own
    panels (a cell must show its own variant's row, never another's), one selector entry,
    and the page opens on the variant of the fastest config."""
    plain = [r for r in hand_store().results("hand") if r.shape == S1]
    tma = []
    for row in plain:
        values = {c.name: getattr(row, c.name) for c in Result.__table__.columns if c.name != "id"}
        values.update(config=row.config + "_tma", tma=True, tflops=row.tflops and row.tflops * 2)
        tma.append(Result(**values))
    figure = dashboard.heatmap(plain + tma)
    selector = figure.layout.updatemenus[1]
    assert [b.label for b in selector.buttons] == ["plain", "tma"] and selector.active == 1
    panels = len({r.num_warps for r in plain}) * len({r.num_stages for r in plain})
    assert [t.visible for t in figure.data] == [False] * (2 * panels) + [True] * (2 * panels)
    for button, variant in zip(selector.buttons, (False, True)):
        assert button.args[0]["visible"] == [not variant] * (2 * panels) + [variant] * (2 * panels)
    shown = [t for t in figure.data if t.visible and t.name == "timed"]
    configs = {cell[0] for t in shown for line in t.customdata for cell in line if cell and cell[0]}
    assert configs and all(c.endswith("_tma") for c in configs)


def test_a_page_draws_at_most_max_variants_the_fastest_first():
    """The backward's space has hundreds of variants (dQ pass tiles, knobs): a page draws the
    MAX_VARIANTS with the fastest timed configs, else the most that fit."""
    from types import SimpleNamespace

    from tuner.dashboard import MAX_VARIANTS, drawn_variants
    from tuner.status import Status

    rows = [SimpleNamespace(status=Status.TIMED, tflops=float(i)) for i in range(MAX_VARIANTS + 5)]
    rows += [SimpleNamespace(status=Status.PENDING, tflops=None) for _ in range(3)]
    of_row = {id(r): f"v{i:02d}" for i, r in enumerate(rows)}
    drawn, total = drawn_variants(rows, of_row)
    assert total == MAX_VARIANTS + 8 and len(drawn) == MAX_VARIANTS
    assert set(drawn) == {f"v{i:02d}" for i in range(5, MAX_VARIANTS + 5)}      # the fastest timed ones
