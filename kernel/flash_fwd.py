"""FlashAttention-2 forward in Triton: one program per (query tile, batch x head).

Read top to bottom: the kernel, the description of its arguments that the launcher
and the tuner's cross-compiler share, the input checks, the launcher (a cached launch
plan per input layout, so a repeated call costs little more than the launch itself),
and the forward's entry point (the autograd op, with the backward, is in
``flash_bwd.py``). This file imports nothing from ``tuner``; copy it into your own code. (It is longer than our ~400-line rule for modules because it is the one
file a user copies, so it must stand alone.)

Conventions:
    * ``q``: [B, H, N_q, D] or [B, N_q, D]; ``k``, ``v``: [B, H, N_k, D] or [B, N_k, D].
    * causal masks key ``j`` for query ``i`` unless ``j <= i`` (top-left aligned, as
      ``torch.tril`` on the [N_q, N_k] score matrix).
    * ``lse`` is the natural-log logsumexp of each row of scaled scores, fp32,
      [B, H, N_q] (or [B, N_q]). A row with no valid key (only when N_k == 0) gets
      ``out = 0`` and ``lse = -inf``; a NaN in ``q`` or ``k`` gives NaN, never -inf.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
def _attend_tiles(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                  key_start, key_stop, offs_m, offs_n, N_K, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
                  TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Fold key tiles [key_start, key_stop) into the running softmax state.

    ``m_i`` is kept in log2 units (scores times ``scale * log2(e)``), so the inner
    loop uses exp2 and one fused multiply-add per score. Only MASKED calls (the
    ragged last key tile, and the tiles that straddle the causal diagonal) pay for
    bounds checks, the mask, and the guard for rows that have seen no valid key yet.
    ``k_src``/``v_src`` are row pointers, or with TMA tensor descriptors of this head's
    [N_K, D] keys, whose loads past N_K come back as zeros.
    """
    for start_n in tl.range(key_start, key_stop, BLOCK_N, warp_specialize=WARP_SPEC):
        offs_key = start_n + offs_n                                        # [BLOCK_N]
        if TMA:
            k = k_src.load([start_n, 0])                                   # [BLOCK_N, D]
            v = v_src.load([start_n, 0])                                   # [BLOCK_N, D]
        elif MASKED:
            in_bounds = offs_key[:, None] < N_K                            # [BLOCK_N, 1]
            k = tl.load(k_src + start_n * stride_kn, mask=in_bounds, other=0.0)
            v = tl.load(v_src + start_n * stride_vn, mask=in_bounds, other=0.0)
        else:
            k = tl.load(k_src + start_n * stride_kn)                       # [BLOCK_N, D]
            v = tl.load(v_src + start_n * stride_vn)                       # [BLOCK_N, D]
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
def _attend_query_tile(Q, K, V, O, LSE, tile_m, pid_bh,
                       stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                       stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                       H, N_Q, N_K, qk_scale,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr, TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Attention for one query tile of one (batch, head): out and lse of its rows."""
    batch = (pid_bh // H).to(tl.int64)
    head = (pid_bh % H).to(tl.int64)
    start_m = tile_m * BLOCK_M

    offs_m = start_m + tl.arange(0, BLOCK_M)                               # [BLOCK_M]
    offs_n = tl.arange(0, BLOCK_N)                                         # [BLOCK_N]
    offs_d = tl.arange(0, HEAD_DIM)                                        # [D]
    q_ptrs = Q + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    if TMA:
        # Descriptors of this head's keys alone: the copy engine zero-fills rows past N_K,
        # so a ragged last tile never reads the next head. (Needs triton.set_allocator.)
        k_src = tl.make_tensor_descriptor(K + batch * stride_kb + head * stride_kh, shape=[N_K, HEAD_DIM],
                                          strides=[stride_kn, 1], block_shape=[BLOCK_N, HEAD_DIM])
        v_src = tl.make_tensor_descriptor(V + batch * stride_vb + head * stride_vh, shape=[N_K, HEAD_DIM],
                                          strides=[stride_vn, 1], block_shape=[BLOCK_N, HEAD_DIM])
    else:
        k_src = K + batch * stride_kb + head * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
        v_src = V + batch * stride_vb + head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]

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
    acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                  0, full_stop, offs_m, offs_n, N_K, qk_scale,
                                  MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, TMA=TMA, WARP_SPEC=WARP_SPEC)
    acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                  full_stop, key_stop, offs_m, offs_n, N_K, qk_scale,
                                  MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, TMA=TMA, WARP_SPEC=False)

    # l_i == 0 only in rows that saw no valid key (N_K == 0): write out = 0, lse = -inf.
    # A NaN in q or k makes l_i NaN, which is not == 0, so NaN reaches out and lse
    # instead of posing as "no key".
    no_key = l_i == 0.0
    out = acc / tl.where(no_key, 1.0, l_i)[:, None]                        # [BLOCK_M, D]
    lse = tl.where(no_key, float("-inf"), m_i * LN2 + tl.log(l_i))         # [BLOCK_M], ln
    o_ptrs = O + batch * stride_ob + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < N_Q)
    tl.store(LSE + pid_bh.to(tl.int64) * N_Q + offs_m, lse, mask=offs_m < N_Q)


# BH (batch x heads) only bounds the persistent loop: specialising on it (a constant 1, or
# divisible by 16) would give the tuner's ragged gate shapes another binary than the timed one.
UNSPECIALISED = ("BH",)


@triton.jit(do_not_specialize=list(UNSPECIALISED))
def _flash_fwd_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, BH, N_Q, N_K, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    TMA: tl.constexpr = False, WARP_SPEC: tl.constexpr = False, PERSISTENT: tl.constexpr = 0,
):
    # Causal query tiles near the end of the sequence do the most work; they go first,
    # so the last wave of programs is short.
    if PERSISTENT > 0:
        # PERSISTENT programs per SM walk the tiles. Non-causal: tile_m fastest, so programs
        # running together share a head's keys in L2. Causal: the heaviest row of tiles
        # first across all heads, then the next lighter one.
        tiles_m = tl.cdiv(N_Q, BLOCK_M)
        for tile in tl.range(tl.program_id(0), tiles_m * BH, tl.num_programs(0)):
            if CAUSAL:
                tile_m = tiles_m - 1 - tile // BH
                pid_bh = tile % BH
            else:
                tile_m = tile % tiles_m
                pid_bh = tile // tiles_m
            _attend_query_tile(Q, K, V, O, LSE, tile_m, pid_bh,
                               stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                               stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                               H, N_Q, N_K, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, TMA, WARP_SPEC)
    else:
        tile_m = tl.program_id(0)
        if CAUSAL:
            tile_m = tl.num_programs(0) - 1 - tile_m
        _attend_query_tile(Q, K, V, O, LSE, tile_m, tl.program_id(1),
                           stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                           stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                           H, N_Q, N_K, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, TMA, WARP_SPEC)


# ------------------------------------------- the kernel's arguments, shared with the tuner


@dataclass(frozen=True)
class LaunchShape:
    """Everything about a launch that the JIT specialises on, except the pointers.

    Strides are (batch, head, row) in elements; the unit stride of the head dimension
    is not an argument at all (the launcher makes it 1), so it can never be
    specialised differently by the launcher and the tuner's cross-compiler.
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
    def contiguous(cls, batch: int, heads: int, n_q: int, n_k: int, head_dim: int) -> LaunchShape:
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
        ("H", shape.heads), ("BH", shape.batch * shape.heads), ("N_Q", shape.n_q), ("N_K", shape.n_k),
        ("qk_scale", scale * LOG2E),
    ]


