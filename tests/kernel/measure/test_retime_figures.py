"""Tests that pin what the clock-free figures claim (issue 43's list): sustained scales the cycle-by-cycle
paired ratio (the first of CLOCK_FREE) by each config's clock alone, and a config not checked alone keeps
its figure."""

from __future__ import annotations

import pytest

from kernel.measure.retime import PAIRED, PAIRED_CYCLES, SUSTAINED, Sample, all_figures


def test_sustained_scales_the_cycle_by_cycle_ratio_by_each_configs_clock_alone():
    """Its ratio kept (cycle by cycle) and its plain paired ratio differ, so scaling the wrong one shows."""
    samples = {"a": [Sample(1.0, 1900.0, 2.0, 0.40), Sample(1.0, 1900.0, 2.0, 0.42)],
               "b": [Sample(1.1, 1900.0, 2.0, 0.60), Sample(1.1, 1900.0, 2.0, 0.62)],
               "sdpa": [Sample(2.0, 1900.0), Sample(2.0, 1900.0)]}
    alone = {"a": Sample(1.0, 1800.0), "b": Sample(1.1, 2000.0)}
    every = all_figures(samples, ["sdpa"], alone)
    assert list(every)[:3] == [SUSTAINED, PAIRED_CYCLES, PAIRED]
    middle = 1900.0                                              # the median of the two clocks alone
    assert every[SUSTAINED]["a"] == pytest.approx([0.40 * middle / 1800.0, 0.42 * middle / 1800.0])
    assert every[SUSTAINED]["b"] == pytest.approx([0.60 * middle / 2000.0, 0.62 * middle / 2000.0])
    assert every[PAIRED]["a"] == pytest.approx([0.5, 0.5])       # ms / ref_ms: not what sustained scales


def test_a_config_not_checked_alone_keeps_its_figure():
    samples = {"a": [Sample(1.0, 1900.0, 2.0, 0.4)], "b": [Sample(1.0, 1900.0, 2.0, 0.5)],
               "c": [Sample(1.0, 1900.0, 2.0, 0.6)], "sdpa": [Sample(2.0, 1900.0)]}
    every = all_figures(samples, ["sdpa"], {"a": Sample(1.0, 1800.0), "b": Sample(1.0, 2000.0)})
    assert every[SUSTAINED]["c"] == pytest.approx([0.6])
