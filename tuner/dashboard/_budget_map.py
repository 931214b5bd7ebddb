"""The heatmap page of a budget-only run (no GPU timed anything): what the budget stage knows.

Configs that fit the target are coloured by the shared memory they use against its limit per
block, with buttons for registers per thread and spilled bytes; rejected configs are grey with
their reason, as on a timed page. The title counts the configs that fit and says to time them
on a GPU; a legend under the panels says what each colour means, and a link goes back to the
index. Pages of timed rows are :mod:`tuner.dashboard._heatmap`'s, unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
import shlex

from tuner.dashboard._heatmap import (
    HOVER_TEMPLATE,
    _variant_menu,
    cell_label,
    drawn_variants,
    hover_fields,
    knob_variant,
)
from tuner.status import Status
from tuner.store import Result

FITS = (Status.PENDING, Status.FITS, Status.SPILLS)
# The store the pages are drawn from (:func:`drawn_from`): a title's fallback command stores into it.
STORAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("fa2_tuner_dashboard_storage", default=None)
# ColorBrewer's Blues, Oranges and Reds without their near-white ends, so that no fitting cell looks like
# the grey of a rejected one.
BLUES = [[0, "#c6dbef"], [0.33, "#6baed6"], [0.67, "#2171b5"], [1, "#08306b"]]
ORANGES = [[0, "#fdd0a2"], [0.33, "#fd8d3c"], [0.67, "#d94801"], [1, "#7f2704"]]
REDS = [[0, "#fcbba1"], [0.33, "#fb6a4a"], [0.67, "#cb181d"], [1, "#67000d"]]
# Colour of the configs that fit: (button label, colour bar title, colour scale, cell label).
BUDGET_METRICS = {
    "smem_pct": ("shared memory", "shared memory used,<br>% of the target's limit", BLUES,
                 lambda r: f"{(r.smem_bytes or r.model_smem_bytes or 0) // 1024}K"),
    "registers": ("registers", "registers per thread", ORANGES,
                  lambda r: f"{r.registers or 0}"),
    "spill_bytes": ("spills", "bytes spilled per thread<br>(0: none)", REDS,
                    lambda r: f"{r.spill_bytes or 0}"),
}
CELL_PX = 46           # wide enough for a 7-letter reason at 9 px, so labels never run into the next cell
LEGEND = ("<b>Colour</b>: fits {target} (no GPU timed it): shared memory used against {target}'s limit per "
          "block; the buttons colour registers per thread or spilled bytes instead. <b>Grey</b>: rejected "
          "before any GPU, labelled why: smem = over shared memory (KB needed), regs = over registers, "
          "n/a = a knob {target} or this Triton lacks, invalid, compile = the compiler refused, "
          "excluded = outside the study's restrictions.")


def is_budget_only(rows: list[Result]) -> bool:
    """A page's rows hold no timing: a budget-only run (``python -m tuner.sweep`` without a GPU)."""
    return not any(r.status == Status.TIMED for r in rows)


def budget_value(row: Result, metric: str):
    """The colour of a fitting config for ``metric``; None for a rejected one."""
    if row.status not in FITS:
        return None
    if metric == "smem_pct":
        used, limit = row.smem_bytes or row.model_smem_bytes, row.smem_limit_bytes
        return round(100 * used / limit, 1) if used is not None and limit else None
    value = getattr(row, metric)
    return 0 if value is None and metric == "spill_bytes" else value


def _panel(go, cells: dict, warps: int, stages: int, block_m: list, block_n: list):
    """One warps x stages panel: the grey trace (rejected), the coloured one (fits), and the
    coloured trace's z and labels for each metric."""
    grid = [[cells.get((bm, bn, warps, stages)) for bn in block_n] for bm in block_m]

    def per_cell(keep, make, empty):
        return [[make(c) if c is not None and keep(c) else empty for c in line] for line in grid]

    def fits(c):
        return c.status in FITS

    def rejected(c):
        return c.status not in FITS

    z = {m: per_cell(fits, lambda c, m=m: budget_value(c, m), None) for m in BUDGET_METRICS}
    text = {m: per_cell(fits, spec[3], "") for m, spec in BUDGET_METRICS.items()}
    common = dict(x=[str(n) for n in block_n], y=[str(m) for m in block_m], texttemplate="%{text}",
                  textfont={"size": 9}, xgap=1, ygap=1, hoverongaps=False, hovertemplate=HOVER_TEMPLATE)
    grey = go.Heatmap(z=per_cell(rejected, lambda c: 0, None), text=per_cell(rejected, cell_label, ""),
                      customdata=per_cell(rejected, hover_fields, 0), colorscale=[[0, "#d9d9d9"], [1, "#d9d9d9"]],
                      showscale=False, name="rejected", **common)
    coloured = go.Heatmap(z=z["smem_pct"], text=text["smem_pct"], customdata=per_cell(fits, hover_fields, 0),
                          coloraxis="coloraxis", name="fits", **common)
    return grey, coloured, z, text


def _metric_buttons(z_by_metric: dict, text_by_metric: dict, coloured_traces: list[int], ranges: dict) -> dict:
    buttons = [dict(label=label, method="update", args=[
        {"z": z_by_metric[metric], "text": text_by_metric[metric]},
        {"coloraxis.colorbar.title.text": title, "coloraxis.colorscale": scale,
         "coloraxis.cmin": ranges[metric][0], "coloraxis.cmax": ranges[metric][1]}, coloured_traces])
        for metric, (label, title, scale, _) in BUDGET_METRICS.items()]
    return dict(type="buttons", direction="right", x=0.0, xanchor="left", y=1.0, yanchor="bottom", pad=dict(b=34),
                buttons=buttons, showactive=True)


