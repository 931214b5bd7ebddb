"""Pins SearchSpace.runnable_on: only knob values the target never runs leave the space (tiles stay, for the
budget to judge), and a space the target runs nothing of is left whole."""

from __future__ import annotations

from types import SimpleNamespace

from tuner.kernels.triton_fwd import FwdConfig
from tuner.space import SearchSpace


def _space(rule) -> SearchSpace:
    kernel = SimpleNamespace(config_type=FwdConfig, budget_rule=rule)
    return SearchSpace(kernel, (("block_m", (16, 32)), ("block_n", (16,)), ("num_warps", (4, 16)),
                                ("num_stages", (1,)), ("tma", (False, True)), ("warp_specialize", (False,)),
                                ("maxnreg", (0,)), ("persistent", (0,))))


def test_a_tile_value_the_rule_always_refuses_stays_and_a_knob_value_leaves():
    def rule(config, gpu):
        if config.tma:
            return "unsupported: TMA needs sm_90 or later"
        return "registers: 16 warps" if config.num_warps == 16 else None

    runnable = _space(rule).runnable_on("sm_89")
    assert runnable["tma"] == (False,)
    assert runnable["num_warps"] == (4, 16) and runnable["block_m"] == (16, 32)


def test_a_space_the_target_runs_nothing_of_is_left_whole():
    space = _space(lambda config, gpu: "unsupported: nothing runs here")
    runnable = space.runnable_on("sm_89")
    assert runnable.axes == space.axes and runnable.size() == space.size() == 8
