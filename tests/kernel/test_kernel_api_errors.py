"""Kernel calls that used to fail deep inside Triton or PyTorch now fail at the call, naming the argument
(issue 43): dq_mode="tma" without a GPU, a bwd_config of the wrong kind, a double backward; and what
non-finite inputs give."""

from __future__ import annotations

import pytest
import torch

import kernel


def _inputs(n=16, d=16, dtype=torch.float32, grad=False):
    torch.manual_seed(0)
    return [torch.randn(1, 2, n, d, dtype=dtype, requires_grad=grad) for _ in range(3)]


def test_dq_mode_tma_without_a_gpu_names_what_it_needs():
    q, k, v = _inputs()
    out, lse = kernel.flash_attn_fwd(q, k, v)
    with pytest.raises(ValueError, match="dq_mode='tma'.*needs a CUDA GPU.*use dq_mode='pass' or 'atomic'"):
        kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, dq_mode="tma")


@pytest.mark.parametrize("knob, value, allowed", [
    ("num_stages", 10 ** 6, "must be an integer from 1 to 8"),       # the 2026-12-04 evening battery
    ("num_stages", 9, "must be an integer from 1 to 8"),
    ("persistent", 10 ** 9, r"must be 0 \(a program per tile\) or 1 to 8 programs per SM"),
    ("persistent", 9, r"must be 0 \(a program per tile\) or 1 to 8 programs per SM"),
    ("persistent", -1, r"must be 0 \(a program per tile\) or 1 to 8 programs per SM"),
])
def test_pipeline_stages_and_programs_per_sm_out_of_bounds_are_refused_by_name(knob, value, allowed):
    """Bug caught: flash_attn_fwd(num_stages=10**6, persistent=10**9) was accepted (a compile per value, a grid
    clipped to the tiles); the backward took them too. Bounds of the tuner's config space (1 to 8, 0 to 8)."""
    q, k, v = _inputs()
    with pytest.raises(ValueError, match=rf"{knob}={value} {allowed}"):
        kernel.flash_attn_fwd(q, k, v, **{knob: value})
    out, lse = kernel.flash_attn_fwd(q, k, v)
    backward_knob = "num_stages_q" if knob == "num_stages" else knob
    with pytest.raises(ValueError, match=rf"{backward_knob}={value} {allowed}"):
        kernel.flash_attn_bwd(torch.randn_like(q), q, k, v, out, lse, **{backward_knob: value})


def test_the_largest_stages_and_programs_per_sm_still_run():
    q, k, v = _inputs()
    out, _ = kernel.flash_attn_fwd(q, k, v, block_m=16, block_n=16, num_warps=1, num_stages=8, persistent=8)
    reference, _ = kernel.attention_reference(q, k, v, False, dtype=torch.float64)
    assert torch.allclose(out.double(), reference, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("bad", ["fast", 3, dict(block_m=64)])
def test_a_bwd_config_of_the_wrong_kind_is_refused_at_the_call(bad):
    q, k, v = _inputs(grad=True)
    with pytest.raises(TypeError, match="bwd_config must be None, a kernel.BwdConfig"):
        kernel.flash_attention(q, k, v, bwd_config=bad)


def test_a_forward_that_is_not_callable_is_refused_at_the_call():
    q, k, v = _inputs(grad=True)
    with pytest.raises(TypeError, match="fwd must be a forward entry point"):
        kernel.flash_attention(q, k, v, fwd="triton")


def test_a_double_backward_is_refused_by_name():
    q, k, v = _inputs(grad=True)
    out = kernel.flash_attention(q, k, v)
    with pytest.raises(RuntimeError, match="flash_attention has no double backward"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    (dq,) = torch.autograd.grad(kernel.flash_attention(q, k, v).sum(), q)      # a plain backward still works
    assert dq.shape == q.shape and torch.isfinite(dq).all()


@pytest.mark.parametrize("where, causal", [("q", False), ("q", True), ("k", False)])
def test_a_non_finite_input_gives_what_the_float64_reference_gives(where, causal):
    """+inf in a query (or -inf in a key): rows the float64 reference gives a number for, ours give the
    same number; rows it gives NaN for (softmax of an infinite score), ours give a non-finite out and lse:
    never a finite wrong value. Every other row is untouched."""
    q, k, v = _inputs(n=24)
    if where == "q":
        q[0, 0, 5, 3] = float("inf")
    else:
        k[0, 1, 7, 2] = float("-inf")
    out, lse = kernel.flash_attn_fwd(q, k, v, causal)
    reference, _ = kernel.attention_reference(q, k, v, causal, dtype=torch.float64)
    finite = torch.isfinite(reference).all(-1)
    assert not finite.all(), "the reference reads the bad value"
    assert not torch.isfinite(out[~finite]).all(-1).any() and not torch.isfinite(lse[~finite]).any()
    assert torch.allclose(out[finite].double(), reference[finite], atol=1e-4, rtol=1e-4)
