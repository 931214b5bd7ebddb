"""FlashAttention-2 forward in Triton: one program per (query tile, batch x head).

Read top to bottom: the kernel, then the description of its arguments that the
launcher and the tuner's cross-compiler share, then the launcher and the autograd
wrapper. This file imports nothing from ``tuner``; copy it into your own code.

Conventions:
    * ``q``: [B, H, N_q, D] or [B, N_q, D]; ``k``, ``v``: [B, H, N_k, D] or [B, N_k, D].
    * causal masks key ``j`` for query ``i`` unless ``j <= i`` (top-left aligned, as
      ``torch.tril`` on the [N_q, N_k] score matrix).
    * ``lse`` is the natural-log logsumexp of each row of scaled scores, fp32,
      [B, H, N_q] (or [B, N_q]). A row with no valid key (only when N_k == 0) gets
      ``out = 0`` and ``lse = -inf``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = tl.constexpr(0.6931471805599453)  # a constexpr: the compiled kernel reads it

HEAD_DIMS = (16, 32, 64, 128, 256)
# Compile options the launcher and the tuner's cross-compiler both pass, so neither
# depends on a Triton default (3.9 warns that fp fusion's default will change).
COMPILE_OPTIONS = {"enable_fp_fusion": True}
DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


# ----------------------------------------------------------------------------- kernel


@triton.jit
def _attend_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                  key_start, key_stop, offs_m, offs_n, N_K, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    """Fold key tiles [key_start, key_stop) into the running softmax state.

    ``m_i`` is kept in log2 units (scores times ``scale * log2(e)``), so the inner
    loop uses exp2 and one fused multiply-add per score. Only MASKED calls (the
    ragged last key tile, and the tiles that straddle the causal diagonal) pay for
    bounds checks, the mask, and the guard for rows that have seen no valid key yet.
    """
    for start_n in range(key_start, key_stop, BLOCK_N):
        offs_key = start_n + offs_n                                        # [BLOCK_N]
        if MASKED:
            in_bounds = offs_key[:, None] < N_K                            # [BLOCK_N, 1]
            k = tl.load(k_ptrs + start_n * stride_kn, mask=in_bounds, other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=in_bounds, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn)                      # [BLOCK_N, D]
            v = tl.load(v_ptrs + start_n * stride_vn)                      # [BLOCK_N, D]
        qk = tl.dot(q, tl.trans(k))                                        # [BLOCK_M, BLOCK_N] fp32
        if MASKED:
            keep = offs_key[None, :] < N_K
            if CAUSAL:
                keep = keep & (offs_key[None, :] <= offs_m[:, None])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))                        # [BLOCK_M]
            # A row whose keys so far are all masked has m_new == -inf; subtracting
            # 0 instead keeps exp2(-inf - m) at exactly 0 rather than NaN.
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_sub[:, None])                          # [BLOCK_M, BLOCK_N]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_sub = m_new
            p = tl.math.exp2(qk * qk_scale - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)                                  # [BLOCK_M] rescale of the old state
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)                                # [BLOCK_M, D] fp32
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _flash_fwd_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, N_Q, N_K, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    # Causal query tiles near the end of the sequence do the most work; launching them
    # first keeps the last wave of programs short.
    tile_m = tl.program_id(0)
    if CAUSAL:
        tile_m = tl.num_programs(0) - 1 - tile_m
    pid_bh = tl.program_id(1)
    batch = (pid_bh // H).to(tl.int64)
    head = (pid_bh % H).to(tl.int64)
    start_m = tile_m * BLOCK_M

    offs_m = start_m + tl.arange(0, BLOCK_M)                               # [BLOCK_M]
    offs_n = tl.arange(0, BLOCK_N)                                         # [BLOCK_N]
    offs_d = tl.arange(0, HEAD_DIM)                                        # [D]
    q_ptrs = Q + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    k_ptrs = K + batch * stride_kb + head * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + batch * stride_vb + head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]

    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)             # [BLOCK_M, D]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Key tiles split in two: [0, full_stop) where every key is valid for every row
    # of this tile, then [full_stop, key_stop) which needs the mask. Causal tiles
    # above the diagonal (keys past the tile's last query) are never visited.
    if CAUSAL:
        key_stop = tl.minimum(N_K, start_m + BLOCK_M)
        full_stop = (tl.minimum(N_K, start_m + 1) // BLOCK_N) * BLOCK_N
    else:
        key_stop = N_K
        full_stop = (N_K // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                  0, full_stop, offs_m, offs_n, N_K, qk_scale,
                                  MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N)
    acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                  full_stop, key_stop, offs_m, offs_n, N_K, qk_scale,
                                  MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N)

    # Rows with no valid key (N_K == 0) have l_i == 0: write 0 and lse = -inf.
    has_key = l_i > 0.0
    out = acc / tl.where(has_key, l_i, 1.0)[:, None]                       # [BLOCK_M, D]
    lse = tl.where(has_key, m_i * LN2 + tl.log(tl.where(has_key, l_i, 1.0)), float("-inf"))  # [BLOCK_M], ln
    o_ptrs = O + batch * stride_ob + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < N_Q)
    tl.store(LSE + pid_bh.to(tl.int64) * N_Q + offs_m, lse, mask=offs_m < N_Q)


# ------------------------------------------- the kernel's arguments, shared with the tuner


@dataclass(frozen=True)
class LaunchShape:
    """Everything about a launch that the JIT specialises on, except the pointers.

    Strides are (batch, head, row) in elements; the unit stride of the head dimension
    is not an argument at all (the launcher makes it 1), so it can never be
    specialised differently by the launcher and the cross-compiler.
    """

    batch: int
    heads: int
    n_q: int
    n_k: int
    head_dim: int
    q_strides: tuple[int, int, int]
    k_strides: tuple[int, int, int]
    v_strides: tuple[int, int, int]
    o_strides: tuple[int, int, int]

    @classmethod
    def contiguous(cls, batch: int, heads: int, n_q: int, n_k: int, head_dim: int) -> "LaunchShape":
        """The shape of contiguous [B, H, N, D] tensors, as the tuner assumes."""
        q = (heads * n_q * head_dim, n_q * head_dim, head_dim)
        k = (heads * n_k * head_dim, n_k * head_dim, head_dim)
        return cls(batch, heads, n_q, n_k, head_dim, q, k, k, q)


def kernel_arguments(pointers: Sequence[Any], shape: LaunchShape, causal: bool) -> list[tuple[str, Any]]:
    """The runtime arguments of ``_flash_fwd_kernel`` in order, as (name, value).

    ``pointers`` are (q, k, v, out, lse): tensors at launch, or stand-ins for the
    cross-compiler. Both paths go through this one function.
    """
    scale = 1.0 / math.sqrt(shape.head_dim)
    return [
        ("Q", pointers[0]), ("K", pointers[1]), ("V", pointers[2]), ("O", pointers[3]), ("LSE", pointers[4]),
        ("stride_qb", shape.q_strides[0]), ("stride_qh", shape.q_strides[1]), ("stride_qm", shape.q_strides[2]),
        ("stride_kb", shape.k_strides[0]), ("stride_kh", shape.k_strides[1]), ("stride_kn", shape.k_strides[2]),
        ("stride_vb", shape.v_strides[0]), ("stride_vh", shape.v_strides[1]), ("stride_vn", shape.v_strides[2]),
        ("stride_ob", shape.o_strides[0]), ("stride_oh", shape.o_strides[1]), ("stride_om", shape.o_strides[2]),
        ("H", shape.heads), ("N_Q", shape.n_q), ("N_K", shape.n_k), ("qk_scale", scale * LOG2E),
    ]


def _int_type(value: int) -> str:
    return "i32" if -(2**31) <= value < 2**31 else "i64"


def compile_source(dtype: torch.dtype, shape: LaunchShape, causal: bool, block_m: int, block_n: int):
    """The ``triton.compile`` inputs the JIT would build for this launch.

    Mirrors Triton's run-time specialisation (3.6 to 3.9): pointers 16-byte aligned
    (torch allocations are), integers divisible by 16 get ``tt.divisibility = 16``,
    integers equal to 1 become constexprs. Without the divisibility hints Triton does
    not pipeline the loads and shared memory no longer depends on ``num_stages``.

    Returns:
        ``(signature, constexprs, attrs)`` for ``triton.compiler.ASTSource``.
    """
    ptr_type = "*" + DTYPES[dtype]
    pointers = [ptr_type] * 4 + ["*fp32"]
    signature: dict[str, str] = {}
    constexprs: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    divisible = [["tt.divisibility", 16]]
    for index, (name, value) in enumerate(kernel_arguments(pointers, shape, causal)):
        if isinstance(value, str):
            signature[name] = value
            attrs[(index,)] = divisible
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value == 1:
            signature[name] = "constexpr"
            constexprs[(index,)] = 1
        else:
            signature[name] = _int_type(value)
            if value % 16 == 0:
                attrs[(index,)] = divisible
    first_constexpr = len(signature)
    for offset, (name, value) in enumerate(
        [("HEAD_DIM", shape.head_dim), ("BLOCK_M", block_m), ("BLOCK_N", block_n), ("CAUSAL", bool(causal))]
    ):
        signature[name] = "constexpr"
        constexprs[(first_constexpr + offset,)] = value
    return signature, constexprs, attrs


# ------------------------------------------------------------------------------ launcher


def interpreting() -> bool:
    """True when Triton runs kernels in its numpy interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _is_pow2(value: int) -> bool:
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name} must be [B, H, N, D] or [B, N, D]; got {t.ndim} dims, shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype is {t.dtype}; supported: float32, float16, bfloat16")
        if t.device.type != "cuda" and not interpreting():
            raise ValueError(
                f"{name} is on {t.device}; the kernel needs CUDA tensors "
                "(or TRITON_INTERPRET=1 set before importing kernel, to run on the CPU)"
            )
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"q, k, v must have the same rank; got {q.ndim}, {k.ndim}, {v.ndim}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q and k must agree on batch (and heads); got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim; got {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim {q.shape[-1]} is not supported; use one of {HEAD_DIMS}")


