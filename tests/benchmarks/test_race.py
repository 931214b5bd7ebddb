"""The race against @triton.autotune, on the CPU: both contestants are given the same configs, knobs included."""

from __future__ import annotations

from conftest import ROOT

from benchmarks import race
from tuner import budget
from tuner.gpus import GpuSpec
from tuner.study import load

STUDIES = ROOT / "studies"


def test_the_lists_are_200_and_48_configs_on_an_h200_half_of_them_tma():
    h200 = GpuSpec.from_name("sm_90")
    for name, size in (("autotune_race_200", 200), ("autotune_race_small", 48)):
        study = load(str(STUDIES / f"{name}.toml"))
        shape = study.shapes[0]
        launchable = [c for c in study.configs() if budget.verdict(c, shape, h200, None).launchable]
        assert len(launchable) == size and sum(c.tma for c in launchable) == size // 2


def test_autotune_gets_the_knobs_as_the_emitted_list_writes_them():
    from kernel.triton.autotune import AutotunedFlashAttention
    from tuner.kernels.triton_fwd import KERNEL

    keys = ["128x64_w8_s3", "128x64_w8_s3_tma", "64x32_w4_s2_tma"]
    configs = race.autotune_configs(keys)
    assert [c.kwargs.get("TMA", False) for c in configs] == [False, True, True]
    assert [KERNEL.from_triton(c).key for c in configs] == keys            # the winner's key reads back
    AutotunedFlashAttention(configs, ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"])  # the entry point takes them


def test_the_race_without_knobs_is_the_same_tiles_with_every_knob_off(tmp_path):
    study = load(str(STUDIES / "autotune_race_200.toml"))
    plain = load(race.plain_study(study, tmp_path / "plain.toml"))
    assert plain.shapes == study.shapes and plain.metric == study.metric and plain.timing == study.timing
    assert sorted(c.key for c in plain.configs()) == sorted(c.key for c in study.configs() if race.plain(c))
    assert len(plain.configs()) == len(study.configs()) // 2


def test_the_autotune_script_compiles():
    compile(race.AUTOTUNE_SCRIPT, "<autotune>", "exec")


def test_speed_without_a_gpu_says_so(capsys):
    import torch

    from benchmarks import search

    if torch.cuda.is_available():
        return
    assert search.main(["speed", "--study", str(STUDIES / "autotune_race_small.toml")]) == 2
    assert "no CUDA GPU is visible here" in capsys.readouterr().err
