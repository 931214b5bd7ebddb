"""Pins how trials become configs (a knob missing from old trials is off, tile-only trials count as fully
asked) and that the grid sampler never hands out a point a running trial holds."""

from __future__ import annotations

import optuna
import pytest

from tuner.kernels.gluon_bwd import GluonBwdPoint
from tuner.kernels.triton_fwd import KERNEL as FWD, FwdConfig
from tuner.samplers import config_of, distributions, fully_asked, make_sampler

TILES_ONLY = {"log2_block_m": 6, "log2_block_n": 7, "log2_num_warps": 2, "stages": 3}


def test_a_knob_missing_from_a_stored_trial_is_off_even_where_the_default_space_starts_elsewhere():
    """The Gluon backward's dq_bufs searches (1, 2) by default and is off at 2; consumer_regs (232, 240), off at 240."""
    config = config_of(TILES_ONLY, GluonBwdPoint)
    assert (config.block_m, config.block_n, config.num_warps, config.num_stages) == (64, 128, 4, 3)
    assert config.dq_bufs == 2 and config.consumer_regs == 240 and config.plain
    assert config == GluonBwdPoint.parse("64x128_w4_s3")


def test_a_trial_with_every_tile_but_no_knob_was_fully_asked():
    assert fully_asked(TILES_ONLY, FwdConfig)
    assert fully_asked({**TILES_ONLY, "tma": False}, FwdConfig)
    assert not fully_asked({"log2_block_m": 6, "log2_block_n": 7, "log2_num_warps": 2}, FwdConfig)


@pytest.mark.parametrize("seed", range(12))
def test_the_grid_never_hands_out_a_point_a_running_trial_holds(seed):
    space = FWD.plain_space(block_m=(16, 32), block_n=(16,), num_warps=(1,), num_stages=(1,), tma=(False,))
    study = optuna.create_study(sampler=make_sampler("grid", space, seed=seed))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = distributions(space, "grid")
    first = study.ask(dists)                       # running, not told
    second = study.ask(dists)
    assert first.params["block_m"] != second.params["block_m"]
    assert study.sampler.next_point(study.get_trials(deepcopy=False)) is None      # both points held
