"""FlashAttention-2 backward in Triton, and the autograd op that joins it to the forward.

Read top to bottom: the two kernels, the launcher, the autograd op. The forward
(:mod:`kernel.flash_fwd`) stores ``lse``, the natural-log logsumexp of each row of
scaled scores, so the backward recomputes the probabilities tile by tile,
``P = exp(S - lse)``, instead of storing them. With ``delta = rowsum(dO * O)`` (one
number per query row, computed first):

    dV = P^T dO        dP = dO V^T        dS = P * (dP - delta)
    dK = scale * dS^T Q                   dQ = scale * dS K

Two passes, so that no program writes where another one does: ``_bwd_kv_kernel`` owns a
key tile and walks the query tiles that see it (dK, dV); ``_bwd_q_kernel`` owns a query
tile and walks its key tiles (dQ). Conventions are the forward's: ``[B, H, N, D]`` or
``[B, N, D]``, causal is top-left (key ``j`` is seen by query ``i`` when ``j <= i``), and a
row with no valid key (``lse = -inf``, only when N_k == 0) gets zero gradients, never NaN.
Copy this file together with ``flash_fwd.py``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernel.flash_fwd import check_inputs as _check_inputs, flash_attn_fwd

# ----------------------------------------------------------------------------- kernels


@triton.jit
def _load_rows(base, index, stride, offs_d, n):
    """Rows ``index`` of an [n, D] matrix at ``base`` with row stride ``stride``; zeros past ``n``."""
    return tl.load(base + index[:, None] * stride + offs_d[None, :], mask=index[:, None] < n, other=0.0)


@triton.jit
def _row_stats(LSE, DELTA, pid_bh, rows, N_Q):
    """The forward's lse and the precomputed delta = rowsum(dO * O) of query ``rows``."""
    first = pid_bh.to(tl.int64) * N_Q
    return (tl.load(LSE + first + rows, mask=rows < N_Q, other=0.0),
            tl.load(DELTA + first + rows, mask=rows < N_Q, other=0.0))


@triton.jit
def _probabilities(q, k, lse, rows, cols, N_Q, N_K, sm_scale, CAUSAL: tl.constexpr):
    """P = exp(scale * q k^T - lse) on one [BLOCK_M, BLOCK_N] tile, 0 where masked."""
    qk = tl.dot(q, tl.trans(k)) * sm_scale                                # [BLOCK_M, BLOCK_N] fp32
    keep = (rows[:, None] < N_Q) & (cols[None, :] < N_K) & (lse[:, None] != float("-inf"))
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None])
    return tl.where(keep, tl.exp(qk - lse[:, None]), 0.0)


@triton.jit
def _bwd_kv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, stride_kgb, stride_kgh, stride_kgn, stride_vgb, stride_vgh, stride_vgn,
    H, N_Q, N_K, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    pid_bh = tl.program_id(1)
    batch = (pid_bh // H).to(tl.int64)
    head = (pid_bh % H).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    cols = start_n + tl.arange(0, BLOCK_N)                                # [BLOCK_N] keys of this program
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + batch * stride_qb + head * stride_qh
    do_base = DO + batch * stride_ob + head * stride_oh
    k = _load_rows(K + batch * stride_kb + head * stride_kh, cols, stride_kn, offs_d, N_K)   # [BLOCK_N, D]
    v = _load_rows(V + batch * stride_vb + head * stride_vh, cols, stride_vn, offs_d, N_K)   # [BLOCK_N, D]
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # Causal: query rows before this tile's first key never see it.
    first = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(first, N_Q, BLOCK_M):
        rows = start_m + offs_m                                           # [BLOCK_M]
        q = _load_rows(q_base, rows, stride_qm, offs_d, N_Q)              # [BLOCK_M, D]
        do = _load_rows(do_base, rows, stride_om, offs_d, N_Q)            # [BLOCK_M, D]
        lse, delta = _row_stats(LSE, DELTA, pid_bh, rows, N_Q)            # [BLOCK_M] each
        p = _probabilities(q, k, lse, rows, cols, N_Q, N_K, sm_scale, CAUSAL)  # [BLOCK_M, BLOCK_N]
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv)                    # [BLOCK_N, D]
        dp = tl.dot(do, tl.trans(v))                                      # [BLOCK_M, BLOCK_N]
        ds = p * (dp - delta[:, None])
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk)                     # [BLOCK_N, D]
    dk = dk * sm_scale
    col_ok = cols[:, None] < N_K
    tl.store(DK + batch * stride_kgb + head * stride_kgh + cols[:, None] * stride_kgn + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=col_ok)
    tl.store(DV + batch * stride_vgb + head * stride_vgh + cols[:, None] * stride_vgn + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=col_ok)


