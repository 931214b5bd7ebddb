"""The SM clock, read through NVML while a measurement runs, so times can be normalised for it.

An H200 under load sits at its power cap and its SM clock wanders between about 1740 and
1935 MHz over seconds; locking it is not allowed on a lent GPU, reading it is. A kernel
bound by its SMs takes a fixed number of cycles, so ``cycles = ms x MHz`` stays put while
``ms`` follows the clock: two configs timed at different clocks compare on their cycles.

NVML comes from ``nvidia-ml-py`` (module ``pynvml``), an optional dependency: where it is
missing, or there is no GPU, or the driver refuses, :func:`sm_clock` gives None and every
caller falls back (the finalists to the ratio to SDPA timed in the same round).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import statistics
import time
import warnings
from collections.abc import Callable

_UNSET = object()
_cached: object = _UNSET


class SmClock:
    """One GPU's NVML handle: :meth:`mhz` reads its current SM clock."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle

    def mhz(self) -> float | None:
        try:
            value = float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except Exception:            # NVMLError and its many subclasses: no reading, not a failure
            return None
        return value if value > 0 else None


def _handle(nvml):
    """The NVML handle of the GPU this process sees as CUDA device 0: by UUID where torch says it
    (NVML numbers every GPU of the host, ignoring ``CUDA_VISIBLE_DEVICES``), else by that index.
    NVML refusing torch's UUID is said (a warning) before the index is used: it may be another GPU."""
    uuid = ""
    with contextlib.suppress(Exception):          # no torch GPU: no UUID, the index alone
        import torch

        uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    index = int(first) if first.isdigit() else 0
    if uuid:
        wanted = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        try:
            return nvml.nvmlDeviceGetHandleByUUID(wanted)
        except Exception as exc:
            warnings.warn(f"NVML has no GPU {wanted} (torch's device 0): {type(exc).__name__}: {exc}; reading the "
                          f"SM clock of NVML's GPU {index} instead, which may be another GPU", RuntimeWarning,
                          stacklevel=2)
    return nvml.nvmlDeviceGetHandleByIndex(index)


def sm_clock() -> SmClock | None:
    """This process's GPU clock (opened once), or None where NVML cannot be used."""
    global _cached
    if _cached is _UNSET:
        _cached = None
        try:
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            clock = SmClock(nvml, _handle(nvml))
            if clock.mhz() is not None:
                _cached = clock
        except Exception:            # ImportError, NVMLError (no driver, no permission), a bad index
            _cached = None
    return _cached


def reset() -> None:
    """Forget the opened clock (tests swap NVML in and out)."""
    global _cached
    _cached = _UNSET


def sample_while(busy: Callable[[], bool], clock: SmClock | None, interval_s: float = 0.005) -> float | None:
    """Mean SM MHz over readings taken while ``busy()`` is true (the GPU still working through
    a timed window that the host has already enqueued), at least one reading; None without a clock."""
    if clock is None:
        return None
    readings = []
    while True:
        value = clock.mhz()
        if value is not None:
            readings.append(value)
        if not busy():
            break
        time.sleep(interval_s)
    return statistics.fmean(readings) if readings else None


def cycles(ms: float | None, mhz: float | None) -> float | None:
    """SM cycles of a call that took ``ms`` at ``mhz`` (ms x MHz x 1000), or None without both."""
    return ms * mhz * 1e3 if ms and mhz else None
