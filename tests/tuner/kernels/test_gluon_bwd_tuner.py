"""The Gluon backward as a tunable kernel (tuner/kernels/gluon_bwd.py) and its study, on the CPU.

The budget stage's exact sm_90 cross-compile needs Triton 3.6's Gluon: that test is skipped,
with the reason, on another Triton (run it in the Triton 3.6 venv, as tests/kernel/gluon/bwd/test_gluon_bwd.py).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import ROOT
from gluon_smoke import spill_allowance

from kernel.gluon.api import gluon_api_support
from kernel.gluon.bwd.config import GLUON_BWD_DEFAULTS, GluonBwdConfig, smem_bytes
from tuner import kernels
from tuner.budget import check_many
from tuner.gpus import GpuSpec
from tuner.kernels.gluon_bwd import KERNEL, GluonBwdPoint, from_kernel, to_kernel
from tuner.problem import Problem
from tuner.status import Status
from tuner.study import load

PROBLEM = Problem(4, 8, 4096, 4096, 128, "bf16", True)
SPILLS = spill_allowance()      # stack bytes allowed (0 but under Triton 3.9's ptxas)
API_REASON = gluon_api_support()
needs_gluon_api = pytest.mark.skipif(API_REASON is not None,
                                     reason=f"the cross-compile needs a Gluon with the kernels' API: {API_REASON}")
# Measured correct and fast on the H200: D=128 two consumers, D=64 three Q/dO stages.
MEASURED = {128: replace(GLUON_BWD_DEFAULTS[(128, False)], consumers=2),
            64: replace(GLUON_BWD_DEFAULTS[(64, False)], num_stages=3)}


def test_the_registry_lists_it_as_a_backward():
    assert kernels.get("gluon_bwd") is KERNEL and kernels.get("gluon_bwd", "bwd") is KERNEL
    assert KERNEL.pass_ == "bwd" and "gluon_bwd (bwd)" in kernels.registered()
    assert kernels.kernel_of(GluonBwdPoint(64, 64, 4, 2)) is KERNEL
    assert kernels.get("gluon_fwd").name == "gluon_fwd"          # the forward is still there


def test_the_study_loads_with_a_small_space_around_the_defaults():
    study = load("hopper_gluon_bwd")
    assert study.kernel is KERNEL and study.metric == "speedup_vs_cudnn"
    assert {(s.batch, s.heads, s.n_q, s.n_k, s.head_dim, s.dtype, s.causal) for s in study.shapes} == {
        (4, 8, 4096, 4096, d, "bf16", c) for d in (64, 128) for c in (False, True)}
    configs = study.configs()
    assert 24 <= len(configs) <= 64
    for d in (64, 128):
        assert all(KERNEL.restriction(c, d) is None for c in configs), "the study lists configs no call takes"
        for causal in (False, True):
            assert from_kernel(GLUON_BWD_DEFAULTS[(d, causal)]) in configs, (d, causal)
        assert from_kernel(MEASURED[d]) in configs, d
    assert {c.block_n for c in configs} == {64, 128} and {c.dq_bufs for c in configs} == {1, 2}


def test_two_consumers_run_at_d128_and_fall_back_to_one_at_d64():
    two = from_kernel(MEASURED[128])
    assert two.block_n == 128 and to_kernel(two, 128) == MEASURED[128]
    assert to_kernel(two, 64).consumers == 1 and to_kernel(two, 64) == replace(MEASURED[128], consumers=1)
    sm90 = GpuSpec.from_name("sm_90")
    assert KERNEL.model_smem_bytes(two, replace(PROBLEM, head_dim=64), sm90) == smem_bytes(
        replace(MEASURED[128], consumers=1), 64)


def _no_compiles(monkeypatch) -> None:
    """Any compile fails the test: the pool, and the unit builder and cross-compiler behind it."""
    import kernel.gluon.bwd.compile as compiler
    import tuner.kernels.gluon_bwd as module
    from tuner import budget

    def refuse(*args, **kwargs):
        raise AssertionError("a compile was attempted: the budget rules should have judged it")

    monkeypatch.setattr(budget.CompilePool, "submit", refuse)
    monkeypatch.setattr(module, "compile_unit", refuse)
    monkeypatch.setattr(compiler, "cross_compile", refuse)
    monkeypatch.setattr(compiler, "compile_inputs", refuse)


def test_budget_verdicts_on_ada_are_unsupported_without_compiling(monkeypatch, tmp_path):
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    _no_compiles(monkeypatch)
    for d in (64, 128):
        for result in check_many(load("hopper_gluon_bwd").configs(), replace(PROBLEM, head_dim=d),
                                 GpuSpec.from_name("sm_89")):
            assert result.verdict == Status.UNSUPPORTED, (result.config.key, result.reason)
            assert "Gluon backward needs sm_90" in result.reason and "sm_89" in result.reason
            assert result.compiled_bytes is None
    assert not list(tmp_path.rglob("*.json"))


def test_budget_verdicts_under_a_gluon_lacking_what_the_kernels_use_name_it(monkeypatch, tmp_path):
    import kernel.gluon.api as gluon_api

    monkeypatch.setattr(gluon_api, "cta_barrier", None)
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    _no_compiles(monkeypatch)
    gluon_api.gluon_api_support.cache_clear()
    try:
        results = check_many(load("hopper_gluon_bwd").configs()[:6], PROBLEM, GpuSpec.from_name("sm_90"))
    finally:
        gluon_api.gluon_api_support.cache_clear()
    for result in results:
        assert result.verdict == Status.UNSUPPORTED and "lacks a CTA barrier" in result.reason, result.reason


def test_restrictions_name_what_no_compiler_beats():
    assert "divide by 3" in KERNEL.restriction(GluonBwdPoint(64, 128, 4, 2, consumer_regs=232), 128)
    assert KERNEL.restriction(GluonBwdPoint(64, 128, 4, 2, consumer_regs=232), 64) is None    # one consumer there
    assert "consumer_regs" in KERNEL.restriction(GluonBwdPoint(64, 64, 4, 2, consumer_regs=250), 64)
    assert "head dim 96" in KERNEL.restriction(GluonBwdPoint(64, 64, 4, 2), 96)
    assert "warps" in KERNEL.restriction(GluonBwdPoint(64, 64, 8, 2), 64)
    assert "num_stages" in KERNEL.restriction(GluonBwdPoint(64, 64, 4, 5), 64)
    assert "block_n" in KERNEL.restriction(GluonBwdPoint(64, 256, 4, 2), 128)
    # Shared memory is the budget's to judge (model or compile), not a restriction.
    too_big = GluonBwdPoint(128, 64, 4, 3)
    assert KERNEL.restriction(too_big, 128) is None
    assert KERNEL.model_smem_bytes(too_big, PROBLEM, GpuSpec.from_name("sm_90")) > 232_448


def test_keys_parse_back_and_the_emitted_form_is_the_kernels_config():
    configs = load("hopper_gluon_bwd").configs() + [GluonBwdPoint(64, 64, 4, 1, 1, 2, 32, 232)]
    for config in configs:
        assert GluonBwdPoint.parse(config.key) == config, config.key
        source = KERNEL.triton_config(config)
        entry = eval(source, {"GluonBwdConfig": GluonBwdConfig})
        assert isinstance(entry, GluonBwdConfig) and entry == to_kernel(config, 128), source
        assert KERNEL.from_triton(entry) == config
    assert KERNEL.emitted_imports == "from kernel.gluon.bwd.config import GluonBwdConfig"
    with pytest.raises(ValueError, match="GluonBwdConfig"):
        KERNEL.from_triton(object())


def test_the_smem_model_is_the_gluon_bwd_configs_and_counts_constant_lengths():
    sm90 = GpuSpec.from_name("sm_90")
    for (d, causal), default in GLUON_BWD_DEFAULTS.items():
        problem = replace(PROBLEM, head_dim=d, causal=causal)
        assert KERNEL.model_smem_bytes(from_kernel(default), problem, sm90) == smem_bytes(default, d)
        one = replace(problem, n_q=1, n_k=1)
        assert KERNEL.model_smem_bytes(from_kernel(default), one, sm90) == smem_bytes(default, d, constant_lengths=2)
    two = from_kernel(MEASURED[128])
    assert KERNEL.model_smem_bytes(two, PROBLEM, sm90) == smem_bytes(MEASURED[128], 128) != smem_bytes(
        replace(MEASURED[128], consumers=1), 128)


def test_its_specialisations_follow_the_jit_without_compiling(monkeypatch):
    _no_compiles(monkeypatch)
    same = [replace(PROBLEM, n_q=n, n_k=n) for n in (1024, 4096)]
    assert len({KERNEL.specialisation(p) for p in same}) == 1
    others = [replace(PROBLEM, n_q=1000, n_k=1000), replace(PROBLEM, n_q=1, n_k=1), replace(PROBLEM, causal=False),
              replace(PROBLEM, head_dim=64), replace(PROBLEM, dtype="fp16"), replace(PROBLEM, n_k=1000)]
    assert len({KERNEL.specialisation(p) for p in [same[0], *others]}) == len(others) + 1


def test_it_is_checked_timed_and_counted_as_a_backward():
    from kernel.measure.timing import attention_flops

    assert KERNEL.flops(PROBLEM) == 2.5 * attention_flops(4, 8, 4096, 4096, 128, True)
    assert set(KERNEL.baseline_ncu_kernels()) == {"flash", "cudnn"}
    assert KERNEL.ncu_kernels()["ours"] == r"^bwd_gluon_kernel\b"
    assert "Gluon" in KERNEL.device_source() and "def bwd_gluon_kernel" in KERNEL.device_source()


@needs_gluon_api
def test_the_budget_stage_cross_compiles_for_sm90_and_the_model_is_the_binarys(tmp_path, monkeypatch):
    """Each default (and the D=128 two-consumer point) through the budget stage: compiled for sm_90
    into a fresh cache, shared memory equal to ``gluon_bwd_config``'s model, no spills, and the
    launch's registers per thread."""
    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    sm90 = GpuSpec.from_name("sm_90")
    cases = [(d, causal, GLUON_BWD_DEFAULTS[(d, causal)]) for d, causal in ((64, False), (128, True))]
    cases.append((128, False, MEASURED[128]))
    for d, causal, gluon in cases:
        problem = replace(PROBLEM, head_dim=d, causal=causal)
        result = check_many([from_kernel(gluon)], problem, sm90, jobs=1)[0]
        # Spills only under Triton 3.9's ptxas (tests/gluon_smoke.py: spill_allowance), a launchable verdict
        assert result.verdict == (Status.FITS if result.spill_bytes == 0 else Status.SPILLS), (gluon, d, result.reason)
        assert result.compiled_bytes == result.model_bytes == smem_bytes(gluon, d), (gluon, d)
        assert result.spill_bytes <= SPILLS and result.registers == gluon.maxnreg, (gluon, d, result.registers)
    assert list(tmp_path.rglob("*.json")), "nothing was compiled into the fresh cache"


@pytest.mark.skipif(importlib.util.find_spec("optuna") is None, reason="the sweep needs optuna (not in this venv)")
def test_a_sweep_for_ada_on_the_cpu_runs_the_budget_stage_only_and_says_why(tmp_path):
    env = dict(os.environ, FA2_TUNER_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "tuner.sweep", "--study", "hopper_gluon_bwd", "--gpu", "sm_89",
                             "--out", str(tmp_path / "out"), "--no-outputs"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "unsupported: the Gluon backward needs sm_90" in text and "sm_89" in text
    assert "0 compiles" in text and "stopped after the budget stage" in text
