"""Profile and roofline: Nsight Compute's counters for each shape's best configs and for
SDPA on the same inputs, stored in ``fa2_profiles`` beside the timings.

``python -m tuner.profile --study article --gpu sm_90`` (or ``tuner.sweep --profile``).
Timing says which config is fastest; the counters say why, and what is left: how busy
the tensor pipe is, how many warps are resident, what they wait on, how many bytes
really cross DRAM. :func:`verdict` turns them into one line per kernel.

Modules: ``_metrics`` (the fixed metric set, reading ncu's CSV), ``_ncu`` (running ncu
on one target, telling its failures apart), ``_launch`` (the program ncu runs),
``_run`` (selecting, profiling and storing), ``_report`` (the Markdown table); the one-line
verdict is :mod:`tuner.counters`' (shared with the dashboards' profile pages).
"""

from __future__ import annotations

import importlib

# Resolved on first use, so that ``python -m tuner.profile._launch``, run under ncu for
# every target, imports torch and the kernel only.
_EXPORTS = {
    "METRICS": "_metrics", "KernelCounters": "_metrics", "NcuOutputError": "_metrics", "ProfileError": "_metrics",
    "metrics_argument": "_metrics", "parse_raw_csv": "_metrics", "pick_kernel": "_metrics",
    "KINDS": "_ncu", "KIND_LABELS": "tuner.counters", "CountersNotPermitted": "_ncu", "NcuMissing": "_ncu",
    "Target": "_ncu", "command": "_ncu", "launch_call": "_launch",
    "find_ncu": "_ncu", "interpret": "_ncu", "ncu_version": "_ncu", "profile": "_ncu",
    "bound": "tuner.counters", "display_order": "tuner.counters", "kernel_label": "tuner.counters",
    "stalls_of": "tuner.counters", "verdict": "tuner.counters",
    "ProfileContext": "_run", "best_configs": "_run", "profile_row": "_run", "profile_study": "_run",
    "profile_targets": "_run", "select_targets": "_run", "verdict_lines": "_run", "markdown": "_report",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tuner.profile' has no attribute {name!r}")
    module = _EXPORTS[name]
    return getattr(importlib.import_module(module if "." in module else f"tuner.profile.{module}"), name)