def budget_heatmap(rows: list[Result], command: str = ""):
    """The figure of one (study, shape, target) group of rows that no GPU timed; ``command``, the sweep's that
    stored them, is what its title says to run on a machine with the GPU."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    block_m, block_n = sorted({r.block_m for r in rows}), sorted({r.block_n for r in rows})
    warps, stages = sorted({r.num_warps for r in rows}), sorted({r.num_stages for r in rows})
    of_row = {id(r): knob_variant(r) for r in rows}
    variants, total = drawn_variants(rows, of_row)
    fitting = {v: sum(1 for r in rows if of_row[id(r)] == v and r.status in FITS) for v in variants}
    shown = max(variants, key=lambda v: (fitting[v], v == "plain"))
    fig = make_subplots(rows=len(warps), cols=len(stages), shared_xaxes=True, shared_yaxes=True,
                        horizontal_spacing=0.012, vertical_spacing=0.03,
                        column_titles=[f"{s} stage{'s' if s > 1 else ''}" for s in stages],
                        row_titles=[f"{w} warp{'s' if w > 1 else ''}" for w in warps])
    z_by_metric: dict[str, list] = {m: [] for m in BUDGET_METRICS}
    text_by_metric: dict[str, list] = {m: [] for m in BUDGET_METRICS}
    for variant in variants:
        cells = {(r.block_m, r.block_n, r.num_warps, r.num_stages): r for r in rows if of_row[id(r)] == variant}
        for i, w in enumerate(warps, start=1):
            for j, s in enumerate(stages, start=1):
                grey, coloured, z, text = _panel(go, cells, w, s, block_m, block_n)
                grey.visible = coloured.visible = variant == shown
                fig.add_trace(grey, row=i, col=j)
                fig.add_trace(coloured, row=i, col=j)
                for metric in BUDGET_METRICS:
                    z_by_metric[metric].append(z[metric])
                    text_by_metric[metric].append(text[metric])
    for i in range(1, len(warps) + 1):
        fig.update_yaxes(title_text="BLOCK_M" if i == (len(warps) + 1) // 2 else None, row=i, col=1)
    for j in range(1, len(stages) + 1):
        fig.update_xaxes(title_text="BLOCK_N", row=len(warps), col=j)
    values = {m: [v for r in rows if (v := budget_value(r, m)) is not None] for m in BUDGET_METRICS}
    ranges = {m: (min(v, default=0), max(max(v, default=1), min(v, default=0) + 1)) for m, v in values.items()}
    ranges["smem_pct"] = (0, 100)           # against the limit: a full block is the darkest
    coloured_traces = [2 * k + 1 for k in range(len(variants) * len(warps) * len(stages))]
    menus = [_metric_buttons(z_by_metric, text_by_metric, coloured_traces, ranges)]
    if len(variants) > 1:
        menus.append(_variant_menu(variants, shown, 2 * len(warps) * len(stages)) | dict(pad=dict(b=34)))
    target = rows[0].target
    width = max(CELL_PX * len(block_n) * len(stages) + 300, 1000 if len(variants) > 1 else 900)
    fig.update_layout(
        title=dict(text=_title(rows, variants, total, command), x=0.01, y=0.99, yref="container", yanchor="top"),
        height=170 * len(warps) + 300, width=width, template="plotly_white",
        coloraxis=dict(colorscale=BUDGET_METRICS["smem_pct"][2], cmin=ranges["smem_pct"][0],
                       cmax=ranges["smem_pct"][1], colorbar=dict(title=dict(text=BUDGET_METRICS["smem_pct"][1]))),
        updatemenus=menus, margin=dict(t=190, l=70, r=40, b=130),
        annotations=list(fig.layout.annotations) + [dict(
            text=_wrapped(LEGEND.format(target=target), width // 7), showarrow=False, xref="paper", yref="paper",
            x=0.0, y=-0.06, xanchor="left", yanchor="top", align="left", font=dict(size=11))])
    return fig


def _wrapped(text: str, columns: int) -> str:
    """``text`` broken into lines of at most ``columns`` characters (plotly does not wrap)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > columns:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "<br>".join(lines + [line])


@contextlib.contextmanager
def drawn_from(url: str):
    """Pages drawn in the block come from the store at ``url``: a budget-only page whose run is not in the store
    names it (``--storage``) in the command its title gives (:func:`fallback_command`)."""
    token = STORAGE.set(url)
    try:
        yield
    finally:
        STORAGE.reset(token)


def fallback_command(first: Result) -> str:
    """The sweep that times a study's rows on a GPU, into the store they were read from, where the rows' own
    run (its stored command) is not in the store."""
    storage = STORAGE.get()
    return (f"python -m tuner.sweep --study {shlex.quote(first.study)} --gpu {first.target}"
            + (f" --storage {shlex.quote(storage)}" if storage else ""))


def _title(rows: list[Result], variants: list[str], total: int, command: str) -> str:
    first = rows[0]
    command = command or fallback_command(first)
    fit = sum(1 for r in rows if r.status in FITS)
    dates = sorted(r.created_at for r in rows)
    drawn = (f"; {len(variants)} of {total} knob variants drawn, those where the most fit" if total > len(variants)
             else "")
    return (f"<b>{first.study}</b> · {first.shape} · target {first.target} · budget only, no GPU timings"
            f"<br><b>{fit} of {len(rows)} configs fit {first.target}; time them on a GPU</b> "
            f"(on a machine with one: {html.escape(command)})"
            f"<br><sup>torch {first.torch_version}, triton {first.triton_version}; {dates[0]:%Y-%m-%d %H:%M} UTC"
            f"{drawn} · <a href=\"index.html\">← every page (index)</a></sup>")
