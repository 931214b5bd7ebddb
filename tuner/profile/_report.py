"""The counters of a profile run as a Markdown table, with the verdict lines under it."""

from __future__ import annotations

from tuner.counters import display_order, kernel_label, stalls_of
from tuner.profile._run import verdict_lines
from tuner.store import Profile

HEADER = ("kernel", "µs (ncu)", "tensor pipe %", "SM %", "warps active %", "DRAM %", "DRAM MB read / written",
          "L2 hit %", "registers", "smem KB", "grid x block", "SM MHz", "top stalls (warps per issue)")


def _cells(row: Profile) -> list[str]:
    name = kernel_label(row)
    if row.status != "ok":
        return [name, f"failed: {row.reason}"] + [""] * (len(HEADER) - 2)
    return [name, f"{row.duration_us:.1f}", f"{row.tensor_pct:.1f}", f"{row.sm_pct:.1f}",
            f"{row.warps_active_pct:.1f}", f"{row.dram_pct:.1f}",
            f"{row.dram_read_bytes / 1e6:.1f} / {row.dram_write_bytes / 1e6:.1f}", f"{row.l2_hit_pct:.1f}",
            str(row.registers), f"{row.smem_bytes / 1024:.0f}", f"{row.grid_size} x {row.block_size}",
            f"{row.sm_clock_mhz:.0f}", ", ".join(f"{name} {value:.2f}" for name, value in stalls_of(row))]


def markdown(rows: list[Profile]) -> str:
    """One table per shape, then every verdict line."""
    parts = []
    for shape in dict.fromkeys(r.shape for r in rows):
        parts += [f"### {shape}", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        of_shape = sorted((r for r in rows if r.shape == shape), key=display_order)
        parts += ["| " + " | ".join(_cells(r)) + " |" for r in of_shape]
        parts.append("")
    parts += ["Verdicts:", "", "```", *verdict_lines(rows), "```", ""]
    return "\n".join(parts)
