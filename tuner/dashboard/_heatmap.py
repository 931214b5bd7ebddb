"""The heatmap page of one (study, shape, target, GPU used): BLOCK_M down, BLOCK_N across,
one panel per (num_warps, num_stages), rejected configs grey with their reason; a selector
over the config's variants (the knobs set, :attr:`tuner.space.KernelConfig.variant`) where
the rows hold several, and a title that names the shape's winner (:mod:`tuner.winners`).
Every kernel's config has these four tile axes; the rest is read from the key, through the
row's kernel."""

from __future__ import annotations

import html
import re

from tuner import kernels
from tuner.finalists import ShapeVerdict
from tuner.status import Status
from tuner.store import Result
from tuner.winners import winner

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


def knob_variant(row: Result) -> str:
    """The knobs a row's config sets, as its heatmap selector names them ("plain": none)."""
    return kernels.get(row.kernel, row.pass_).config_type.parse(row.config).variant


# Variants a page draws at most (each is a full set of panels); a space with more (the backward's
# dQ pass tiles and knobs: hundreds) keeps those with the fastest timed configs, else the most
# that fit, and says so in the title.
MAX_VARIANTS = 16


def drawn_variants(rows: list[Result], of_row: dict[int, str]) -> tuple[list[str], int]:
    """(the variants drawn, how many there are), the drawn ones by their fastest timed config, then
    by how many of their configs fit (a budget-only run), plain first among equals."""
    best: dict[str, float] = {}
    fitting: dict[str, int] = {}
    for row in rows:
        variant = of_row[id(row)]
        best.setdefault(variant, 0.0)
        fitting[variant] = fitting.get(variant, 0) + (row.status in (Status.TIMED, Status.PENDING))
        if row.status == Status.TIMED:
            best[variant] = max(best[variant], row.tflops or 0.0)
    ranked = sorted(best, key=lambda v: (-best[v], -fitting[v], v != "plain", v))
    return sorted(ranked[:MAX_VARIANTS], key=lambda v: (v != "plain", v)), len(ranked)


def _variant_menu(variants: list[str], shown: str, traces_per_variant: int) -> dict:
    """A dropdown that shows one knob variant's panels at a time."""
    buttons = []
    for variant in variants:
        visible = [v == variant for v in variants for _ in range(traces_per_variant)]
        buttons.append(dict(label=variant, method="restyle", args=[{"visible": visible}]))
    return dict(type="dropdown", x=1.0, xanchor="right", y=1.0, yanchor="bottom", pad=dict(b=28),
                buttons=buttons, active=variants.index(shown), showactive=True)


