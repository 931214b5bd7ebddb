"""``python -m tuner.dashboard``: plotly heatmaps and rooflines from the store, offline HTML.

One heatmap page per (study, shape, target, GPU used): BLOCK_M down, BLOCK_N across,
one panel per (num_warps, num_stages). Colour is TFLOP/s, with buttons for % of SDPA,
GPU ms and host µs per call. Rejected configs are grey cells labelled with the reason
(over budget with the bytes, incorrect, compile error, crashed, ...). Hovering a cell
shows its stored fields through one template over ``customdata``, which keeps a page
small. One roofline page per study places each timed config's TFLOP/s against the
compute and bandwidth ceilings of the GPU that ran it. ``index.html`` links them all.
Pages load ``plotly.min.js`` from beside them (written there from the installed plotly),
so they open without a network.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from collections import defaultdict
from pathlib import Path

from kernel.timing import attention_flops
from tuner.cli import usage_error
from tuner.gpus import GpuSpec
from tuner.status import Status
from tuner.store import DEFAULT_OUT, DEFAULT_URL, Result, Store, StoreError

DEFAULT_DIR = Path(DEFAULT_OUT) / "dashboards"
METRICS = {  # column -> (button label, colour bar title)
    "tflops": ("TFLOP/s", "TFLOP/s"),
    "pct_flash": ("% of SDPA-flash", "% of SDPA-flash (100 = as fast)"),
    "pct_cudnn": ("% of SDPA-cuDNN", "% of SDPA-cuDNN (100 = as fast)"),
    "ms": ("GPU ms", "GPU ms per call (lower is better)"),
    "host_us": ("host µs", "host µs per call (lower is better)"),
}
LOWER_IS_BETTER = ("ms", "host_us")
SHORT_REASON = {Status.OVER_SMEM: "smem", Status.OVER_REGISTERS: "regs", Status.INVALID: "invalid",
                Status.UNSUPPORTED: "n/a", Status.COMPILE_ERROR: "compile", Status.INCORRECT: "wrong",
                Status.CRASHED: "crash", Status.TIMEOUT: "hang", Status.RESTRICTED: "excluded",
                Status.PENDING: "no GPU"}
# What a cell's hover shows, in order: (label, format). Values are pre-formatted strings.
HOVER = ("config", "status", "GPU ms", "TFLOP/s", "% of SDPA-flash / cuDNN", "host µs/call", "smem / limit B",
         "registers, spill B", "out err (bound), gate", "timer", "reason")
HOVER_TEMPLATE = "<br>".join(f"{label}: %{{customdata[{i}]}}" for i, label in enumerate(HOVER)) + "<extra></extra>"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def page_name(study: str, shape: str, target: str, gpu: str) -> str:
    """The heatmap file's name (flat, so one plotly.min.js serves every page)."""
    return f"{_slug(study)}__{target}__{_slug(gpu)}__{_slug(shape)}.html"


def cell_label(row: Result) -> str:
    """What a cell says: its TFLOP/s, or why there is none."""
    if row.status == Status.TIMED:
        return f"{row.tflops:.0f}" if row.tflops else ""
    short = SHORT_REASON.get(Status(row.status), str(row.status))
    if row.status == Status.OVER_SMEM:
        needed = row.smem_bytes or row.model_smem_bytes
        if needed is None:
            found = re.search(r"needs (\d+) B", row.reason or "")
            needed = int(found.group(1)) if found else None
        return f"smem<br>{needed // 1024}K" if needed else short
    return short


