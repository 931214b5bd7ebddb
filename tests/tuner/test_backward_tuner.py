"""The backward through every stage of the tuner, on the CPU: its space and search encoding, its
budget rules, the gradients gate (and a planted fault it must catch), the store's pass column,
the emitted list and its inverse, and the autotuned entry point over that list."""

from __future__ import annotations

import json
import os

import pytest
import torch

import kernel
from kernel.reference import grad_accuracy
from kernel.triton.autotune import AutotunedBackward
from tuner import emit, kernels, search, sweep
from tuner.budget import verdict
from tuner.gpus import GpuSpec
from tuner.kernels import triton_bwd
from tuner.problem import Problem
from tuner.runner import FAULT_ENV
from tuner.store import Store
from tuner.study import StudyError, load

BWD_STUDY = """
name = "tiny_bwd"
pass = "bwd"
[problem]
batch = 1
heads = 2
n = 48
head_dim = 16
dtype = "fp32"
causal = [false, true]
[space]
block_m = [16, 32]
block_n = [16]
num_warps = [1]
num_stages = [1]
block_m_q = [16]
block_n_q = [16]
num_warps_q = [1]
num_stages_q = [1]
dq_mode = [0, 1]
tma = [false]
[timing]
warmup_ms = 1
rep_ms = 1
"""
KERNEL = triton_bwd.KERNEL


@pytest.fixture
def tiny_bwd(tmp_path):
    path = tmp_path / "tiny_bwd.toml"
    path.write_text(BWD_STUDY)
    return path


def test_keys_parse_back_and_the_kernel_config_round_trips():
    config = KERNEL.config_type.parse("64x64_w4_s2_q128x64_w8_s3_dq2_tma_p1")
    assert (config.block_m_q, config.num_warps_q, config.dq_mode, config.tma, config.persistent) == (128, 8, 2, True, 1)
    bwd = triton_bwd.to_kernel(config)
    assert bwd.dq_mode == "tma" and bwd.maxnreg is None and triton_bwd.from_kernel(bwd) == config
    assert KERNEL.config_type.parse("64,64,4,2,128,64,8,3") == KERNEL.config_type.parse("64x64_w4_s2_q128x64_w8_s3")
    namespace = {"BwdConfig": kernel.BwdConfig}
    assert KERNEL.from_triton(eval(KERNEL.triton_config(config), namespace)) == config      # noqa: S307 (our own text)


def test_another_pass_of_a_study_is_stored_apart_and_an_unknown_pass_is_refused():
    article = load("article")
    bwd = article.for_pass("bwd")
    assert (bwd.name, bwd.pass_, bwd.kernel) == ("article-bwd", "bwd", KERNEL) and bwd.shapes == article.shapes
    assert bwd.fingerprint != article.fingerprint and article.for_pass("fwd") is article
    assert article.for_pass("fwd+bwd").kernel is triton_bwd.STEP
    with pytest.raises(StudyError, match="no pass 'up'"):
        article.for_pass("up")


def test_a_knob_fixed_on_is_asked_and_decoded_on():
    """hopper_bwd fixes tma = [true]: a knob left out of Optuna's parameters decodes as off, which
    once put every one of its configs outside its space."""
    space = load("hopper_bwd").space
    for sampler in ("grid", "tpe"):
        params = search.distributions(space, sampler)
        assert "tma" in params
        chosen = {name: (d.choices[0] if hasattr(d, "choices") else d.low) for name, d in params.items()}
        assert search.config_of(chosen, KERNEL.config_type).tma is True


@pytest.mark.parametrize("key, target, words", [
    ("64x64_w4_s2_q64x64_w4_s2_tma", "sm_89", "unsupported: TMA loads need sm_90"),
    ("64x64_w4_s2_q64x64_w4_s2_dq2", "sm_89", "unsupported: dq_mode tma (TMA reduce-add) need sm_90"),
    ("16x32_w8_s2_q64x64_w4_s2", "sm_90", "warps: the dK/dV kernel's 8 warps"),
    ("32x128_w4_s2_q64x64_w4_s2", "sm_90", "registers: the dK/dV kernel's"),
    ("64x64_w4_s2_q128x128_w4_s2", "sm_90", "registers: the dQ pass's"),
])
def test_budget_rules_refuse_before_any_compile(key, target, words, monkeypatch):
    from tuner.budget import _compile

    monkeypatch.setattr(_compile, "_compile_unit", lambda unit, *_: pytest.fail(f"compiled {unit.name}"))
    result = verdict(KERNEL.config_type.parse(key), Problem(head_dim=128), GpuSpec.from_name(target), None)
    assert not result.launchable and words in result.reason, result.reason