# The knobs that are constexprs of the kernel, in signature order after CAUSAL, with their defaults.
KNOB_CONSTEXPRS = (("TMA", False), ("WARP_SPEC", False), ("PERSISTENT", 0))

# The knobs after (block_m, block_n, num_warps, num_stages) and their defaults, as the launcher takes them:
# tma, warp_specialize, maxnreg, persistent (programs per SM, 0 for a program per tile).
KNOB_DEFAULTS = (None, None, None, None, False, False, None, 0)

# The kernel arguments whose change makes @triton.autotune tune again (it adds dtypes itself).
AUTOTUNE_KEY = ("N_Q", "N_K", "HEAD_DIM", "CAUSAL")


# ------------------------------------------------------------------------------ checks


def interpreting() -> bool:
    """True when Triton runs kernels in its numpy interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _is_pow2(value: int) -> bool:
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name} must be [B, H, N, D] or [B, N, D]; got {t.ndim} dims, shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype is {t.dtype}; supported: float32, float16, bfloat16")
        if t.device.type != "cuda" and not interpreting():
            raise ValueError(f"{name} is on {t.device}; the kernel needs CUDA tensors "
                             "(or TRITON_INTERPRET=1 set before importing kernel, to run on the CPU)")
    if causal is not True and causal is not False:
        raise TypeError(f"causal must be True or False; got {causal!r} ({type(causal).__name__})")
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"q, k, v must have the same rank; got {q.ndim}, {k.ndim}, {v.ndim}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype == torch.bfloat16 and interpreting():
        raise TypeError("bfloat16 does not work under TRITON_INTERPRET=1: the interpreter's dot multiplies the raw "
                        "bits and returns garbage; use float32 or float16 there, bfloat16 on a GPU")
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


def _is_count(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_config(block_m: int, block_n: int, num_warps: int, num_stages: int, tma: bool = False,
                  warp_specialize: bool = False, maxnreg: int | None = None, persistent: int = 0) -> None:
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if not _is_pow2(value) or value < 16:
            raise ValueError(f"{name}={value!r} must be a power of two >= 16 (tl.dot's smallest tile)")
    if not _is_pow2(num_warps) or num_warps > 32:
        raise ValueError(f"num_warps={num_warps!r} must be a power of two from 1 to 32")
    if not _is_count(num_stages, 1):
        raise ValueError(f"num_stages={num_stages!r} must be an integer >= 1")
    for name, value in (("tma", tma), ("warp_specialize", warp_specialize)):
        if value is not True and value is not False:
            raise TypeError(f"{name} must be True or False; got {value!r}")
    if maxnreg is not None and not (_is_count(maxnreg, 24) and maxnreg <= 255 and maxnreg % 8 == 0):
        raise ValueError(f"maxnreg={maxnreg!r} must be None or a multiple of 8 from 24 to 255 (registers per thread)")
    if not _is_count(persistent, 0):
        raise ValueError(f"persistent={persistent!r} must be 0 (a program per tile) or the programs per SM (1, 2, ...)")


def _check_tma_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """TMA reads each head's [N_k, D] keys through a descriptor: the head's first byte and
    every row stride must be multiples of 16 bytes."""
    element = k.element_size()
    for name, t in (("k", k), ("v", v)):
        head_strides = [t.stride(i) for i in range(t.ndim - 2)]
        if t.data_ptr() % 16 or any(s * element % 16 for s in head_strides + [t.stride(-2)]):
            raise ValueError(f"tma=True needs {name}'s start and its batch, head and row strides in multiples of "
                             f"16 bytes; got strides {tuple(t.stride())} of {element}-byte elements at "
                             f"address % 16 = {t.data_ptr() % 16}; use tma=False or a contiguous copy")


def _check_output(given: torch.Tensor, name: str, shape, dtype, device) -> None:
    if not isinstance(given, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(given).__name__}")
    if tuple(given.shape) != tuple(shape) or given.dtype != dtype or given.device != device:
        raise ValueError(f"{name} must be {tuple(shape)} {dtype} on {device}; "
                         f"got {tuple(given.shape)} {given.dtype} on {given.device}")


def default_config(head_dim: int, causal: bool = False, capability: int | None = None) -> dict:
    """A good config for a call that names none; the tuner finds better ones for your GPU and shape.

    Hopper values are the winners of the ``hopper_knobs`` grid sweep on an H200 at
    N=4096, bf16, with TMA loads (and a persistent grid at D=128); where warp specialization
    or a register cap won, it was within the noise of the same config without it, which is
    taken (docs/results/2026-11-30-h200-knobs.md). Elsewhere the
    values are chosen to fit Ada's 99 KB of shared memory per block, knobs off.

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
    if head_dim == 64 and hopper:
        if causal:
            return dict(block_m=64, block_n=128, num_warps=4, num_stages=2, tma=True)
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=3, tma=True)
    if head_dim == 128 and hopper:
        return dict(block_m=128, block_n=128, num_warps=8, num_stages=3, tma=True, persistent=2)
    if head_dim <= 64:
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    if head_dim == 128:
        return dict(block_m=128, block_n=64, num_warps=8, num_stages=2)
    return dict(block_m=64, block_n=32, num_warps=4, num_stages=1)