@triton.jit
def _bwd_q_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, stride_qgb, stride_qgh, stride_qgm,
    H, N_Q, N_K, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    pid_bh = tl.program_id(1)
    batch = (pid_bh // H).to(tl.int64)
    head = (pid_bh % H).to(tl.int64)
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)                                # [BLOCK_M] queries of this program
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k_base = K + batch * stride_kb + head * stride_kh
    v_base = V + batch * stride_vb + head * stride_vh
    q = _load_rows(Q + batch * stride_qb + head * stride_qh, rows, stride_qm, offs_d, N_Q)   # [BLOCK_M, D]
    do = _load_rows(DO + batch * stride_ob + head * stride_oh, rows, stride_om, offs_d, N_Q)  # [BLOCK_M, D]
    lse, delta = _row_stats(LSE, DELTA, pid_bh, rows, N_Q)                # [BLOCK_M] each
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Causal: keys after this tile's last query are never seen.
    key_stop = tl.minimum(N_K, start_m + BLOCK_M) if CAUSAL else N_K
    for start_n in range(0, key_stop, BLOCK_N):
        cols = start_n + offs_n                                           # [BLOCK_N]
        k = _load_rows(k_base, cols, stride_kn, offs_d, N_K)              # [BLOCK_N, D]
        v = _load_rows(v_base, cols, stride_vn, offs_d, N_K)              # [BLOCK_N, D]
        p = _probabilities(q, k, lse, rows, cols, N_Q, N_K, sm_scale, CAUSAL)  # [BLOCK_M, BLOCK_N]
        dp = tl.dot(do, tl.trans(v))                                      # [BLOCK_M, BLOCK_N]
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)                                # [BLOCK_M, D]
    dq = dq * sm_scale
    tl.store(DQ + batch * stride_qgb + head * stride_qgh + rows[:, None] * stride_qgm + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=rows[:, None] < N_Q)


# ----------------------------------------------------------------------------- launcher


def _four_dims(t: torch.Tensor) -> torch.Tensor:
    """[B, N, D] as [B, 1, N, D]; the last dim made unit-stride (the kernels assume it)."""
    t = t.unsqueeze(1) if t.ndim == 3 else t
    return t if t.stride(-1) == 1 else t.contiguous()


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def flash_attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, causal: bool = False, *, block_m: int = 64, block_n: int = 64,
                   num_warps: int = 4, num_stages: int = 1, block_m_q: int | None = None,
                   block_n_q: int | None = None):
    """Gradients of ``out = attention(q, k, v)`` given ``dout``, from the forward's ``out`` and ``lse``.

    Args:
        dout: the gradient of ``out``, like ``q``.
        q, k, v, out, lse: the forward's inputs and outputs (:func:`kernel.flash_attn_fwd`).
        causal: as in the forward.
        block_m, block_n: the dK/dV pass's query and key tiles (powers of two >= 16).
        block_m_q, block_n_q: the dQ pass's tiles (default: those of the dK/dV pass).
        num_warps, num_stages: Triton launch options of both passes.

    Returns:
        ``(dq, dk, dv)``, like ``q``, ``k`` and ``v``.

    Raises:
        TypeError, ValueError: a bad input or config; the message names it.
    """
    _check_inputs(q, k, v, causal)
    for name, t in (("dout", dout), ("out", out)):
        if not isinstance(t, torch.Tensor) or t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must be like q ({tuple(q.shape)}, {q.dtype}, {q.device}); got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
    if not isinstance(lse, torch.Tensor) or lse.shape != q.shape[:-1] or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 {tuple(q.shape[:-1])}; got {getattr(lse, 'shape', lse)}")
    block_m_q, block_n_q = block_m_q or block_m, block_n_q or block_n
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_m_q", block_m_q),
                        ("block_n_q", block_n_q)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name}={value} must be a power of two >= 16")
    q4, k4, v4, o4, do4 = (_four_dims(t) for t in (q, k, v, out, dout))
    batch, heads, n_q, head_dim = q4.shape
    n_k = k4.shape[2]
    delta = (do4.float() * o4.float()).sum(-1).contiguous()              # [B, H, N_q] fp32
    lse4 = _four_dims(lse.unsqueeze(-1)).squeeze(-1).contiguous()        # [B, H, N_q]
    dq, dk, dv = torch.empty_like(q4), torch.empty_like(k4), torch.empty_like(v4)
    sm_scale = 1.0 / math.sqrt(head_dim)
    common = (*_strides(q4), *_strides(k4), *_strides(v4), *_strides(do4))
    options = dict(HEAD_DIM=head_dim, CAUSAL=causal, num_warps=num_warps, num_stages=num_stages)
    if n_k:
        _bwd_kv_kernel[(triton.cdiv(n_k, block_n), batch * heads)](
            q4, k4, v4, do4, lse4, delta, dk, dv, *common, *_strides(dk), *_strides(dv),
            heads, n_q, n_k, sm_scale, BLOCK_M=block_m, BLOCK_N=block_n, **options)
    if n_q:
        _bwd_q_kernel[(triton.cdiv(n_q, block_m_q), batch * heads)](
            q4, k4, v4, do4, lse4, delta, dq, *common, *_strides(dq),
            heads, n_q, n_k, sm_scale, BLOCK_M=block_m_q, BLOCK_N=block_n_q, **options)
    shaped = [t.squeeze(1) if q.ndim == 3 else t for t in (dq, dk, dv)]
    return tuple(shaped)


# ----------------------------------------------------------------------------- autograd


class FlashAttention(torch.autograd.Function):
    """``out = softmax(q k^T / sqrt(D)) v`` with the FA2 forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = flash_attn_fwd(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attn_bwd(grad_out.contiguous(), q, k, v, out, lse, ctx.causal)
        return dq, dk, dv, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Attention as an autograd op: :func:`kernel.flash_attn_fwd` forward, :func:`flash_attn_bwd` backward."""
    return FlashAttention.apply(q, k, v, causal)
