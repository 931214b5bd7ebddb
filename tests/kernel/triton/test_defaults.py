"""The configs a call that names none gets: every tile, warp and stage, not only the knobs.

Hopper's are the H200's measured winners, so they are read back from the results files that
measured them (a default edited without a new measurement fails here); the portable ones are
pinned and must fit Ada's 99 KB per block by the budget model, for every head dim they serve.
"""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

import kernel
from kernel.triton.defaults import HOPPER_BWD, default_bwd_config
from tuner.budget import verdict
from tuner.gpus import GpuSpec
from tuner.kernels.triton_bwd import from_kernel
from tuner.kernels.triton_fwd import FwdConfig
from tuner.problem import Problem

RESULTS = ROOT / "docs" / "results"
TILES = ("block_m", "block_n", "num_warps", "num_stages")
SM89, SM90 = GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90")


def _forward_finalists() -> dict[tuple[int, bool], FwdConfig]:
    """(D, causal) -> the grid sweep's winner, from the knobs results' finalists sentence."""
    text = (RESULTS / "2026-11-30-h200-knobs.md").read_text()
    sentence = text[text.index("The sweep's finalists"):text.index("Where warp specialization or the cap won")]
    found = re.findall(r"D=(\d+)( causal)?\s+`([\w]+)`", sentence.replace("\n", " "))
    return {(int(d), bool(causal)): FwdConfig.parse(key) for d, causal, key in found}


def test_the_hopper_forward_defaults_are_the_measured_winners_less_what_won_within_the_noise():
    """The docstring's rule: where warp specialization or a register cap won, it won within the
    noise of the config without it, and the default is that config."""
    winners = _forward_finalists()
    assert set(winners) == {(64, False), (64, True), (128, False), (128, True)}
    for (d, causal), winner in winners.items():
        default = kernel.default_config(d, causal, capability=90)
        expected = {**{t: getattr(winner, t) for t in TILES}, "tma": winner.tma}
        if winner.persistent:
            expected["persistent"] = winner.persistent
        assert default == expected, (d, causal)


def _backward_defaults_table() -> dict[tuple[int, bool], str]:
    """(D, causal) -> the config column of the shipped defaults' measurement."""
    text = (RESULTS / "2026-12-01-h200-backward.md").read_text()
    lines = text[text.index("## The shipped defaults"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| D | causal | best config |"))
    table = []
    for line in lines[start + 2:]:              # the first table only: later ones measure other things
        if not line.startswith("|"):
            break
        table.append(line)
    rows = [re.match(r"\| (\d+) \| (no|yes) \| (\S+) \|", line).groups() for line in table]
    return {(int(d), causal == "yes"): name for d, causal, name in rows}


def test_the_hopper_backward_defaults_are_the_configs_measured_as_the_defaults():
    """The table names each config as BMxBN_qBMQxBNQ_wW_sS_MODE_TMA (the dQ pass's warps and
    stages are not in the name; they are pinned in the next test)."""
    table = _backward_defaults_table()
    assert set(table) == set(HOPPER_BWD)
    for (d, causal), name in table.items():
        c = default_bwd_config(d, causal, capability=90)
        assert name == (f"{c.block_m}x{c.block_n}_q{c.block_m_q}x{c.block_n_q}_w{c.num_warps}_s{c.num_stages}_"
                        f"{c.dq_mode}_{'tma' if c.tma else 'plain'}"), (d, causal)
        assert c is HOPPER_BWD[(d, causal)]


@pytest.mark.parametrize("capability", [90, 91, 99])
def test_every_hopper_capability_takes_the_hopper_defaults_and_others_do_not(capability):
    for d in (64, 128):
        for causal in (False, True):
            assert default_bwd_config(d, causal, capability) is HOPPER_BWD[(d, causal)]
            assert kernel.default_config(d, causal, capability)["tma"] is True
    for other in (80, 89, 100, 120):
        assert not default_bwd_config(64, False, other).tma and "tma" not in kernel.default_config(64, False, other)


def test_the_dq_pass_warps_and_stages_of_the_hopper_backward_defaults():
    pinned = {(64, False): (8, 3), (64, True): (8, 1), (128, False): (8, 3), (128, True): (8, 3)}
    assert {key: (c.num_warps_q, c.num_stages_q) for key, c in HOPPER_BWD.items()} == pinned


# Portable defaults (Ada and everything not Hopper): pinned, and they must fit sm_89.
PORTABLE_FWD = {16: (128, 64, 8, 3), 32: (128, 64, 8, 3), 64: (128, 64, 8, 3), 128: (128, 64, 8, 2),
                256: (64, 32, 4, 1)}
PORTABLE_BWD = {16: (64, 64, 4, 2, 64, 64, 4, 2), 32: (64, 64, 4, 2, 64, 64, 4, 2), 64: (64, 64, 4, 2, 64, 64, 4, 2),
                128: (64, 64, 8, 2, 64, 64, 8, 2), 256: (32, 32, 4, 1, 32, 32, 4, 1)}
BWD_FIELDS = ("block_m", "block_n", "num_warps", "num_stages", "block_m_q", "block_n_q", "num_warps_q", "num_stages_q")


@pytest.mark.parametrize("head_dim", kernel.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_portable_forward_default_fits_ada_at_its_head_dim(head_dim, causal):
    default = kernel.default_config(head_dim, causal, capability=89)
    assert set(default) == set(TILES)
    assert tuple(default[t] for t in TILES) == PORTABLE_FWD[head_dim]
    config = FwdConfig(*PORTABLE_FWD[head_dim])
    result = verdict(config, Problem(head_dim=head_dim, causal=causal, dtype="bf16"), SM89, None)
    assert result.launchable, result.reason


@pytest.mark.parametrize("head_dim", kernel.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_portable_backward_default_fits_ada_at_its_head_dim(head_dim, causal):
    default = default_bwd_config(head_dim, causal, capability=89)
    assert tuple(getattr(default, f) for f in BWD_FIELDS) == PORTABLE_BWD[head_dim]
    assert (default.dq_mode, default.tma, default.maxnreg, default.persistent) == ("pass", False, None, 0)
    result = verdict(from_kernel(default), Problem(head_dim=head_dim, causal=causal, dtype="bf16"), SM89, None)
    assert result.launchable, result.reason


@pytest.mark.parametrize("lengths", [(1, 1), (1, 64), (64, 1)])
def test_a_length_of_one_takes_plain_loads_and_keeps_the_tiles(lengths):
    for (d, causal), hopper in HOPPER_BWD.items():
        chosen = default_bwd_config(d, causal, 90, lengths)
        assert (chosen.tma, chosen.dq_mode) == (False, "pass")
        assert all(getattr(chosen, f) == getattr(hopper, f) for f in BWD_FIELDS), (d, causal)
    assert default_bwd_config(64, True, 90, (2, 2)) is HOPPER_BWD[(64, True)]