# ---------------------------------------------------------------------- launch plans
#
# Binding ~25 arguments through the JIT costs tens of microseconds of Python per call,
# more than the kernel itself at small N. So the first call with a given layout
# checks everything and works out a plan: output shapes, grid, the scalar arguments and,
# after the JIT's own first launch, the compiled kernel. A later call whose plan key
# matches (shapes, strides, dtypes, devices, pointer alignment, causal, config, the
# outputs given) has passed the same checks and launches the compiled kernel directly.


def _row_strides(shape, strides) -> tuple[int, int, int]:
    """(batch, head, row) strides in elements; a [B, N, D] tensor is read as [B, 1, N, D]
    with the head stride ``unsqueeze(1)`` would give (never used: there is one head)."""
    if len(shape) == 3:
        return strides[0], strides[1] * shape[1], strides[1]
    return strides[0], strides[1], strides[2]


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


_RUNTIME = triton.knobs.runtime      # one object; profilers add their launch hooks to it


def _busy(hook) -> bool:
    """A launch hook is installed (a HookChain with calls, or a plain callable of older Triton)."""
    return hook is not None and getattr(hook, "calls", True)


try:
    _current_stream = torch._C._cuda_getCurrentRawStream     # what Triton itself calls: no Python objects
    _current_device = torch._C._cuda_getDevice