def test_the_dq_pass_fields_do_not_count_where_dq_is_accumulated():
    """With dq_mode 1 or 2 no dQ pass runs: its tiles cannot make a config invalid."""
    config = KERNEL.config_type.parse("64x64_w4_s2_q128x128_w4_s2_dq1")
    assert KERNEL.restriction(config, 128) is None
    assert [u.name for u in KERNEL.compile_units(config, Problem(head_dim=128))] == [
        "bwd_preprocess_kernel", "bwd_kv_kernel", "bwd_dq_finish_kernel"]


def test_the_sweep_tunes_the_backward_through_every_stage(tiny_bwd, tmp_path, sweep_args, query):
    db = tmp_path / "bwd.db"
    assert sweep.main(sweep_args(tiny_bwd, db, "--sampler", "grid", "--finalists", "2", "--rounds", "2")) == 0
    rows = query(db, "select config, status, pass_, kernel, errors, ms from fa2_results")
    assert len(rows) == 2 * 4 and {r[1] for r in rows} == {"timed"} and {(r[2], r[3]) for r in rows} == {("bwd",
                                                                                                      "triton")}
    for row in rows:
        errors = json.loads(row[4])
        assert set(errors) == {"dq", "dk", "dv"} and all(e["error"] <= e["bound"] for e in errors.values())
    store = Store(f"sqlite:///{db}", create=False)
    emitted = emit.emit(store, load(str(tiny_bwd)), GpuSpec.from_name("sm_89"), None, top=1)
    namespace: dict = {}
    exec(emitted.text, namespace)                                           # noqa: S102 (our own text)
    assert namespace["CONFIGS"] and all(isinstance(c, kernel.BwdConfig) for c in namespace["CONFIGS"])
    assert {KERNEL.from_triton(c).key for c in namespace["CONFIGS"]} == {e.config.key for e in emitted.entries}
    tuned = AutotunedBackward(namespace["CONFIGS"])
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = kernel.flash_attention(q, k, v, True, bwd_config=tuned)
    dout = torch.randn_like(out)
    out.backward(dout)
    expected = _autograd(q, k, v, dout, True)
    assert grad_accuracy((q.grad, k.grad, v.grad), expected, expected, torch.float32).ok
    assert tuned.chosen(q, k, True) == namespace["CONFIGS"][0]


def _autograd(q, k, v, dout, causal):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, _ = kernel.attention_reference(*leaves, causal, dtype=torch.float64)
    return torch.autograd.grad(out, leaves, dout.double())


def test_the_gate_catches_a_wrong_gradient(tiny_bwd, tmp_path, sweep_args, query, monkeypatch):
    """The worker's planted fault scales dq by 1.01 for one config: only that config is incorrect,
    with dq named in the reason."""
    bad = "32x16_w1_s1_q16x16_w1_s1"
    monkeypatch.setenv(FAULT_ENV, f"{bad}:wrong")
    db = tmp_path / "fault.db"
    assert sweep.main(sweep_args(tiny_bwd, db, "--sampler", "grid", "--finalists", "0")) == 0
    rows = dict(query(db, "select config, status from fa2_results"))
    assert rows.pop(bad) == "incorrect" and set(rows.values()) == {"timed"}
    reasons = [r[0] for r in query(db, "select reason from fa2_results where status = 'incorrect'")]
    assert all("dq rel err" in reason for reason in reasons)


def test_the_registry_lists_every_pass():
    assert {"triton (fwd)", "triton (bwd)", "triton (fwd+bwd)"} <= set(kernels.registered())
    assert os.environ.get("TRITON_INTERPRET") or torch.cuda.is_available()
