"""What Nsight Compute's counters say about one profiled kernel: its label, its stalls, what
bounds it, and one line of verdict against the reference (cuDNN).

Pure functions over stored profiles (:class:`tuner.store.Profile`), below both readers:
:mod:`tuner.profile` prints the lines, :mod:`tuner.dashboard` draws them.
"""

from __future__ import annotations

import json

__all__ = ["KIND_LABELS", "bound", "display_order", "kernel_label", "stalls_of", "verdict"]

KIND_LABELS = {"ours": "ours", "sdpa_flash": "SDPA-flash", "sdpa_cudnn": "SDPA-cuDNN"}   # also the display order
MEMORY_BOUND_DRAM_PCT = 60.0      # DRAM this busy: bandwidth is the limit
COMPUTE_BOUND_TENSOR_PCT = 60.0   # tensor pipe this busy: math is the limit (FA3 reaches ~75% on H100)


def kernel_label(row) -> str:
    """How pages and tables name a profiled kernel: ``#1 128x64_w8_s3``, ``SDPA-cuDNN``."""
    return f"#{row.rank} {row.config}" if row.kind == "ours" else KIND_LABELS.get(row.kind, row.kind)


def display_order(row) -> tuple[int, int]:
    """Sort key: our configs by rank, then SDPA-flash, then SDPA-cuDNN."""
    order = list(KIND_LABELS)
    return (order.index(row.kind) if row.kind in order else len(order), row.rank or 0)


def stalls_of(row) -> list[tuple[str, float]]:
    """The row's stored top stall reasons, ``[(reason, warps stalled per issue), ...]``."""
    return [(str(name), float(value)) for name, value in json.loads(row.stalls or "[]")]


def bound(row) -> str:
    """What limits the kernel: memory-bound, compute-bound or latency-bound."""
    if (row.dram_pct or 0) >= MEMORY_BOUND_DRAM_PCT:
        return "memory-bound"
    if (row.tensor_pct or 0) >= COMPUTE_BOUND_TENSOR_PCT:
        return "compute-bound"
    return "latency-bound"


def verdict(row, reference=None) -> str:
    """e.g. "tensor pipe 46% of peak, warps active 24%, DRAM 4%; top stalls wait 1.48,
    barrier 1.13: latency-bound; cuDNN: tensor pipe 71%, 0.80x our time".

    Args:
        row: a profile with status "ok" (a :class:`tuner.store.Profile`).
        reference: the same shape's cuDNN profile, if any (compared only when ``row`` is another kernel).
    """
    if row.status != "ok":
        return f"not profiled: {row.reason}"
    occupancy = f"warps active {row.warps_active_pct:.0f}%"
    stalls = ", ".join(f"{name} {value:.2f}" for name, value in stalls_of(row))
    line = (f"tensor pipe {row.tensor_pct:.0f}% of peak, {occupancy}, DRAM {row.dram_pct:.0f}%"
            + (f"; top stalls {stalls}" if stalls else "") + f": {bound(row)}")
    if reference is not None and reference is not row and getattr(reference, "status", None) == "ok":
        line += (f"; cuDNN: tensor pipe {reference.tensor_pct:.0f}%, warps active {reference.warps_active_pct:.0f}%, "
                 f"{reference.duration_us / row.duration_us:.2f}x our time")
    return line