except AttributeError:                                        # pragma: no cover (a torch without CUDA)
    _current_stream = _current_device = None
# Triton 3.6's launcher object is a thin Python wrapper over a C entry point; calling the entry
# point directly saves a frame and two scratch-buffer checks per call. Other versions (whose
# wrapper we have not measured) go through the wrapper.
_DIRECT_LAUNCH = triton.__version__.startswith("3.6.")


class LaunchPlan:
    """One launch layout, worked out once from checked inputs; calling it runs the kernel.

    Attributes:
        shape: the :class:`LaunchShape` the kernel is specialised on.
        grid: (query tiles, batch x heads); None when there is nothing to compute, and
            unknown (None) tiles until an autotuner has chosen a config.
        compiled: the compiled kernel once the JIT has launched it; None under the
            interpreter, where every call goes through the JIT.
    """

    def __init__(self, kernel, launch: dict, q, k, v, causal: bool, out, lse):
        batch, heads = q.shape[0], 1 if q.ndim == 3 else q.shape[1]
        n_q, n_k, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
        self.kernel, self.launch, self.causal = kernel, launch, causal
        self.out_shape, self.lse_shape = tuple(q.shape), tuple(q.shape[:-1])
        self.dtype, self.device = q.dtype, q.device
        # Inputs with a non-unit last stride are copied on every call (the kernel reads rows).
        self.copy_inputs = not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1)
        strides = [t.stride() if t.stride(-1) == 1 else _contiguous_strides(t.shape) for t in (q, k, v)]
        o_strides = out.stride() if out is not None else _contiguous_strides(q.shape)
        self.shape = LaunchShape(batch, heads, n_q, n_k, head_dim, *(_row_strides(q.shape, s) for s in strides),
                                 _row_strides(q.shape, o_strides))
        self._sms = _sm_count(q.device)
        block_m = launch.get("BLOCK_M")
        self.grid = None if batch * heads * n_q == 0 else (
            self._grid(block_m, launch.get("PERSISTENT", 0)) if block_m else (None, batch * heads))
        self.compiled = self._run = None
        self._device_index = q.device.index

    def _grid(self, block_m: int, persistent: int) -> tuple[int, int]:
        """A program per (query tile, batch x head), or ``persistent`` programs per SM."""
        tiles, heads = triton.cdiv(self.shape.n_q, block_m), self.shape.batch * self.shape.heads
        if persistent:
            return min(persistent * self._sms, tiles * heads), 1
        return tiles, heads

    def __call__(self, q, k, v, out=None, lse=None):
        if self.copy_inputs:
            q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        if out is None:
            out = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
        if lse is None:
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
        grid, run = self.grid, self._run
        if grid is None:
            return out, lse
        if (run is None or _current_device() != self._device_index or _busy(_RUNTIME.launch_enter_hook)
                or _busy(_RUNTIME.launch_exit_hook)):
            self._launch_jit(q, k, v, out, lse)      # first call, another device current, or a profiler's hooks
        else:
            run(grid[0], grid[1], 1, _current_stream(self._device_index), *self._head, q, k, v, out, lse,
                *self._scalars)
        return out, lse

    def _launch_jit(self, q, k, v, out, lse) -> None:
        """Launch through the JIT (or an autotuner over it), then keep its compiled kernel."""
        args = [value for _, value in kernel_arguments((q, k, v, out, lse), self.shape, self.causal)]
        compiled = self.kernel[lambda meta: self._grid(meta["BLOCK_M"], meta.get("PERSISTENT", 0))](
            *args, HEAD_DIM=self.shape.head_dim, CAUSAL=self.causal, **self.launch, **COMPILE_OPTIONS)
        if self.compiled is None and not interpreting() and getattr(compiled, "function", None) is not None:
            self._adopt(compiled, args)

    def _adopt(self, compiled, args) -> None:
        """Keep what a direct launch of ``compiled`` needs: its launcher, grid and arguments."""
        chosen = self.launch or self.kernel.best_config.kwargs      # an autotuner's pick
        launcher = compiled.run
        direct = (_DIRECT_LAUNCH and hasattr(launcher, "launch") and getattr(launcher, "global_scratch_size", 1) == 0
                  and getattr(launcher, "profile_scratch_size", 1) == 0)
        # What follows the stream: the C entry point also takes the cooperative and PDL flags and the
        # two scratch buffers (none here); both take the packed metadata, launch metadata and the hooks.
        flags = (launcher.launch_cooperative_grid, launcher.launch_pdl, None, None) if direct else ()
        self._head = (compiled.function, *flags, compiled.packed_metadata, None, None, None)
        knobs = tuple(chosen.get(name, default) for name, default in KNOB_CONSTEXPRS)
        self.grid = self._grid(chosen["BLOCK_M"], knobs[-1])
        # The launcher takes every argument, constexprs included, in signature order.
        self._scalars = (tuple(args[5:]) + (self.shape.head_dim, chosen["BLOCK_M"], chosen["BLOCK_N"], self.causal)
                         + knobs)
        self.compiled, self._run = compiled, launcher.launch if direct else launcher


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4          # the interpreter: a few programs, so the persistent loop runs several tiles each
    return torch.cuda.get_device_properties(device).multi_processor_count


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global scratch for device-side tensor descriptors (Triton asks for it per launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


_PLANS: dict[tuple, LaunchPlan] = {}
_PLAN_LIMIT = 4096        # layouts kept; a process that makes more starts over


def _plan_key(kernel, q, k, v, causal, config, out, lse) -> tuple:
    # Pointer alignment is in the key: the JIT compiles 16-byte aligned pointers
    # differently, so a misaligned view must never reuse an aligned tensor's binary.
    return (kernel, q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
            q.device, k.device, v.device, q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16, causal, config,
            None if out is None else (out.shape, out.stride(), out.dtype, out.device, out.data_ptr() % 16),
            None if lse is None else (lse.shape, lse.stride(), lse.dtype, lse.device, lse.data_ptr() % 16))


def _with_defaults(config: tuple, q, k, v, causal: bool) -> tuple:
    """A call that left the tiles unset takes :func:`default_config` for the device, knobs
    included where the call set none (TMA only where this layout allows it)."""
    defaults = default_config(q.shape[-1], causal)
    names = ("block_m", "block_n", "num_warps", "num_stages")
    tiles = tuple(defaults[name] if given is None else given for name, given in zip(names, config[:4]))
    if tuple(config[4:]) != KNOB_DEFAULTS[4:]:
        return tiles + tuple(config[4:])
    tma = defaults.get("tma", False)
    if tma:
        try:
            _check_tma_layout(q, k, v)
        except ValueError:
            tma = False
    return tiles + (tma, defaults.get("warp_specialize", False), defaults.get("maxnreg"),
                    defaults.get("persistent", 0))


def _checked_plan(kernel, config: tuple | None, q, k, v, causal, out, lse) -> LaunchPlan:
    """Check every input as a first call must, then make the plan (``config`` None: an autotuner picks)."""
    _check_inputs(q, k, v, causal)
    launch = {}
    if config is not None:
        if None in config[:4]:  # only untuned calls ask the device for defaults
            config = _with_defaults(config, q, k, v, causal)
        block_m, block_n, num_warps, num_stages, tma, warp_specialize, maxnreg, persistent = config
        _check_config(*config)
        if tma:
            _check_tma_layout(q, k, v)
            if not interpreting():
                triton.set_allocator(_scratch)
        launch = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
                      TMA=tma, WARP_SPEC=warp_specialize, PERSISTENT=persistent)
        if maxnreg is not None:
            launch["maxnreg"] = maxnreg
    if out is not None:
        _check_output(out, "out", q.shape, q.dtype, q.device)
        if out.stride(-1) != 1:
            raise ValueError(f"out needs a unit last stride; got strides {tuple(out.stride())}")
    if lse is not None:
        _check_output(lse, "lse", q.shape[:-1], torch.float32, q.device)
        if not lse.is_contiguous():
            raise ValueError(f"lse must be contiguous; got strides {tuple(lse.stride())}")
    return LaunchPlan(kernel, launch, q, k, v, causal, out, lse)


