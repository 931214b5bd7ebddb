"""Dashboards and the emitted config list, from results recorded on the H200.

``fixtures/h200_results.json.gz`` holds the rows of three shapes from the H200 sweeps
of studies ``article`` and ``head_dim_128`` (2026-11-30): real verdicts, real timings.
"""

from __future__ import annotations

import datetime as dt
import gzip
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tuner import dashboard, emit, store as storage
from tuner._budget import Problem, verdict
from tuner.gpus import GpuSpec
from tuner.space import Config

FIXTURE = Path(__file__).parent / "fixtures" / "h200_results.json.gz"
SHAPE = "B4 H8 Nq4096 Nk4096 D64 bf16"
ROOT = Path(__file__).resolve().parent.parent


def _decode(table, values: dict) -> dict:
    out = {}
    for column in table.columns:
        value = values.get(column.name)
        if isinstance(value, str) and column.type.python_type is dt.datetime:
            value = dt.datetime.fromisoformat(value)
        out[column.name] = value
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> storage.Store:
    """A store holding the rows recorded on the H200."""
    data = json.loads(gzip.open(FIXTURE, "rt").read())
    db = storage.Store(f"sqlite:///{tmp_path_factory.mktemp('db') / 'h200.db'}")
    with db.session() as session:
        session.add_all(storage.Run(**_decode(storage.Run.__table__, run)) for run in data["runs"])
        session.add_all(storage.Result(**_decode(storage.Result.__table__, row)) for row in data["results"])
    return db


def _article_rows(db, shape=SHAPE):
    return [r for r in db.results("article", "sm_90") if r.shape == shape]


# --------------------------------------------------------------------------- heatmaps


def test_heatmap_has_a_cell_per_config_with_the_right_reasons(recorded):
    rows = _article_rows(recorded)
    assert len(rows) == 750
    figure = dashboard.heatmap(rows)
    rejected = [t for t in figure.data if t.name == "rejected"]
    timed = [t for t in figure.data if t.name == "timed"]
    assert len(rejected) == len(timed) == 5 * 6            # warps x stages panels
    cells = {}
    for rejected_trace, timed_trace in zip(rejected, timed):
        for i, m in enumerate(rejected_trace.y):
            for j, n in enumerate(rejected_trace.x):
                text = rejected_trace.text[i][j]
                value = timed_trace.z[i][j]
                shown = rejected_trace.z[i][j] is not None or value is not None
                cells[(m, n, id(rejected_trace))] = (shown, text, value)
    assert len(cells) == 750 and all(shown for shown, _, _ in cells.values())
    by_status = {}
    for row in rows:
        by_status[row.status] = by_status.get(row.status, 0) + 1
    timed_values = sum(value is not None for _, _, value in cells.values())
    assert timed_values == by_status["timed"]
    labels = [text for _, text, value in cells.values() if value is None]
    assert sum(label.startswith("smem<br>") for label in labels) == by_status.get("over_smem", 0)
    assert labels.count("regs") == by_status.get("over_registers", 0)
    assert labels.count("invalid") == by_status.get("invalid", 0)
    assert labels.count("compile") == by_status.get("compile_error", 0)
    # the bytes that broke the budget are on the cell, and everything stored is in the hover
    over = next(r for r in rows if r.status == "over_smem")
    needed = over.smem_bytes or over.model_smem_bytes or int(re.search(r"needs (\d+) B", over.reason).group(1))
    assert f"smem<br>{needed // 1024}K" in labels
    hover = next(t.hovertext for t in rejected)
    flat = [h for line in hover for h in line if h]
    assert flat and all(field in flat[0] for field in ("reason:", "block_m:", "triton_version:", "gpu:"))


def test_heatmap_title_names_target_gpu_versions_and_date(recorded):
    title = dashboard.heatmap(_article_rows(recorded)).layout.title.text
    for fragment in ("target sm_90", "NVIDIA H200", "triton 3.6.0", "torch 2.11", "driver 580", "2026-11-30"):
        assert fragment in title


