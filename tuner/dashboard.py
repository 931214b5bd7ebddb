"""``python -m tuner.dashboard``: plotly heatmaps and rooflines from the store, offline HTML.

One heatmap page per (study, shape, target, GPU used): BLOCK_M down, BLOCK_N across,
one panel per (num_warps, num_stages). Colour is TFLOP/s, with buttons for % of SDPA
and ms. Rejected configs are grey cells labelled with the reason (over budget with the
bytes, incorrect, compile error, crashed, ...). Hovering a cell shows every stored field.
One roofline page per study places each timed config's TFLOP/s against the compute and
bandwidth ceilings of the GPU that ran it (one column of points per shape: the
intensity of attention does not depend on the config). ``index.html`` links them all. Pages load
``plotly.min.js`` from beside them, so they open without a network.
"""

from __future__ import annotations

import argparse
import html
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

from tuner import store as storage
from tuner.gpus import GpuSpec

DEFAULT_DIR = Path("dashboards")
METRICS = {  # column -> (button label, colour bar title)
    "tflops": ("TFLOP/s", "TFLOP/s"),
    "pct_flash": ("% of SDPA-flash", "% of SDPA-flash (100 = as fast)"),
    "pct_cudnn": ("% of SDPA-cuDNN", "% of SDPA-cuDNN (100 = as fast)"),
    "ms": ("ms", "ms (lower is better)"),
}
SHORT_REASON = {"over_smem": "smem", "over_registers": "regs", "invalid": "invalid", "compile_error": "compile",
                "incorrect": "wrong", "crashed": "crash", "timeout": "hang", "restricted": "excluded",
                "pending": "no GPU"}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def page_name(study: str, shape: str, target: str, gpu: str) -> str:
    """The heatmap file's name (flat, so one plotly.min.js serves every page)."""
    return f"{_slug(study)}__{target}__{_slug(gpu)}__{_slug(shape)}.html"


def _label(row: storage.Result) -> str:
    """What a cell says: its value, or why there is none."""
    if row.status == storage.TIMED:
        return f"{row.tflops:.0f}" if row.tflops else ""
    short = SHORT_REASON.get(row.status, row.status)
    if row.status == "over_smem":
        needed = row.smem_bytes or row.model_smem_bytes
        if needed is None:
            found = re.search(r"needs (\d+) B", row.reason or "")
            needed = int(found.group(1)) if found else None
        return f"smem<br>{needed // 1024}K" if needed else short
    return short


def _hover(row: storage.Result) -> str:
    skip = {"id"}
    fields = [(c.name, getattr(row, c.name)) for c in storage.Result.__table__.columns if c.name not in skip]
    lines = []
    for name, value in fields:
        if value is None or value == "":
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        text = html.escape(str(value))
        if len(text) > 90:
            text = text[:90] + "..."
        lines.append(f"{name}: {text}")
    return "<br>".join(lines)