def plan_for(kernel, config: tuple | None, q, k, v, causal=False, out=None, lse=None) -> LaunchPlan:
    """The cached plan for this call, made (and every input checked) on first sight.

    ``config`` is (block_m, block_n, num_warps, num_stages[, tma, warp_specialize, maxnreg,
    persistent]); missing knobs take their defaults. None: an autotuner picks.
    """
    if config is not None and len(config) < len(KNOB_DEFAULTS):
        config = tuple(config) + KNOB_DEFAULTS[len(config):]
    try:
        key = _plan_key(kernel, q, k, v, causal, config, out, lse)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):       # not tensors: the checks say what is wrong
        key = plan = None
    if plan is None:
        plan = _checked_plan(kernel, config, q, k, v, causal, out, lse)
        if key is not None:
            if len(_PLANS) >= _PLAN_LIMIT:
                _PLANS.clear()
            _PLANS[key] = plan
    return plan


def flash_attn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, *,
                   block_m: int | None = None, block_n: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None, tma: bool = False,
                   warp_specialize: bool = False, maxnreg: int | None = None, persistent: int = 0,
                   out: torch.Tensor | None = None, lse: torch.Tensor | None = None):
    """FlashAttention-2 forward.

    Args:
        q: [B, H, N_q, D] or [B, N_q, D], float32/float16/bfloat16.
        k: [B, H, N_k, D] or [B, N_k, D], same dtype and device as ``q``.
        v: same shape as ``k`` (its strides may differ).
        causal: True or False; True masks key j for query i unless j <= i (top-left aligned).
        block_m, block_n: query and key tile sizes, powers of two >= 16.
        num_warps, num_stages: Triton launch options. Unset values come from
            :func:`default_config`.
        tma: load keys and values through device-side TMA tensor descriptors (one per
            head, so ragged lengths stay in bounds); sm_90 and later, elsewhere Triton
            falls back to plain loads. Needs 16-byte aligned heads and row strides.
        warp_specialize: let the compiler split the unmasked key loop into producer and
            consumer warps (``tl.range(..., warp_specialize=True)``); Hopper and later.
        maxnreg: cap on registers per thread, or None for the compiler's choice.
        persistent: 0 for a program per query tile, else this many programs per SM,
            each looping over tiles (causal: the heaviest tiles first).
        out, lse: optional preallocated outputs (shapes as returned); tests fill
            them with NaN so that an element the kernel never writes shows up.

    Returns:
        ``(out, lse)``: ``out`` like ``q``; ``lse`` fp32 [B, H, N_q] (or [B, N_q]),
        the natural-log logsumexp of each row of scaled scores.

    Raises:
        TypeError, ValueError: a bad input or config; the message names it.
    """
    config = (block_m, block_n, num_warps, num_stages, tma, warp_specialize, maxnreg, persistent)
    plan = plan_for(_flash_fwd_kernel, config, q, k, v, causal, out, lse)
    return plan(q, k, v, out, lse)