def _check_config(block_m: int, block_n: int, num_warps: int, num_stages: int) -> None:
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if not _is_pow2(value) or value < 16:
            raise ValueError(f"{name}={value!r} must be a power of two >= 16 (tl.dot's smallest tile)")
    if not _is_pow2(num_warps) or num_warps > 32:
        raise ValueError(f"num_warps={num_warps!r} must be a power of two from 1 to 32")
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"num_stages={num_stages!r} must be an integer >= 1")


def default_config(head_dim: int, causal: bool = False, capability: int | None = None) -> dict[str, int]:
    """A good hand-picked config; the tuner finds better ones for your GPU and shape.

    Hopper values are the fastest of 16 candidates timed on an H200 at N=4096, bf16
    (docs/results/2026-11-30-h200-kernel-bench.md). Elsewhere the values are chosen to
    fit Ada's 99 KB of shared memory per block.

    Args:
        head_dim: D.
        causal: whether the launch is causal.
        capability: compute capability as an int (90 for sm_90); default the current
            CUDA device, or a non-Hopper choice without one.
    """
    if capability is None:
        capability = 0
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            capability = 10 * major + minor
    hopper = 90 <= capability < 100
    if head_dim <= 64:
        if hopper and causal:
            return dict(block_m=64, block_n=64, num_warps=4, num_stages=3)
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    if head_dim == 128:
        if hopper:
            if causal:
                return dict(block_m=64, block_n=64, num_warps=4, num_stages=3)
            return dict(block_m=128, block_n=128, num_warps=8, num_stages=3)
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=2)
    return dict(block_m=64, block_n=32, num_warps=4, num_stages=1)


