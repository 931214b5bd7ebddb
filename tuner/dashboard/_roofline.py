"""The roofline page of one (study, target, GPU used): every timed config's TFLOP/s against
the ceilings of the GPU that ran it, at its compulsory bytes, and each profiled kernel at
the DRAM bytes Nsight Compute measured."""

from __future__ import annotations

import html
import re
from collections import defaultdict

from tuner import kernels
from tuner.counters import verdict
from tuner.gpus import GpuSpec
from tuner.problem import Problem
from tuner.status import Status
from tuner.store import Profile, Result


def problem_of(row: Result) -> Problem:
    return Problem(row.batch, row.heads, row.n_q, row.n_k, row.head_dim, row.dtype, row.causal)


def intensity(row: Result) -> float:
    """FLOPs per compulsory byte of a row's launch (its kernel's ``flops`` and ``compulsory_bytes``)."""
    kernel, problem = kernels.get(row.kernel, row.pass_), problem_of(row)
    return kernel.flops(problem) / kernel.compulsory_bytes(problem)


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


PROFILE_MARKERS = {"ours": ("diamond", "our finalists"), "sdpa_flash": ("square", "SDPA-flash"),
                   "sdpa_cudnn": ("star", "SDPA-cuDNN")}


def profiled_point(row: Profile) -> tuple[float, float]:
    """(FLOP per measured DRAM byte, TFLOP/s over the profiled launch) of an "ok" profile."""
    flops = kernels.get(row.kernel, row.pass_).flops(Problem.from_label(row.shape))
    return flops / (row.dram_read_bytes + row.dram_write_bytes), flops / (row.duration_us * 1e-6) / 1e12


def _profiled_traces(go, profiles: list[Profile]) -> tuple[list, list[float]]:
    """One trace per kind of profiled kernel, placed at its measured DRAM bytes."""
    traces, intensities = [], []
    ok = [p for p in profiles if p.status == "ok" and p.dram_read_bytes is not None]
    cudnn = {p.shape: p for p in ok if p.kind == "sdpa_cudnn"}
    for kind, (symbol, name) in PROFILE_MARKERS.items():
        of_kind = [p for p in ok if p.kind == kind]
        if not of_kind:
            continue
        points = [profiled_point(p) for p in of_kind]
        intensities += [x for x, _ in points]
        hover = [[p.shape, p.config or name, f"{p.duration_us:.1f}",
                  f"{(p.dram_read_bytes + p.dram_write_bytes) / 1e6:.1f}",
                  html.escape(verdict(p, cudnn.get(p.shape) if kind != "sdpa_cudnn" else None))] for p in of_kind]
        traces.append(go.Scatter(
            x=[x for x, _ in points], y=[y for _, y in points], mode="markers",
            name=f"profiled: {name} (measured bytes)",
            customdata=hover, marker=dict(size=13, symbol=symbol, line=dict(width=1, color="black")),
            hovertemplate="%{customdata[0]} · %{customdata[1]}<br>%{customdata[2]} µs under ncu, %{y:.0f} TFLOP/s, "
                          "%{customdata[3]} MB DRAM<br>%{customdata[4]}<extra></extra>"))
    return traces, intensities


def roofline(rows: list[Result], profiles: list[Profile] = ()):
    """Achieved TFLOP/s of every timed config against the ceilings of the GPU that ran them
    (at compulsory bytes), and each profiled kernel at the DRAM bytes ncu measured."""
    import plotly.graph_objects as go

    timed = [r for r in rows if r.status == Status.TIMED and r.ms]
    spec = gpu_spec_of(timed[0].gpu, timed[0].target)
    fig = go.Figure()
    by_shape = defaultdict(list)
    for row in timed:
        by_shape[row.shape].append(row)
    intensities = []
    for shape, shape_rows in by_shape.items():
        xs = [intensity(r) for r in shape_rows]
        intensities += xs
        fig.add_trace(go.Scatter(x=xs, y=[r.tflops for r in shape_rows], mode="markers", name=shape,
                                 customdata=[[r.config, f"{r.ms:.4f}"] for r in shape_rows],
                                 hovertemplate="%{customdata[0]}<br>%{customdata[1]} ms, %{y:.0f} TFLOP/s"
                                               f"<extra>{html.escape(shape)}</extra>",
                                 marker=dict(size=6, opacity=0.75)))
    measured, measured_x = _profiled_traces(go, list(profiles))
    for trace in measured:
        fig.add_trace(trace)
    intensities += measured_x
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
                        f"torch {first.torch_version}, triton {first.triton_version}, driver {first.driver}<br>"
                        f"intensity = attention FLOPs / compulsory bytes (Q, K, V read and O written once), "
                        f"or for profiled kernels / the DRAM bytes ncu measured in one launch (at the time ncu "
                        f"measured)<br>"
                        f"ceilings from tuner.gpus ({html.escape(spec.source)})</sup>", x=0.01),
        xaxis=dict(type="log", title="arithmetic intensity (FLOP/byte)"),
        yaxis=dict(type="log", title="achieved TFLOP/s"), template="plotly_white", height=650, width=1100,
        margin=dict(t=130))
    return fig