def test_metric_buttons_switch_colour_to_pct_of_sdpa_and_ms(recorded):
    figure = dashboard.heatmap(_article_rows(recorded))
    labels = [b.label for b in figure.layout.updatemenus[0].buttons]
    assert labels == ["TFLOP/s", "% of SDPA-flash", "% of SDPA-cuDNN", "ms"]
    ms_button = figure.layout.updatemenus[0].buttons[-1]
    assert ms_button.args[1]["coloraxis.colorbar.title.text"].startswith("ms")


def test_roofline_points_sit_under_the_roof(recorded):
    from kernel.bench import attention_flops

    rows = [r for r in recorded.results() if r.status == "timed"]
    spec = GpuSpec.from_name("h200")
    for row in rows:
        intensity = attention_flops(row.batch, row.heads, row.n_q, row.n_k, row.head_dim, row.causal) / \
            dashboard.compulsory_bytes(row)
        roof = min(spec.peak_bf16_tflops, intensity * spec.mem_bandwidth_gbs / 1e3)
        assert row.tflops <= roof, (row.config, row.shape, row.tflops, roof)
    figure = dashboard.roofline([r for r in rows if r.study == "article"])
    assert any("roof" in (t.name or "") for t in figure.data)


def test_build_all_writes_offline_pages_and_an_index(recorded, tmp_path):
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


# ------------------------------------------------------------------------------- emit


def _emit(recorded, tmp_path, *extra) -> tuple[Path, object]:
    out = tmp_path / "configs.py"
    code = emit.main(["--study", "article", "--gpu", "sm_90", "--storage", recorded.url, "--out", str(out), *extra])
    assert code == 0
    spec = importlib.util.spec_from_file_location("emitted", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return out, module


def test_emitted_file_imports_and_holds_every_shape_winner(recorded, tmp_path, capsys):
    out, module = _emit(recorded, tmp_path, "--top", "2")
    assert out.read_text() in capsys.readouterr().out                  # printed as well as written
    keys = [f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}_w{c.num_warps}_s{c.num_stages}" for c in module.CONFIGS]
    assert len(keys) == len(set(keys))
    rows = [r for r in recorded.results("article", "sm_90") if r.status == "timed"]
    for shape in {r.shape for r in rows}:
        winner = min((r for r in rows if r.shape == shape), key=lambda r: r.ms)
        assert winner.config in keys
        assert f"best for {shape}: {winner.ms:.4f} ms" in out.read_text()
    assert module.KEY == ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"]
    assert re.search(r"% of SDPA-flash", out.read_text()) and "smem " in out.read_text()


def test_every_emitted_config_fits_its_target(recorded, tmp_path):
    _, module = _emit(recorded, tmp_path)
    target = GpuSpec.from_name("sm_90")
    problem = Problem(batch=4, heads=8, n_q=4096, n_k=4096, head_dim=64, dtype="bf16")
    for config in module.CONFIGS:
        c = Config(config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages)
        assert verdict(c, problem, target, None).launchable


def test_shipped_config_list_fits_sm_90_and_runs_in_the_autotuned_entry_point(device):
    from kernel.configs_h200 import CONFIGS

    target = GpuSpec.from_name("sm_90")
    for config in CONFIGS:
        c = Config(config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages)
        for causal in (False, True):
            assert verdict(c, Problem(head_dim=64, causal=causal), target, None).launchable
    if device == "cpu":
        # The interpreter cannot time configs; one config keeps autotune from benchmarking.
        from kernel.autotuned import make_autotuned

        entry = make_autotuned(CONFIGS[:1], ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"])
    else:
        from kernel.autotuned import flash_attn_fwd_autotuned as entry
    from helpers import assert_matches_reference, fresh_inputs, nan_outputs

    dtype = torch.float16
    for causal in (False, True):
        q, k, v, seed = fresh_inputs((1, 2, 200, 64), (1, 2, 136, 64), dtype, device)
        out, lse = nan_outputs(q)
        entry(q, k, v, causal, out=out, lse=lse)
        assert_matches_reference(out, lse, q, k, v, causal, seed, label="autotuned")


def test_emit_without_timed_results_exits_2(tmp_path, capsys):
    db = storage.Store(f"sqlite:///{tmp_path / 'empty.db'}")
    assert emit.main(["--study", "article", "--gpu", "sm_90", "--storage", db.url]) == 2
    assert "no timed results" in capsys.readouterr().err