def heatmap(rows: list[storage.Result]):
    """The heatmap figure for one (study, shape, target, GPU) group of rows."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    block_m = sorted({r.block_m for r in rows})
    block_n = sorted({r.block_n for r in rows})
    warps = sorted({r.num_warps for r in rows})
    stages = sorted({r.num_stages for r in rows})
    cells = {(r.block_m, r.block_n, r.num_warps, r.num_stages): r for r in rows}
    fig = make_subplots(rows=len(warps), cols=len(stages), shared_xaxes=True, shared_yaxes=True,
                        horizontal_spacing=0.012, vertical_spacing=0.03,
                        column_titles=[f"{s} stage{'s' if s > 1 else ''}" for s in stages],
                        row_titles=[f"{w} warp{'s' if w > 1 else ''}" for w in warps])
    timed = [r for r in rows if r.status == storage.TIMED]
    ranges = {m: (min((getattr(r, m) for r in timed if getattr(r, m)), default=0),
                  max((getattr(r, m) for r in timed if getattr(r, m)), default=1)) for m in METRICS}
    z_by_metric: dict[str, list] = {m: [] for m in METRICS}
    for i, w in enumerate(warps, start=1):
        for j, s in enumerate(stages, start=1):
            grid = [[cells.get((bm, bn, w, s)) for bn in block_n] for bm in block_m]
            text = [[_label(c) if c else "" for c in line] for line in grid]
            hover_timed = [[_hover(c) if c is not None and c.status == storage.TIMED else None for c in line]
                           for line in grid]
            hover_rejected = [[_hover(c) if c is not None and c.status != storage.TIMED else None for c in line]
                              for line in grid]
            for metric in METRICS:
                z_by_metric[metric].append([[getattr(c, metric) if c is not None and c.status == storage.TIMED
                                             else None for c in line] for line in grid])
            rejected = [[0 if c is not None and c.status != storage.TIMED else None for c in line] for line in grid]
            axis = dict(row=i, col=j)
            fig.add_trace(go.Heatmap(z=rejected, x=[str(n) for n in block_n], y=[str(m) for m in block_m],
                                     colorscale=[[0, "#d9d9d9"], [1, "#d9d9d9"]], showscale=False, hoverinfo="text",
                                     hovertext=hover_rejected, text=text, texttemplate="%{text}", textfont={"size": 9},
                                     xgap=1, ygap=1, name="rejected"), **axis)
            fig.add_trace(go.Heatmap(z=z_by_metric["tflops"][-1], x=[str(n) for n in block_n],
                                     y=[str(m) for m in block_m], coloraxis="coloraxis", hoverinfo="text",
                                     hovertext=hover_timed, text=text, texttemplate="%{text}", textfont={"size": 9},
                                     xgap=1, ygap=1, name="timed"), **axis)
    for i in range(1, len(warps) + 1):
        fig.update_yaxes(title_text="BLOCK_M" if i == (len(warps) + 1) // 2 else None, row=i, col=1)
    for j in range(1, len(stages) + 1):
        fig.update_xaxes(title_text="BLOCK_N", row=len(warps), col=j)
    timed_traces = [2 * k + 1 for k in range(len(warps) * len(stages))]
    buttons = []
    for metric, (label, title) in METRICS.items():
        low, high = ranges[metric]
        scale = "Viridis_r" if metric == "ms" else "Viridis"
        buttons.append(dict(label=label, method="update", args=[
            {"z": z_by_metric[metric]}, {"coloraxis.colorbar.title.text": title, "coloraxis.cmin": low,
                                         "coloraxis.cmax": high, "coloraxis.colorscale": scale}, timed_traces]))
    first = rows[0]
    best = min(timed, key=lambda r: r.ms) if timed else None
    dates = sorted(r.created_at for r in rows)
    title = (f"<b>{first.study}</b> · {first.shape} · target {first.target} · measured on {first.gpu}<br>"
             f"<sup>torch {first.torch_version}, triton {first.triton_version}, driver {first.driver}; "
             f"{dates[0]:%Y-%m-%d %H:%M} to {dates[-1]:%Y-%m-%d %H:%M} UTC; "
             f"{len(timed)} of {len(rows)} configs timed"
             + (f"; best {best.config}: {best.ms:.4f} ms, {best.tflops:.0f} TFLOP/s, "
                f"{best.pct_flash or 0:.0f}% of SDPA-flash" if best else "") + "</sup>")
    fig.update_layout(title=dict(text=title, x=0.01), height=170 * len(warps) + 160,
                      width=140 * len(stages) + 260, template="plotly_white",
                      coloraxis=dict(colorscale="Viridis", cmin=ranges["tflops"][0], cmax=ranges["tflops"][1],
                                     colorbar=dict(title=dict(text=METRICS["tflops"][1]))),
                      updatemenus=[dict(type="buttons", direction="right", x=0.0, xanchor="left", y=1.0,
                                        yanchor="bottom", pad=dict(b=28), buttons=buttons, showactive=True)],
                      margin=dict(t=150, l=70, r=40, b=60))
    return fig


def compulsory_bytes(row: storage.Result) -> float:
    """Bytes one launch must move to or from HBM: Q, K and V read once, O and lse written once.

    The kernel re-reads K and V once per query tile, but at these sizes the re-reads
    come from L2 (50 MB on an H100/H200), so they do not count against HBM bandwidth;
    counting them would put measured points above the bandwidth roof.
    """
    element = 4 if row.dtype == "fp32" else 2
    per_head = (2 * row.n_q * row.head_dim + 2 * row.n_k * row.head_dim) * element + 4 * row.n_q
    return float(row.batch * row.heads * per_head)


def _gpu_spec(label: str, target: str) -> GpuSpec:
    card = re.sub(r"\(.*\)|nvidia", "", label, flags=re.IGNORECASE).strip()
    try:
        return GpuSpec.from_name(card)
    except ValueError:
        return GpuSpec.from_name(target)


def roofline(rows: list[storage.Result]):
    """Achieved TFLOP/s of every timed config against the ceilings of the GPU that ran them."""
    import plotly.graph_objects as go

    from kernel.bench import attention_flops

    timed = [r for r in rows if r.status == storage.TIMED and r.ms]
    spec = _gpu_spec(timed[0].gpu, timed[0].target)
    fig = go.Figure()
    by_shape = defaultdict(list)
    for row in timed:
        by_shape[row.shape].append(row)
    intensities = []
    for shape, shape_rows in by_shape.items():
        xs, ys, labels = [], [], []
        for row in shape_rows:
            flops = attention_flops(row.batch, row.heads, row.n_q, row.n_k, row.head_dim, row.causal)
            xs.append(flops / compulsory_bytes(row))
            ys.append(row.tflops)
            labels.append(f"{row.config}<br>{row.ms:.4f} ms, {row.tflops:.0f} TFLOP/s<br>{shape}")
        intensities += xs
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=shape, hovertext=labels, hoverinfo="text",
                                 marker=dict(size=6, opacity=0.75)))
    if spec.peak_bf16_tflops and spec.mem_bandwidth_gbs:
        low, high = min(intensities) / 2, max(intensities) * 2
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        roof = [min(spec.peak_bf16_tflops, x * spec.mem_bandwidth_gbs / 1e3) for x in xs]
        fig.add_trace(go.Scatter(x=xs, y=roof, mode="lines", name=f"{spec.card} roof: {spec.peak_bf16_tflops:.0f} "
                                 f"TFLOP/s dense bf16, {spec.mem_bandwidth_gbs / 1e3:.1f} TB/s",
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


def build_all(db: storage.Store, directory: Path = DEFAULT_DIR, studies: list[str] | None = None) -> list[Path]:
    """Every heatmap and roofline in the store (or of ``studies``), plus ``index.html``.

    Returns:
        The pages written.
    """
    rows = [r for r in db.results() if not studies or r.study in studies]
    groups: dict[tuple, list[storage.Result]] = defaultdict(list)
    for row in rows:
        groups[(row.study, row.target, row.gpu, row.shape)].append(row)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    index: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for (study, target, gpu, shape), group in sorted(groups.items()):
        name = page_name(study, shape, target, gpu)
        heatmap(group).write_html(directory / name, include_plotlyjs="directory", full_html=True)
        written.append(directory / name)
        index[study].append((name, f"{shape} · target {target} · {gpu}"))
    by_study: dict[tuple, list[storage.Result]] = defaultdict(list)
    for row in rows:
        if row.status == storage.TIMED:
            by_study[(row.study, row.target, row.gpu)].append(row)
    for (study, target, gpu), group in sorted(by_study.items()):
        name = f"{_slug(study)}__{target}__{_slug(gpu)}__roofline.html"
        roofline(group).write_html(directory / name, include_plotlyjs="directory", full_html=True)
        written.append(directory / name)
        index[study].insert(0, (name, f"roofline · target {target} · {gpu}"))
    items = "\n".join(
        f"<h2>{html.escape(study)}</h2>\n<ul>\n" + "\n".join(
            f'  <li><a href="{html.escape(name)}">{html.escape(label)}</a></li>' for name, label in pages) + "\n</ul>"
        for study, pages in sorted(index.items()))
    (directory / "index.html").write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>fa2-tuner dashboards</title></head>\n<body>\n"
        f"<h1>fa2-tuner dashboards</h1>\n<p>From {html.escape(db.url)}. Heatmaps: BLOCK_M down, BLOCK_N across, "
        "one panel per warps and stages; grey cells were rejected, labelled with the reason.</p>\n"
        f"{items}\n</body></html>\n")
    written.append(directory / "index.html")
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.dashboard", description="Rebuild every heatmap and roofline from the store.",
        epilog="examples:\n  python -m tuner.dashboard\n  python -m tuner.dashboard --storage sqlite:///studies/h200.db "
               "--out dashboards", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", default=storage.DEFAULT_URL, help=f"database URL (default {storage.DEFAULT_URL})")
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help="directory for the pages (default dashboards)")
    parser.add_argument("--study", action="append", help="only this study (repeatable; default every study)")
    args = parser.parse_args(argv)
    db = storage.Store(args.storage)
    present = sorted({r.study for r in db.results()})
    if not present:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {args.storage} has no results; run python -m tuner.sweep first", file=sys.stderr)
        return 2
    unknown = sorted(set(args.study or []) - set(present))
    if unknown:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: --study {unknown[0]!r} is not in the store; it has {', '.join(present)}",
              file=sys.stderr)
        return 2
    pages = build_all(db, args.out, args.study)
    print(f"wrote {len(pages)} pages to {args.out}/ (open {args.out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