def heatmap(rows: list[Result], verdict: ShapeVerdict | None = None):
    """The heatmap figure for one (study, shape, target, GPU) group of rows: panels per
    (warps, stages), and with knobs in the space a selector over knob variants (TMA,
    persistent grid, ...), opened on the variant of the fastest config. ``verdict``: the
    shape's re-timed finalists, whose winner the title names."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    block_m, block_n = sorted({r.block_m for r in rows}), sorted({r.block_n for r in rows})
    warps, stages = sorted({r.num_warps for r in rows}), sorted({r.num_stages for r in rows})
    timed_rows = [r for r in rows if r.status == Status.TIMED]
    of_row = {id(r): knob_variant(r) for r in rows}          # parsed once per row, not once per variant
    variants, total = drawn_variants(rows, of_row)
    best = max(timed_rows, key=lambda r: r.tflops or 0, default=None)
    shown = of_row[id(best)] if best else variants[0]
    fig = make_subplots(rows=len(warps), cols=len(stages), shared_xaxes=True, shared_yaxes=True,
                        horizontal_spacing=0.012, vertical_spacing=0.03,
                        column_titles=[f"{s} stage{'s' if s > 1 else ''}" for s in stages],
                        row_titles=[f"{w} warp{'s' if w > 1 else ''}" for w in warps])
    z_by_metric: dict[str, list] = {m: [] for m in METRICS}
    by_variant: dict[str, list[Result]] = {}
    for r in rows:
        by_variant.setdefault(of_row[id(r)], []).append(r)
    for variant in variants:
        cells = {(r.block_m, r.block_n, r.num_warps, r.num_stages): r for r in by_variant[variant]}
        for i, w in enumerate(warps, start=1):
            for j, s in enumerate(stages, start=1):
                grey, timed, z = _panel_traces(go, cells, w, s, block_m, block_n)
                grey.visible = timed.visible = variant == shown
                fig.add_trace(grey, row=i, col=j)
                fig.add_trace(timed, row=i, col=j)
                for metric in METRICS:
                    z_by_metric[metric].append(z[metric])
    for i in range(1, len(warps) + 1):
        fig.update_yaxes(title_text="BLOCK_M" if i == (len(warps) + 1) // 2 else None, row=i, col=1)
    for j in range(1, len(stages) + 1):
        fig.update_xaxes(title_text="BLOCK_N", row=len(warps), col=j)
    ranges = {m: (min((getattr(r, m) for r in timed_rows if getattr(r, m)), default=0),
                  max((getattr(r, m) for r in timed_rows if getattr(r, m)), default=1)) for m in METRICS}
    timed_traces = [2 * k + 1 for k in range(len(variants) * len(warps) * len(stages))]
    buttons = [dict(label=label, method="update", args=[
        {"z": z_by_metric[metric]},
        {"coloraxis.colorbar.title.text": title, "coloraxis.cmin": ranges[metric][0],
         "coloraxis.cmax": ranges[metric][1],
         "coloraxis.colorscale": "Viridis_r" if metric in LOWER_IS_BETTER else "Viridis"}, timed_traces])
        for metric, (label, title) in METRICS.items()]
    menus = [dict(type="buttons", direction="right", x=0.0, xanchor="left", y=1.0, yanchor="bottom", pad=dict(b=28),
                  buttons=buttons, showactive=True)]
    if len(variants) > 1:
        menus.append(_variant_menu(variants, shown, 2 * len(warps) * len(stages)))
    title = _title(rows, timed_rows, verdict)
    if total > len(variants):
        title += (f"<br><sup>{len(variants)} of {total} variants drawn: those with the fastest timed configs, "
                  f"else the most that fit</sup>")
    fig.update_layout(title=dict(text=title, x=0.01), height=170 * len(warps) + 160,
                      width=max(140 * len(stages) + 260, 900 if len(variants) > 1 else 0), template="plotly_white",
                      coloraxis=dict(colorscale="Viridis", cmin=ranges["tflops"][0], cmax=ranges["tflops"][1],
                                     colorbar=dict(title=dict(text=METRICS["tflops"][1]))),
                      updatemenus=menus, margin=dict(t=150, l=70, r=40, b=60))
    return fig



def _title(rows: list[Result], timed: list[Result], verdict: ShapeVerdict | None = None) -> str:
    first = rows[0]
    key = winner(rows, first.shape, verdict)
    best = next((r for r in timed if r.config == key), None)
    dates = sorted(r.created_at for r in rows)
    return (f"<b>{first.study}</b> · {first.shape} · target {first.target} · measured on {first.gpu}<br>"
            f"<sup>torch {first.torch_version}, triton {first.triton_version}, driver {first.driver}; "
            f"{dates[0]:%Y-%m-%d %H:%M} to {dates[-1]:%Y-%m-%d %H:%M} UTC; {len(timed)} of {len(rows)} configs timed"
            + (_best(best, verdict) if best else "") + "</sup>")


def _best(best: Result, verdict: ShapeVerdict | None) -> str:
    """The winner's figures, as the summary gives them: re-timed, against SDPA from the same rounds."""
    if verdict is None:
        return (f"; best {best.config}: {best.ms:.4f} ms, {best.tflops:.0f} TFLOP/s, "
                f"{best.pct_flash or 0:.0f}% of SDPA-flash")
    ms = verdict.winner.median
    flash, _ = verdict.sdpa_ms(best)
    return (f"; best {best.config} (finalists re-timed): {ms:.4f} ms, {best.tflops * best.ms / ms:.0f} TFLOP/s, "
            f"{100 * (flash or 0) / ms:.0f}% of SDPA-flash")
