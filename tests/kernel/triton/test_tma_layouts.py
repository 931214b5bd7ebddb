"""TMA descriptors take each tensor's own strides: V (and the backward's dO) in another layout
than K (and Q), so a descriptor built with another tensor's row stride reads the wrong rows.

The interpreter runs the descriptor path (rows past the end come back as zeros), so fp32 on
the CPU catches a stride mix-up; bf16 at a real size on the GPU, where the copy engine reads them.
Outputs are NaN-filled first.
"""

from __future__ import annotations

import pytest
import torch

import kernel
from kernel.reference import grad_accuracy


def _strided(b, h, n, d, device, dtype):
    """[B, H, N, D] values stored as [B, N, H, D]: rows of H*D elements, not D."""
    return torch.randn(b, n, h, d, device=device, dtype=dtype).transpose(1, 2)


def _nan_like(t):
    return torch.full(t.shape, float("nan"), device=t.device, dtype=t.dtype)


def _forward_case(device, dtype, n_q, n_k, d):
    q = torch.randn(2, 3, n_q, d, device=device, dtype=dtype)
    return q, torch.randn(2, 3, n_k, d, device=device, dtype=dtype), _strided(2, 3, n_k, d, device, dtype)


def _forward_check(q, k, v, causal, assert_matches_reference, **config):
    out, lse = _nan_like(q), torch.full(q.shape[:-1], float("nan"), device=q.device)
    kernel.flash_attn_fwd(q, k, v, causal, out=out, lse=lse, tma=True, **config)
    assert_matches_reference(out, lse, q, k, v, causal, seed=None, label=f"tma {config}")


def _backward_check(q, k, v, dout, causal, reference_dtype, **config):
    out, lse = kernel.flash_attn_fwd(q, k, v, causal)
    dq, dk, dv = _nan_like(q), _nan_like(k), _nan_like(v.contiguous())
    got = kernel.flash_attn_bwd(dout, q, k, v, out, lse, causal, dq=dq, dk=dk, dv=dv, tma=True, **config)
    leaves = [t.detach().to(reference_dtype).requires_grad_() for t in (q, k, v)]
    reference_out, _ = kernel.attention_reference(*leaves, causal)
    reference = torch.autograd.grad(reference_out, leaves, dout.to(reference_dtype))
    mine = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    from kernel.reference import causal_keep

    mask = causal_keep(q.shape[-2], k.shape[-2], q.device) if causal else None
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        theirs = torch.nn.functional.scaled_dot_product_attention(*mine, attn_mask=mask)
    verdict = grad_accuracy(got, reference, torch.autograd.grad(theirs, mine, dout), q.dtype)
    assert verdict.ok, f"{config} {verdict.reason}"


@pytest.mark.parametrize("causal", [False, True])
def test_forward_tma_reads_v_with_its_own_strides(device, causal, assert_matches_reference):
    torch.manual_seed(41)
    q, k, v = _forward_case(device, torch.float32, 37, 45, 16)
    _forward_check(q, k, v, causal, assert_matches_reference, block_m=16, block_n=16, num_warps=4, num_stages=2)


@pytest.mark.parametrize("dq_mode", ["pass", "atomic"])
def test_backward_tma_reads_v_and_dout_with_their_own_strides(device, dq_mode):
    torch.manual_seed(43)
    q, k, v = _forward_case(device, torch.float32, 37, 45, 16)
    dout = _strided(2, 3, 37, 16, device, torch.float32)
    _backward_check(q, k, v, dout, True, torch.float64, block_m=16, block_n=16, dq_mode=dq_mode)


@pytest.mark.gpu
@pytest.mark.parametrize("persistent", [0, 2])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_forward_tma_with_v_strided_unlike_k_on_a_gpu(head_dim, causal, persistent, assert_matches_reference):
    torch.manual_seed(47)
    q, k, v = _forward_case("cuda", torch.bfloat16, 1031, 777, head_dim)
    _forward_check(q, k, v, causal, assert_matches_reference, block_m=128, block_n=64, num_warps=8, num_stages=3,
                   persistent=persistent)


@pytest.mark.gpu
@pytest.mark.parametrize("dq_mode", ["pass", "atomic", "tma"])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_tma_with_v_and_dout_strided_unlike_k_and_q_on_a_gpu(causal, dq_mode):
    torch.manual_seed(53)
    q, k, v = _forward_case("cuda", torch.bfloat16, 517, 389, 64)
    dout = _strided(2, 3, 517, 64, "cuda", torch.bfloat16)
    _backward_check(q, k, v, dout, causal, torch.float32, block_m=64, block_n=64, num_warps=4, num_stages=2,
                    dq_mode=dq_mode)
