"""The fixed metric set, and reading it out of ``ncu --csv --page raw`` output.

Names were checked against Nsight Compute 2025.3.1 on an H200 (``ncu --query-metrics
--chip gh100``). ``sm__pipe_tensor_op_hmma_cycles_active`` counts HMMA *and* Hopper's
HGMMA, so it measures the tensor pipe for mma.sync and wgmma kernels alike.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

# field -> ncu metric; every one must be in the output, or the profile is refused
METRICS = {
    "duration_us": "gpu__time_duration.sum",
    "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "warps_active_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
    "smem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "smem_static_bytes": "launch__shared_mem_per_block_static",
    "grid_size": "launch__grid_size",
    "block_size": "launch__block_size",
    "sm_clock_mhz": "sm__cycles_elapsed.avg.per_second",
}
# One metric per stall reason: warps stalled on it per issued instruction (ncu's "warp state").
STALL_PATTERN = r"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
NOT_A_STALL = {"selected"}          # the warp issued: that is work, not waiting
# Units ncu writes, to the unit a field is stored in.
_SCALE = {
    "duration_us": {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6},
    "sm_clock_mhz": {"hz": 1e-6, "cycle/second": 1e-6, "cycle/nsecond": 1e3, "khz": 1e-3, "mhz": 1.0, "ghz": 1e3,
                     "cycle/usecond": 1.0},
    "bytes": {"byte": 1.0, "byte/block": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "b": 1.0},
}


class ProfileError(RuntimeError):
    """A profile could not be taken; the message says why and, where it can, what to do."""


class NcuOutputError(ProfileError):
    """ncu's output cannot be read as a profile; the message says what is missing."""


@dataclass(frozen=True)
class KernelCounters:
    """One profiled kernel launch: its name and the fixed metric set, in stored units."""

    kernel_name: str
    values: dict[str, float]
    stalls: tuple[tuple[str, float], ...]       # every stall reason, largest first

    def top_stalls(self, count: int = 3) -> tuple[tuple[str, float], ...]:
        return tuple(s for s in self.stalls if s[0] not in NOT_A_STALL)[:count]


def metrics_argument() -> str:
    """The value of ``ncu --metrics``."""
    return ",".join(list(METRICS.values()) + [f"regex:{STALL_PATTERN}"])


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")
    if cleaned in ("", "n/a", "N/A"):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _scaled(field: str, value: float, unit: str) -> float:
    group = field if field in _SCALE else "bytes" if field.endswith("_bytes") else None
    if group is None:
        return value
    scale = _SCALE[group].get(unit.strip().lower())
    if scale is None:
        raise NcuOutputError(f"{METRICS[field]} is in {unit!r}, a unit fa2-tuner does not know; "
                             f"expected one of {', '.join(_SCALE[group])}")
    return value * scale


def parse_raw_csv(text: str) -> list[KernelCounters]:
    """Every kernel in ``ncu --csv --page raw`` output (ncu's own ``==PROF==`` lines skipped).

    Raises:
        NcuOutputError: no table, or a kernel without one of :data:`METRICS`.
    """
    lines = text.splitlines()
    # The table starts at its header; before it come ncu's notes and the program's own output.
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise NcuOutputError("ncu printed no table of kernels (no line starting with \"ID\")")
    table = list(csv.reader(io.StringIO("\n".join(
        line for line in lines[start:] if line.strip() and not line.startswith("==")))))
    if "Kernel Name" not in table[0]:
        raise NcuOutputError("ncu's table has no 'Kernel Name' column")
    header, body = table[0], table[1:]
    # the second line holds the units: it has no kernel ID
    units = body.pop(0) if body and body[0] and not body[0][0].strip() else None
    column = {name: i for i, name in enumerate(header)}
    missing = [m for m in METRICS.values() if m not in column]
    if missing:
        raise NcuOutputError(f"ncu's output lacks {', '.join(missing)}; this Nsight Compute may name it otherwise "
                             f"(check with: ncu --query-metrics)")
    kernels = []
    for row in body:
        if len(row) != len(header):
            continue
        values = {}
        for field, metric in METRICS.items():
            value = _number(row[column[metric]])
            if value is None:
                raise NcuOutputError(f"{metric} has no value for kernel {row[column['Kernel Name']][:80]!r}")
            values[field] = _scaled(field, value, units[column[metric]] if units else "")
        stalls = [(found.group(1), _number(row[i]) or 0.0) for name, i in column.items()
                  if (found := STALL.fullmatch(name))]
        kernels.append(KernelCounters(row[column["Kernel Name"]], values,
                                      tuple(sorted(stalls, key=lambda s: -s[1]))))
    return kernels


def pick_kernel(kernels: list[KernelCounters], pattern: str) -> KernelCounters:
    """The longest-running kernel whose name matches ``pattern`` (a target may launch
    small helpers besides its attention kernel).

    Raises:
        NcuOutputError: no kernel matches; the message names the pattern and what ran.
    """
    matching = [k for k in kernels if re.search(pattern, k.kernel_name)]
    if not matching:
        seen = ", ".join(sorted({k.kernel_name[:60] for k in kernels})) or "none"
        raise NcuOutputError(f"no profiled kernel matches {pattern!r}; kernels profiled: {seen}")
    return max(matching, key=lambda k: k.values["duration_us"])