def _output(given, name, shape, dtype, device, allocate):
    if given is None:
        return allocate()
    if tuple(given.shape) != tuple(shape) or given.dtype != dtype or given.device != device:
        raise ValueError(f"{name} must be {tuple(shape)} {dtype} on {device}; got {tuple(given.shape)} {given.dtype} on {given.device}")
    return given


def flash_attn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, *,
                   block_m: int | None = None, block_n: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None,
                   out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
                   _return_compiled: bool = False):
    """FlashAttention-2 forward.

    Args:
        q: [B, H, N_q, D] or [B, N_q, D], float32/float16/bfloat16.
        k: [B, H, N_k, D] or [B, N_k, D], same dtype and device as ``q``.
        v: same shape as ``k``.
        causal: mask key j for query i unless j <= i (top-left aligned).
        block_m, block_n: query and key tile sizes, powers of two >= 16.
        num_warps, num_stages: Triton launch options. Unset values come from
            :func:`default_config`.
        out, lse: optional preallocated outputs (shapes as returned); tests fill
            them with NaN so that an element the kernel never writes shows up.

    Returns:
        ``(out, lse)``: ``out`` like ``q``; ``lse`` fp32 [B, H, N_q] (or [B, N_q]),
        the natural-log logsumexp of each row of scaled scores.
    """
    _check_inputs(q, k, v)
    if None in (block_m, block_n, num_warps, num_stages):  # a tuned call skips the device query
        defaults = default_config(q.shape[-1], causal)
        block_m = defaults["block_m"] if block_m is None else block_m
        block_n = defaults["block_n"] if block_n is None else block_n
        num_warps = defaults["num_warps"] if num_warps is None else num_warps
        num_stages = defaults["num_stages"] if num_stages is None else num_stages
    _check_config(block_m, block_n, num_warps, num_stages)
    launch = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)
    return _launch(_flash_fwd_kernel, q, k, v, causal, launch, out, lse, _return_compiled)


