"""The Gluon forward as a tunable kernel (tuner/kernels/gluon_fwd.py) and its study, on the CPU.

Its exact sm_90 cross-compile through the budget stage needs Triton 3.6 and is in
test_gluon.py (which .ci/run runs again in the Triton 3.6 venv).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import ROOT

from kernel.gluon.fwd.config import GluonConfig, default_gluon_config
from tuner import kernels
from tuner.budget import check_many
from tuner.gpus import GpuSpec
from tuner.kernels.gluon_fwd import KERNEL, GluonFwdConfig, from_kernel, to_kernel
from tuner.problem import Problem
from tuner.status import Status
from tuner.study import load

PROBLEM = Problem(4, 8, 4096, 4096, 128, "bf16", True)


def test_the_registry_lists_it():
    assert kernels.get("gluon_fwd") is KERNEL and kernels.get("gluon_fwd", "fwd") is KERNEL
    assert "gluon_fwd (fwd)" in kernels.registered()
    assert kernels.kernel_of(GluonFwdConfig(128, 128, 4, 2)) is KERNEL


def test_the_study_loads_with_a_small_space_around_the_defaults():
    study = load("hopper_gluon")
    assert study.kernel is KERNEL and study.metric == "speedup_vs_cudnn"
    assert {(s.batch, s.heads, s.n_q, s.n_k, s.head_dim, s.causal) for s in study.shapes} == {
        (4, 8, 4096, 4096, d, c) for d in (64, 128) for c in (False, True)}
    configs = study.configs()
    assert 30 <= len(configs) <= 60
    assert all(KERNEL.restriction(c, 128) is None for c in configs), "the study lists configs no Gluon call takes"
    for causal in (False, True):       # D=64's defaults, 192-row tiles, are hopper_gluon_d64's
        assert from_kernel(default_gluon_config(128, causal, "ws")) in configs, causal


def test_the_d64_study_searches_both_tiles_and_holds_the_d64_defaults():
    """192-row tiles spill at D=128, and a study's configs must run at each of its shapes: a D=64
    study of their own."""
    study = load("hopper_gluon_d64")
    configs = study.configs()
    assert {s.head_dim for s in study.shapes} == {64} and {c.block_m for c in configs} == {128, 192}
    assert all(KERNEL.restriction(c, 64) is None for c in configs)
    assert all(c.consumer_regs == (152 if c.block_m == 192 else 240) for c in configs)
    for causal in (False, True):
        assert from_kernel(default_gluon_config(64, causal, "ws")) in configs, causal


def _no_compiles(monkeypatch) -> None:
    """Any compile fails the test (a cache hit would not reach a worker either: a fresh cache)."""
    from tuner import budget

    def refuse(self, task):
        raise AssertionError(f"{task.config.key} was compiled: the budget rules should have judged it")

    monkeypatch.setattr(budget.CompilePool, "submit", refuse)


def test_budget_verdicts_on_ada_are_unsupported_without_compiling(monkeypatch, tmp_path):
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    _no_compiles(monkeypatch)
    configs = load("hopper_gluon").configs()
    for result in check_many(configs, PROBLEM, GpuSpec.from_name("sm_89")):
        assert result.verdict == Status.UNSUPPORTED, (result.config.key, result.reason)
        assert "sm_90" in result.reason and "sm_89" in result.reason and result.compiled_bytes is None


def test_budget_verdicts_under_a_gluon_lacking_what_the_kernels_use_name_it(monkeypatch, tmp_path):
    import kernel.gluon.api as gluon_api

    monkeypatch.setattr(gluon_api, "cta_barrier", None)
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    _no_compiles(monkeypatch)
    gluon_api.gluon_api_support.cache_clear()
    try:
        results = check_many(load("hopper_gluon").configs()[:6], PROBLEM, GpuSpec.from_name("sm_90"))
    finally:
        gluon_api.gluon_api_support.cache_clear()
    for result in results:
        assert result.verdict == Status.UNSUPPORTED and "lacks a CTA barrier" in result.reason, result.reason


def test_restrictions_name_what_no_compiler_beats():
    assert "pingpong" in KERNEL.restriction(GluonFwdConfig(64, 128, 4, 2, overlap=True, pingpong=True), 64)
    assert "pingpong=True needs overlap" in KERNEL.restriction(GluonFwdConfig(128, 128, 4, 2, pingpong=True), 64)
    assert "consumer_regs" in KERNEL.restriction(GluonFwdConfig(128, 128, 4, 2, consumer_regs=250), 64)
    assert KERNEL.restriction(GluonFwdConfig(128, 128, 4, 2, producer_regs=256, consumer_regs=256), 64)
    assert "head dim 96" in KERNEL.restriction(GluonFwdConfig(128, 128, 4, 2), 96)
    assert "warps" in KERNEL.restriction(GluonFwdConfig(128, 128, 8, 2), 64)
    # Shared memory is the budget's to judge (model or compile), not a restriction.
    too_big = GluonFwdConfig(128, 128, 4, 4, overlap=True)
    assert KERNEL.restriction(too_big, 128) is None
    assert KERNEL.model_smem_bytes(too_big, PROBLEM, GpuSpec.from_name("sm_90")) > 232_448


def test_keys_parse_back_and_the_emitted_list_pastes_into_the_entry_point():
    from kernel.gluon.fwd.autotune import AutotunedGluonForward

    configs = load("hopper_gluon").configs() + [GluonFwdConfig(128, 64, 4, 3, True, True, 2, 32, 232),
                                                 GluonFwdConfig(64, 64, 4, 1)]
    pasted = []
    for config in configs:
        assert GluonFwdConfig.parse(config.key) == config, config.key
        source = KERNEL.triton_config(config)
        entry = eval(source, {"GluonConfig": GluonConfig})        # what a user pastes, as emitted
        assert isinstance(entry, GluonConfig) and entry == to_kernel(config), source
        assert KERNEL.from_triton(entry) == config
        pasted.append(entry)
    assert KERNEL.emitted_imports == "from kernel.gluon.fwd.config import GluonConfig"
    assert len(AutotunedGluonForward(pasted).configs) == len(configs)
    with pytest.raises(ValueError, match="GluonConfig"):
        AutotunedGluonForward([replace(configs[0])])


def test_the_smem_model_is_the_gluon_configs_and_dtype_aware():
    config = GluonFwdConfig(128, 128, 4, 2, overlap=True, pingpong=True, persistent=1)
    from kernel.gluon.fwd.config import smem_bytes

    sm90 = GpuSpec.from_name("sm_90")
    assert KERNEL.model_smem_bytes(config, PROBLEM, sm90) == smem_bytes(GluonConfig("ws", 128, 128, 2, True, True, 1),
                                                                       128)
    fp16 = replace(PROBLEM, dtype="fp16")
    assert KERNEL.model_smem_bytes(config, fp16, sm90) == KERNEL.model_smem_bytes(config, PROBLEM, sm90)


def test_its_specialisations_follow_the_jit_without_compiling():
    same = [replace(PROBLEM, n_q=n, n_k=n) for n in (1024, 4096)]
    assert len({KERNEL.specialisation(p) for p in same}) == 1
    others = [replace(PROBLEM, n_q=1000, n_k=1000), replace(PROBLEM, n_q=1, n_k=1), replace(PROBLEM, causal=False),
              replace(PROBLEM, head_dim=64), replace(PROBLEM, dtype="fp16"), replace(PROBLEM, n_k=1000)]
    assert len({KERNEL.specialisation(p) for p in [same[0], *others]}) == len(others) + 1


def test_a_sweep_for_ada_on_the_cpu_exits_cleanly_with_the_reason(tmp_path):
    env = dict(os.environ, FA2_TUNER_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "tuner.sweep", "--study", "hopper_gluon", "--gpu", "sm_89",
                             "--out", str(tmp_path / "out"), "--no-outputs"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "unsupported: the Gluon forward needs sm_90" in text and "sm_89" in text
    assert "0 compiles" in text
