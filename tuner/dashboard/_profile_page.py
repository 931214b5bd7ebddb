"""The profile page of one (study, shape, target, GPU used): our finalists beside SDPA's flash
and cuDNN backends, counter by counter, with a table of the rest and a verdict per kernel."""

from __future__ import annotations

import html

from tuner.counters import display_order, kernel_label, stalls_of, verdict
from tuner.dashboard._heatmap import _num
from tuner.store import Profile

# (column, axis label): percentages of peak, on one axis
PERCENTS = (("tensor_pct", "tensor pipe active"), ("sm_pct", "SM throughput"),
            ("warps_active_pct", "warps active (occupancy)"), ("dram_pct", "DRAM throughput"),
            ("l2_hit_pct", "L2 hit rate"))
COLOURS = {"sdpa_flash": "#8c8c8c", "sdpa_cudnn": "#4d4d4d"}


def profile_page_name(study_slug: str, target: str, gpu_slug: str, shape_slug: str) -> str:
    return f"{study_slug}__{target}__{gpu_slug}__{shape_slug}__profile.html"


def _table_values(rows: list[Profile], cudnn: Profile | None) -> list[list[str]]:
    columns = [
        [kernel_label(r) for r in rows],
        [_num(r.duration_us, ".1f") for r in rows],
        [f"{_num(r.dram_read_bytes and r.dram_read_bytes / 1e6, '.1f')} / "
         f"{_num(r.dram_write_bytes and r.dram_write_bytes / 1e6, '.1f')}" if r.status == "ok" else "" for r in rows],
        [f"{_num(r.registers, 'd')} / {_num(r.smem_bytes and r.smem_bytes / 1024, '.0f')} KB" if r.status == "ok"
         else "" for r in rows],
        [f"{_num(r.grid_size, 'd')} x {_num(r.block_size, 'd')}" if r.status == "ok" else "" for r in rows],
        [", ".join(f"{n} {v:.2f}" for n, v in stalls_of(r)) for r in rows],
        [html.escape(verdict(r, cudnn if r.kind != "sdpa_cudnn" else None)) for r in rows],
    ]
    return columns


def profile_page(rows: list[Profile]):
    """The figure for one shape's profiles (all of one study, target and GPU)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = sorted(rows, key=display_order)
    ok = [r for r in rows if r.status == "ok"]
    cudnn = next((r for r in ok if r.kind == "sdpa_cudnn"), None)
    table_px = 110 + 72 * len(rows)          # a verdict wraps to about three lines
    fig = make_subplots(rows=2, cols=1, row_heights=[430 / (430 + table_px), table_px / (430 + table_px)],
                        vertical_spacing=0.06,
                        specs=[[{"type": "xy"}], [{"type": "table"}]])
    for row in ok:
        fig.add_trace(go.Bar(x=[label for _, label in PERCENTS], y=[getattr(row, c) for c, _ in PERCENTS],
                             name=kernel_label(row), marker_color=COLOURS.get(row.kind),
                             hovertemplate="%{x}: %{y:.1f}%<extra>" + html.escape(kernel_label(row)) + "</extra>"),
                      row=1, col=1)
    fig.add_trace(go.Table(
        header=dict(values=["kernel", "µs (ncu)", "DRAM MB read / written", "registers / smem", "grid x block",
                            "top stalls (warps per issue)", "verdict"], align="left"),
        cells=dict(values=_table_values(rows, cudnn), align="left", height=24),
        columnwidth=[95, 45, 70, 70, 60, 150, 330]), row=2, col=1)
    first = rows[0]
    fig.update_yaxes(title_text="% of peak", range=[0, 100], row=1, col=1)
    fig.update_layout(
        barmode="group", template="plotly_white", height=640 + table_px, width=1250, margin=dict(t=110),
        title=dict(x=0.01, text=f"<b>{html.escape(first.study)}</b> profile · {html.escape(first.shape)} · target "
                                f"{first.target} · {html.escape(first.gpu)}<br><sup>Nsight Compute {first.ncu_version}"
                                f", one launch each after a warm-up, clocks not locked; torch {first.torch_version}, "
                                f"triton {first.triton_version}, driver {first.driver}; "
                                f"{first.created_at:%Y-%m-%d %H:%M} UTC</sup>"))
    return fig
