"""Pins what bounds a profiled kernel: DRAM busy at the threshold itself (60%) is memory-bound."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.counters import bound


@pytest.mark.parametrize("dram, tensor, expected", [
    (60.0, 80.0, "memory-bound"), (59.9, 80.0, "compute-bound"), (59.9, 60.0, "compute-bound"),
    (10.0, 59.9, "latency-bound"), (None, None, "latency-bound"),
])
def test_what_bounds_a_kernel_counts_each_threshold_as_reached(dram, tensor, expected):
    assert bound(SimpleNamespace(dram_pct=dram, tensor_pct=tensor)) == expected