def _num(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def hover_fields(row: Result) -> list[str]:
    """The row's values in :data:`HOVER` order, formatted ("" where missing)."""
    return [row.config, str(row.status), _num(row.ms, ".4f"), _num(row.tflops, ".0f"),
            f"{_num(row.pct_flash, '.0f')} / {_num(row.pct_cudnn, '.0f')}" if row.pct_flash else "",
            _num(row.host_us, ".1f"), f"{_num(row.smem_bytes or row.model_smem_bytes, 'd')} / "
                                      f"{_num(row.smem_limit_bytes, 'd')}",
            f"{_num(row.registers, 'd')}, {_num(row.spill_bytes, 'd')}" if row.registers else "",
            f"{_num(row.err_out, '.1e')} ({_num(row.err_bound, '.1e')}), {_num(row.ragged_err_out, '.1e')}"
            if row.err_out is not None else "", row.timer or "", html.escape((row.reason or "")[:100])]


def _rounded(value):
    """Four significant digits: enough for a colour and a hover, a third of the bytes."""
    return None if value is None else float(f"{value:.4g}")


def _panel_traces(go, rows_by_cell: dict, warps: int, stages: int, block_m: list, block_n: list):
    """The grey (rejected) and coloured (timed) heatmaps of one warps x stages panel; each
    trace carries the labels and hover data of its own cells only, and no hover on gaps."""
    grid = [[rows_by_cell.get((bm, bn, warps, stages)) for bn in block_n] for bm in block_m]
    x, y = [str(n) for n in block_n], [str(m) for m in block_m]

    def per_cell(keep, make, empty):
        return [[make(c) if c is not None and keep(c) else empty for c in line] for line in grid]

    def rejected(c):
        return c.status != Status.TIMED

    def timed(c):
        return c.status == Status.TIMED

    z = {metric: per_cell(timed, lambda c, m=metric: _rounded(getattr(c, m)), None) for metric in METRICS}
    common = dict(x=x, y=y, texttemplate="%{text}", textfont={"size": 9}, xgap=1, ygap=1, hoverongaps=False,
                  hovertemplate=HOVER_TEMPLATE)
    grey = go.Heatmap(z=per_cell(rejected, lambda c: 0, None), text=per_cell(rejected, cell_label, ""),
                      customdata=per_cell(rejected, hover_fields, 0), colorscale=[[0, "#d9d9d9"], [1, "#d9d9d9"]],
                      showscale=False, name="rejected", **common)
    coloured = go.Heatmap(z=z["tflops"], text=per_cell(timed, cell_label, ""),
                          customdata=per_cell(timed, hover_fields, 0), coloraxis="coloraxis", name="timed", **common)
    return grey, coloured, z


def heatmap(rows: list[Result]):
    """The heatmap figure for one (study, shape, target, GPU) group of rows."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    block_m, block_n = sorted({r.block_m for r in rows}), sorted({r.block_n for r in rows})
    warps, stages = sorted({r.num_warps for r in rows}), sorted({r.num_stages for r in rows})
    cells = {(r.block_m, r.block_n, r.num_warps, r.num_stages): r for r in rows}
    fig = make_subplots(rows=len(warps), cols=len(stages), shared_xaxes=True, shared_yaxes=True,
                        horizontal_spacing=0.012, vertical_spacing=0.03,
                        column_titles=[f"{s} stage{'s' if s > 1 else ''}" for s in stages],
                        row_titles=[f"{w} warp{'s' if w > 1 else ''}" for w in warps])
    z_by_metric: dict[str, list] = {m: [] for m in METRICS}
    for i, w in enumerate(warps, start=1):
        for j, s in enumerate(stages, start=1):
            grey, timed, z = _panel_traces(go, cells, w, s, block_m, block_n)
            fig.add_trace(grey, row=i, col=j)
            fig.add_trace(timed, row=i, col=j)
            for metric in METRICS:
                z_by_metric[metric].append(z[metric])
    for i in range(1, len(warps) + 1):
        fig.update_yaxes(title_text="BLOCK_M" if i == (len(warps) + 1) // 2 else None, row=i, col=1)
    for j in range(1, len(stages) + 1):
        fig.update_xaxes(title_text="BLOCK_N", row=len(warps), col=j)
    timed_rows = [r for r in rows if r.status == Status.TIMED]
    ranges = {m: (min((getattr(r, m) for r in timed_rows if getattr(r, m)), default=0),
                  max((getattr(r, m) for r in timed_rows if getattr(r, m)), default=1)) for m in METRICS}
    timed_traces = [2 * k + 1 for k in range(len(warps) * len(stages))]
    buttons = [dict(label=label, method="update", args=[
        {"z": z_by_metric[metric]},
        {"coloraxis.colorbar.title.text": title, "coloraxis.cmin": ranges[metric][0],
         "coloraxis.cmax": ranges[metric][1],
         "coloraxis.colorscale": "Viridis_r" if metric in LOWER_IS_BETTER else "Viridis"}, timed_traces])
        for metric, (label, title) in METRICS.items()]
    fig.update_layout(title=dict(text=_title(rows, timed_rows), x=0.01), height=170 * len(warps) + 160,
                      width=140 * len(stages) + 260, template="plotly_white",
                      coloraxis=dict(colorscale="Viridis", cmin=ranges["tflops"][0], cmax=ranges["tflops"][1],
                                     colorbar=dict(title=dict(text=METRICS["tflops"][1]))),
                      updatemenus=[dict(type="buttons", direction="right", x=0.0, xanchor="left", y=1.0,
                                        yanchor="bottom", pad=dict(b=28), buttons=buttons, showactive=True)],
                      margin=dict(t=150, l=70, r=40, b=60))
    return fig


def _title(rows: list[Result], timed: list[Result]) -> str:
    first = rows[0]
    best = min(timed, key=lambda r: r.ms) if timed else None
    dates = sorted(r.created_at for r in rows)
    return (f"<b>{first.study}</b> · {first.shape} · target {first.target} · measured on {first.gpu}<br>"
            f"<sup>torch {first.torch_version}, triton {first.triton_version}, driver {first.driver}; "
            f"{dates[0]:%Y-%m-%d %H:%M} to {dates[-1]:%Y-%m-%d %H:%M} UTC; {len(timed)} of {len(rows)} configs timed"
            + (f"; best {best.config}: {best.ms:.4f} ms, {best.tflops:.0f} TFLOP/s, "
               f"{best.pct_flash or 0:.0f}% of SDPA-flash" if best else "") + "</sup>")


def compulsory_bytes(row: Result) -> float:
    """Bytes one launch must move to or from HBM: Q, K and V read once, O and lse written once.

    The kernel re-reads K and V once per query tile, but at these sizes the re-reads
    come from L2 (50 MB on an H100/H200), so they do not count against HBM bandwidth.
    """
    element = 4 if row.dtype == "fp32" else 2
    per_head = (2 * row.n_q * row.head_dim + 2 * row.n_k * row.head_dim) * element + 4 * row.n_q
    return float(row.batch * row.heads * per_head)


def roof_tflops(spec: GpuSpec, intensity: float) -> float:
    """The roofline at an arithmetic intensity (FLOP/byte): min(compute peak, bandwidth x intensity)."""
    return min(spec.peak_bf16_tflops, intensity * spec.mem_bandwidth_gbs * 1e9 / 1e12)


def gpu_spec_of(label: str, target: str) -> GpuSpec:
    """The spec of the GPU a row was measured on (its card's rates), else the target's."""
    card = re.sub(r"\(.*\)|nvidia", "", label, flags=re.IGNORECASE).strip()
    try:
        return GpuSpec.from_name(card)
    except ValueError:
        return GpuSpec.from_name(target)


def roofline(rows: list[Result]):
    """Achieved TFLOP/s of every timed config against the ceilings of the GPU that ran them."""
    import plotly.graph_objects as go

    timed = [r for r in rows if r.status == Status.TIMED and r.ms]
    spec = gpu_spec_of(timed[0].gpu, timed[0].target)
    fig = go.Figure()
    by_shape = defaultdict(list)
    for row in timed:
        by_shape[row.shape].append(row)
    intensities = []
    for shape, shape_rows in by_shape.items():
        xs = [attention_flops(r.batch, r.heads, r.n_q, r.n_k, r.head_dim, r.causal) / compulsory_bytes(r)
              for r in shape_rows]
        intensities += xs
        fig.add_trace(go.Scatter(x=xs, y=[r.tflops for r in shape_rows], mode="markers", name=shape,
                                 customdata=[[r.config, f"{r.ms:.4f}"] for r in shape_rows],
                                 hovertemplate="%{customdata[0]}<br>%{customdata[1]} ms, %{y:.0f} TFLOP/s"
                                               f"<extra>{html.escape(shape)}</extra>",
                                 marker=dict(size=6, opacity=0.75)))
    if spec.peak_bf16_tflops and spec.mem_bandwidth_gbs:
        low, high = min(intensities) / 2, max(intensities) * 2
        xs = [low * (high / low) ** (i / 100) for i in range(101)]
        fig.add_trace(go.Scatter(x=xs, y=[roof_tflops(spec, x) for x in xs], mode="lines",
                                 name=f"{spec.card} roof: {spec.peak_bf16_tflops:.0f} TFLOP/s dense bf16, "
                                      f"{spec.mem_bandwidth_gbs / 1e3:.1f} TB/s",
                                 line=dict(color="black", dash="dash")))
    first = timed[0]
    fig.update_layout(
        title=dict(text=f"<b>{first.study}</b> roofline · measured on {first.gpu} (target {first.target})<br><sup>"
                        f"torch {first.torch_version}, triton {first.triton_version}, driver {first.driver}; "
                        f"intensity = attention FLOPs / compulsory bytes (Q, K, V read and O written once); "
                        f"ceilings from tuner.gpus ({html.escape(spec.source)})</sup>", x=0.01),
        xaxis=dict(type="log", title="arithmetic intensity (FLOP/byte)"),
        yaxis=dict(type="log", title="achieved TFLOP/s"), template="plotly_white", height=650, width=1100,
        margin=dict(t=110))
    return fig


def _write(fig, path: Path, plotlyjs: str) -> None:
    fig.write_html(path, include_plotlyjs=plotlyjs, full_html=True)


def build_all(db: Store, directory: Path = DEFAULT_DIR, studies: list[str] | None = None,
              plotlyjs: str = "directory", shapes: list[str] | None = None) -> list[Path]:
    """Every heatmap and roofline in the store (or of ``studies``), plus ``index.html``.

    Args:
        plotlyjs: "directory" (plotly.min.js written beside the pages: offline) or "cdn".
        shapes: heatmaps of these shape labels only (rooflines keep every shape).

    Returns:
        The pages written.
    """
    rows = [r for r in db.results() if not studies or r.study in studies]
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for row in rows:
        groups[(row.study, row.target, row.gpu, row.shape)].append(row)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    index: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for (study, target, gpu, shape), group in sorted(groups.items()):
        if shapes and shape not in shapes:
            continue
        name = page_name(study, shape, target, gpu)
        _write(heatmap(group), directory / name, plotlyjs)
        written.append(directory / name)
        index[study].append((name, f"{shape} · target {target} · {gpu}"))
    by_study: dict[tuple, list[Result]] = defaultdict(list)
    for row in rows:
        if row.status == Status.TIMED:
            by_study[(row.study, row.target, row.gpu)].append(row)
    for (study, target, gpu), group in sorted(by_study.items()):
        name = f"{_slug(study)}__{target}__{_slug(gpu)}__roofline.html"
        _write(roofline(group), directory / name, plotlyjs)
        written.append(directory / name)
        index[study].insert(0, (name, f"roofline · target {target} · {gpu}"))
    written.append(_index(directory, index, db.url))
    return written


def _index(directory: Path, index: dict[str, list[tuple[str, str]]], url: str) -> Path:
    items = "\n".join(
        f"<h2>{html.escape(study)}</h2>\n<ul>\n" + "\n".join(
            f'  <li><a href="{html.escape(name)}">{html.escape(label)}</a></li>' for name, label in pages) + "\n</ul>"
        for study, pages in sorted(index.items()))
    path = directory / "index.html"
    path.write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>fa2-tuner dashboards</title></head>\n<body>\n"
        f"<h1>fa2-tuner dashboards</h1>\n<p>From {html.escape(url)}. Heatmaps: BLOCK_M down, BLOCK_N across, "
        "one panel per warps and stages; grey cells were rejected, labelled with the reason.</p>\n"
        f"{items}\n</body></html>\n")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.dashboard", description="Rebuild every heatmap and roofline from the store.",
        epilog=f"examples:\n  python -m tuner.dashboard\n  python -m tuner.dashboard --storage sqlite:///h200.db "
               f"--out pages --study article\n(default store {DEFAULT_URL})",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", default=DEFAULT_URL, help=f"database URL (default {DEFAULT_URL})")
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help=f"folder for the pages (default {DEFAULT_DIR})")
    parser.add_argument("--study", action="append", help="only this study (repeatable; default every study)")
    parser.add_argument("--shape", action="append", help="heatmaps of this shape only, e.g. \"B4 H8 Nq4096 Nk4096 "
                                                         "D64 bf16\" (repeatable; default every shape)")
    parser.add_argument("--plotlyjs", choices=("directory", "cdn"), default="directory",
                        help="plotly.min.js beside the pages (offline; default) or from plotly's CDN")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        return usage_error(parser, f"--out {str(args.out)!r} is a file; give a folder (it is created if missing)")
    try:
        db = Store(args.storage, create=False)
        present = sorted({r.study for r in db.results()})
    except StoreError as exc:
        return usage_error(parser, f"--storage: {exc}")
    if not present:
        return usage_error(parser, f"{args.storage} has no results; run python -m tuner.sweep first")
    unknown = sorted(set(args.study or []) - set(present))
    if unknown:
        return usage_error(parser, f"--study {unknown[0]!r} is not in the store; it has {', '.join(present)}")
    known = {r.shape for r in db.results() if not args.study or r.study in args.study}
    missing = sorted(set(args.shape or []) - known)
    if missing:
        return usage_error(parser, f"--shape {missing[0]!r} is not in the store; it has {', '.join(sorted(known))}")
    pages = build_all(db, args.out, args.study, args.plotlyjs, args.shape)
    print(f"wrote {len(pages)} pages to {args.out}/ (open {args.out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
