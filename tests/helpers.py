"""Shared test helpers: fresh random inputs and the correctness bound."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from kernel import attention_reference

# Floors of the relative error bound, against a float32 reference. fp32 dots run as
# tf32 on the GPU (Triton's default), about 3e-4; the interpreter is exact.
ERROR_FLOOR = {torch.float32: 2e-3, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}
# The kernel's error may be at most this multiple of PyTorch's own error at that dtype.
TORCH_ERROR_MULTIPLE = 3.0


def fresh_inputs(shape_q, shape_kv, dtype, device):
    """New random q, k, v for every call (never a fixed seed); returns the seed too."""
    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(s, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
               for s in (shape_q, shape_kv, shape_kv))
    return q, k, v, seed


def nan_outputs(q):
    """Outputs filled with NaN, so an element the kernel does not write fails the check."""
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    return out, lse


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).norm() / expected.norm().clamp_min(1e-30)).item()


def torch_low_precision_error(q, k, v, causal, ref_out) -> float:
    """PyTorch SDPA's own error at q's dtype against the float32 reference."""
    if q.dtype == torch.float32:
        return 0.0
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal and n_q != n_k:
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return rel_err(out, ref_out)


def assert_matches_reference(out, lse, q, k, v, causal, seed, label=""):
    """The flash-attention test rule: error vs a float32 reference within a small
    multiple of PyTorch's own low-precision error (or a floor), no NaN, lse checked."""
    assert not torch.isnan(out).any(), f"{label} out has NaN (unwritten or bad math), seed {seed}"
    assert not torch.isnan(lse).any(), f"{label} lse has NaN, seed {seed}"
    ref_out, ref_lse = attention_reference(q, k, v, causal)
    bound = max(ERROR_FLOOR[q.dtype], TORCH_ERROR_MULTIPLE * torch_low_precision_error(q, k, v, causal, ref_out))
    err_out = rel_err(out, ref_out)
    err_lse = rel_err(lse, ref_lse)
    assert err_out <= bound, f"{label} out rel err {err_out:.2e} > {bound:.2e}, seed {seed}"
    assert err_lse <= ERROR_FLOOR[q.dtype], f"{label} lse rel err {err_lse:.2e}, seed {seed}"
    return err_out, err_lse