def _launch(kernel, q, k, v, causal, launch: dict, out, lse, return_compiled: bool = False):
    """Run ``kernel`` (the JIT function, or an autotuner over it) on checked inputs.

    ``launch`` holds BLOCK_M, BLOCK_N, num_warps and num_stages, or nothing when an
    autotuner supplies them; the grid reads BLOCK_M from whichever config runs.
    """
    three_d = q.ndim == 3
    q4, k4, v4 = (t.unsqueeze(1) if three_d else t for t in (q, k, v))   # [B, H, N, D]
    q4, k4, v4 = (t if t.stride(-1) == 1 else t.contiguous() for t in (q4, k4, v4))
    batch, heads, n_q, head_dim = q4.shape
    n_k = k4.shape[2]
    out = _output(out, "out", q.shape, q.dtype, q.device, lambda: torch.empty(q.shape, device=q.device, dtype=q.dtype))
    lse = _output(lse, "lse", q.shape[:-1], torch.float32, q.device, lambda: torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32))
    if three_d:
        out, lse = out.unsqueeze(1), lse.unsqueeze(1)                   # [B, 1, N_q, D], [B, 1, N_q]
    if out.stride(-1) != 1 or not lse.is_contiguous():
        raise ValueError("out needs a unit last stride and lse must be contiguous")

    shape = LaunchShape(batch, heads, n_q, n_k, head_dim,
                        tuple(q4.stride()[:3]), tuple(k4.stride()[:3]), tuple(v4.stride()[:3]),
                        tuple(out.stride()[:3]))
    compiled = None
    if batch * heads * n_q > 0:
        def grid(meta):
            return (triton.cdiv(n_q, meta["BLOCK_M"]), batch * heads)

        args = [value for _, value in kernel_arguments((q4, k4, v4, out, lse), shape, causal)]
        compiled = kernel[grid](*args, HEAD_DIM=head_dim, CAUSAL=bool(causal), **launch, **COMPILE_OPTIONS)
    if three_d:
        out, lse = out.squeeze(1), lse.squeeze(1)
    if return_compiled:
        return out, lse, compiled
    return out, lse


class FlashAttention(torch.autograd.Function):
    """Autograd wrapper; the backward pass is not written yet."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = flash_attn_fwd(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        raise NotImplementedError(
            "flash_attention has no backward pass yet (a tiled FA2 backward is planned); "
            "use torch.nn.functional.scaled_dot_product_attention where you need gradients"
        )


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Attention output of :func:`flash_attn_fwd` as an autograd op (forward only)."""
    return FlashAttention.apply(q, k, v, causal)
