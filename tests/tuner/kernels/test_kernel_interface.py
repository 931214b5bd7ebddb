"""The pieces of the kernel interface each stage leans on: a kernel's default space against the
values a study may ask for, keys and their parser at the edges, the keyword arguments of a
launch, the registry's choice of pass for a module of one pass, and a verdict's kept configs
against the configs the emitted list may take."""

from __future__ import annotations

import pytest

from tuner import kernels, winners
from tuner.finalists import judge
from tuner.kernels.triton_bwd import KERNEL as BWD, TritonBwdConfig
from tuner.kernels.triton_fwd import KERNEL as FWD, FwdConfig
from tuner.store import Result

ONE_PASS = '''
from tuner.kernels.triton_bwd import TritonBackward


class Mine(TritonBackward):
    name = "minebwd"


KERNEL = Mine()
'''


def test_a_kernels_default_space_is_each_axis_default_not_all_it_allows():
    space = FWD.space()
    assert space["num_stages"] == (1, 2, 3, 4, 5, 6) and space["maxnreg"] == (0,) and space["persistent"] == (0,)
    assert space.size() == 5 * 5 * 5 * 6 * 2
    bwd = BWD.space()
    assert bwd["block_m"] == (16, 32, 64, 128) and bwd["dq_mode"] == (0, 2) and bwd["persistent"] == (0,)
    assert FWD.space(num_stages=(2, 3))["num_stages"] == (2, 3)
    with pytest.raises(ValueError, match="no axis 'stages'"):
        FWD.space(stages=(1,))


def test_the_plain_space_turns_every_knob_off_and_keeps_the_tiles_given():
    plain = FWD.plain_space(block_m=(64,))
    assert plain["tma"] == (False,) and plain["warp_specialize"] == (False,) and plain["block_m"] == (64,)
    assert all(c.plain for c in plain.all_configs())
    assert BWD.plain_space()["dq_mode"] == (0,)


@pytest.mark.parametrize("text", ["0,64,4,3", "64,64,0,3", "64x64_w4_s0", "64,64,4", "64,64,4,3,1", "", "64x64_w4",
                                  "64x64_w4_s3_nope"])
def test_a_key_with_a_tile_below_one_or_the_wrong_count_is_refused(text):
    with pytest.raises(ValueError, match="must be BM,BN,WARPS,STAGES|unknown knob"):
        FwdConfig.parse(text)


@pytest.mark.parametrize("config, key", [
    (FwdConfig(128, 64, 8, 3), "128x64_w8_s3"),
    (FwdConfig(128, 64, 8, 3, tma=True, warp_specialize=True, maxnreg=168, persistent=2),
     "128x64_w8_s3_tma_ws_r168_p2"),
    (TritonBwdConfig(64, 32, 4, 2, 128, 16, 8, 1, dq_mode=1, persistent=3), "64x32_w4_s2_q128x16_w8_s1_dq1_p3"),
])
def test_keys_name_every_knob_set_with_its_value_and_parse_back(config, key):
    assert config.key == key and type(config).parse(key) == config


def test_a_launch_names_the_tiles_and_only_the_knobs_that_are_set():
    assert FwdConfig(64, 32, 4, 2).as_kwargs() == dict(block_m=64, block_n=32, num_warps=4, num_stages=2)
    assert FwdConfig(64, 32, 4, 2, persistent=1, maxnreg=128).as_kwargs() == dict(
        block_m=64, block_n=32, num_warps=4, num_stages=2, maxnreg=128, persistent=1)
    assert FwdConfig(64, 32, 4, 2).variant == "plain" and FwdConfig(64, 32, 4, 2, tma=True).variant == "tma"


def test_a_module_of_one_pass_is_found_without_naming_the_pass(tmp_path, monkeypatch):
    (tmp_path / "onepass.py").write_text(ONE_PASS)
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = kernels.get("onepass")
    assert kernel.pass_ == "bwd" and kernel.name == "minebwd" and kernels.get("onepass", "bwd") is kernel
    with pytest.raises(kernels.KernelNotFound, match="no pass 'fwd'"):
        kernels.get("onepass", "fwd")


def _rows(times: dict[str, float], shape="s"):
    return [Result(config=key, shape=shape, status="timed", ms=ms) for key, ms in times.items()]


def test_a_verdict_keeping_a_config_the_list_may_not_take_gives_way_to_the_fastest_eligible_row():
    rows = _rows({"a": 1.0, "b": 1.01, "c": 1.2})
    verdict = judge("s", {"a": [1.0, 1.3, 0.8], "b": [1.01, 1.0, 1.02]}, {"flash": None, "cudnn": None})
    assert set(verdict.kept) == {"a", "b"}                        # within the noise: both kept
    assert winners.choice(rows, "s", verdict).keys == tuple(verdict.kept)
    chosen = winners.choice(rows, "s", verdict, eligible={"b", "c"})
    assert chosen.keys == ("b",) and chosen.verdict is None
    assert winners.choice(rows, "s", None, eligible={"c"}).keys == ("c",)
    assert winners.choice(rows, "t", None) is None
    assert winners.ranked(rows, "s", None, top=2) == ["a", "b"] and winners.ranked(rows, "s") == ["a", "b", "c"]


@pytest.mark.parametrize("sampler", ["grid", "tpe"])
def test_a_knob_fixed_on_is_asked_and_decodes_on_but_one_fixed_off_is_left_out(sampler):
    """A knob left out of Optuna's parameters decodes as off: one fixed on must be asked."""
    from tuner import search

    on = search.distributions(BWD.space(tma=(True,)), sampler)
    assert "tma" in on and "persistent" not in on
    chosen = {name: (d.choices[0] if hasattr(d, "choices") else d.low) for name, d in on.items()}
    assert search.config_of(chosen, TritonBwdConfig).tma is True
    assert "tma" in search.distributions(BWD.space(tma=(False, True)), sampler)
    assert "maxnreg" not in search.distributions(BWD.space(maxnreg=(0,)), sampler)
