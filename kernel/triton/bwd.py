"""FlashAttention-2 backward in Triton, and the autograd op that joins it to the forward.

Read top to bottom: the kernels, the description of their arguments (shared by the
launcher and the tuner's cross-compiler), the checks, the launcher. The forward
(:mod:`kernel.triton.fwd`) stores ``lse``, the natural-log logsumexp of each row of
scaled scores, so the backward recomputes the probabilities tile by tile,
``P = exp(S - lse)`` (as ``exp2`` with ``scale * log2(e)`` folded into one multiply-add),
instead of storing them. With ``delta = rowsum(dO * O)``:

    dV = P^T dO        dP = dO V^T        dS = P * (dP - delta)
    dK = scale * dS^T Q                   dQ = scale * dS K

Three kernels: ``bwd_preprocess_kernel`` computes delta (and zeroes the fp32 dQ
accumulator where dQ is accumulated); ``bwd_kv_kernel`` owns a key tile and walks the
query tiles that see it (dK, dV); dQ is made one of three ways (``dq_mode``):

* ``"pass"``: a second kernel, ``bwd_q_kernel``, owns a query tile and walks its key
  tiles (7 matmuls per tile pair in all, nobody writes where another program does);
* ``"atomic"``: the dK/dV kernel adds each tile pair's dS K into an fp32 buffer with
  ``tl.atomic_add`` (5 matmuls), and ``bwd_dq_finish_kernel`` scales and casts it;
* ``"tma"``: as ``"atomic"``, by the copy engine's reduce-add through a tensor
  descriptor (Hopper and later).

Padded rows never need a score mask: a key row past N_k is loaded as zeros, so its
dS K and P dO terms vanish; a query row past N_q has dO = 0 and delta = 0, so its dS
and P^T dO terms vanish too. Only tiles on the causal diagonal mask scores, and only
the ragged last tiles mask their loads. Conventions are the forward's: ``[B, H, N, D]``
or ``[B, N, D]``, causal is top-left (key ``j`` is seen by query ``i`` when ``j <= i``),
and a row with no valid key (only when N_k == 0) gets zero gradients, never NaN.
Copy it with ``fwd.py``, ``bwd_launch.py`` (launcher, plans) and ``kernel/autograd.py`` (the op).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
DQ_MODES = ("pass", "atomic", "tma")
# Compile options the launcher and the tuner's cross-compiler both pass (the forward's too).
COMPILE_OPTIONS = {"enable_fp_fusion": True}
PREPROCESS_BLOCK = 64          # query rows per program of the preprocess and dQ-finish kernels

# ----------------------------------------------------------------------------- kernels


@triton.jit
def bwd_preprocess_kernel(OUT, DO, DELTA, DQ_ACC, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
                          H, N_Q, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, ZERO_DQ: tl.constexpr):
    """delta = rowsum(dO * O) in fp32 for BLOCK query rows; with ZERO_DQ, their fp32 dQ accumulator = 0."""
    pid_bh = tl.program_id(1)
    batch, head = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)                   # [BLOCK]
    offs_d = tl.arange(0, HEAD_DIM)
    valid = rows[:, None] < N_Q
    o = tl.load(OUT + batch * stride_ob + head * stride_oh + rows[:, None] * stride_om + offs_d[None, :], mask=valid,
                other=0.0)
    do = tl.load(DO + batch * stride_dob + head * stride_doh + rows[:, None] * stride_dom + offs_d[None, :],
                 mask=valid, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)               # [BLOCK]
    tl.store(DELTA + pid_bh.to(tl.int64) * N_Q + rows, delta, mask=rows < N_Q)
    if ZERO_DQ:
        first = pid_bh.to(tl.int64) * N_Q * HEAD_DIM
        tl.store(DQ_ACC + first + rows[:, None] * HEAD_DIM + offs_d[None, :],
                 tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32), mask=valid)


@triton.jit
def _rows_source(base, stride_row, n_rows, offs_rows, offs_d, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
                 TMA: tl.constexpr):
    """Where a loop reads BLOCK-row tiles of one head's [n_rows, D] matrix: a TMA descriptor (rows
    past n_rows come back as zeros) or the row pointers of the tile at row 0."""
    if TMA:
        src = tl.make_tensor_descriptor(base, shape=[n_rows, HEAD_DIM], strides=[stride_row, 1],
                                        block_shape=[BLOCK, HEAD_DIM])
    else:
        src = base + offs_rows[:, None] * stride_row + offs_d[None, :]
    return src


@triton.jit
def _load_tile(src, start, stride_row, offs_rows, n_rows, MASKED: tl.constexpr, TMA: tl.constexpr):
    """The tile of rows [start, start + BLOCK) from :func:`_rows_source`; zeros past n_rows."""
    if TMA:
        tile = src.load([start, 0])
    elif MASKED:
        tile = tl.load(src + start * stride_row, mask=(start + offs_rows)[:, None] < n_rows, other=0.0)
    else:
        tile = tl.load(src + start * stride_row)
    return tile


@triton.jit
def _kv_steps(dk, dv, k, v, q_src, do_src, LSE, DELTA, DQ, stride_qm, stride_dom, stride_dqm, start, stop,
              offs_n, offs_m, offs_d, N_Q, qk_scale,
              BLOCK_M: tl.constexpr, DIAGONAL: tl.constexpr, DQ_MODE: tl.constexpr, TMA: tl.constexpr):
    """Fold query tiles [start, stop) into this key tile's dK and dV (transposed: keys down, queries
    across, so P^T and dS^T are the A operands of their products without a transpose). DIAGONAL
    tiles mask the scores above the causal diagonal; every load is masked past N_Q."""
    for start_m in range(start, stop, BLOCK_M):
        rows = start_m + offs_m                                             # [BLOCK_M]
        q = _load_tile(q_src, start_m, stride_qm, offs_m, N_Q, True, TMA)         # [BLOCK_M, D]
        do = _load_tile(do_src, start_m, stride_dom, offs_m, N_Q, True, TMA)      # [BLOCK_M, D]
        lse = tl.load(LSE + rows, mask=rows < N_Q, other=0.0) * 1.4426950408889634   # [BLOCK_M], log2 units
        delta = tl.load(DELTA + rows, mask=rows < N_Q, other=0.0)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])      # [BLOCK_N, BLOCK_M]
        if DIAGONAL:
            p_t = tl.where(offs_n[:, None] <= rows[None, :], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)                               # [BLOCK_N, D]
        ds_t = (p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])).to(q.dtype)     # [BLOCK_N, BLOCK_M]
        dk = tl.dot(ds_t, q, dk)                                            # [BLOCK_N, D]
        if DQ_MODE == 1:        # atomic: this pair's dS K into the fp32 accumulator
            dq = tl.dot(tl.trans(ds_t), k)                                  # [BLOCK_M, D]
            tl.atomic_add(DQ + rows[:, None] * stride_dqm + offs_d[None, :], dq, mask=rows[:, None] < N_Q,
                          sem="relaxed")
        elif DQ_MODE == 2:      # tma: the copy engine adds the tile (rows past N_Q are clipped)
            DQ.atomic_add([start_m, 0], tl.dot(tl.trans(ds_t), k))
    return dk, dv


@triton.jit
def _bwd_kv_tile(Q, K, V, DO, LSE, DELTA, DK, DV, DQ, tile_n, pid_bh,
                 stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                 stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn,
                 stride_dvb, stride_dvh, stride_dvn, H, N_Q, N_K, qk_scale, sm_scale,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                 DQ_MODE: tl.constexpr, TMA: tl.constexpr):
    """dK and dV of one key tile of one (batch, head), and with DQ_MODE its share of dQ."""
    batch, head = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
    start_n = tile_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)                               # [BLOCK_N] keys of this tile
    offs_m, offs_d = tl.arange(0, BLOCK_M), tl.arange(0, HEAD_DIM)
    key_ok = offs_n[:, None] < N_K
    k = tl.load(K + batch * stride_kb + head * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :],
                mask=key_ok, other=0.0)                                     # [BLOCK_N, D]
    v = tl.load(V + batch * stride_vb + head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                mask=key_ok, other=0.0)                                     # [BLOCK_N, D]
    q_src = _rows_source(Q + batch * stride_qb + head * stride_qh, stride_qm, N_Q, offs_m, offs_d, BLOCK_M,
                         HEAD_DIM, TMA)
    do_src = _rows_source(DO + batch * stride_dob + head * stride_doh, stride_dom, N_Q, offs_m, offs_d, BLOCK_M,
                          HEAD_DIM, TMA)
    row_stats = pid_bh.to(tl.int64) * N_Q
    dq = DQ + row_stats * HEAD_DIM                                          # this head's contiguous fp32 dQ
    if DQ_MODE == 2:
        dq = tl.make_tensor_descriptor(dq, shape=[N_Q, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    # Query tiles in two runs: those on the causal diagonal (scores masked), then the rest (loads
    # masked, for the ragged last tile). Query rows before the key tile never see it.
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        mid = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, tl.cdiv(N_Q, BLOCK_M) * BLOCK_M)
    else:
        lo, mid = 0, 0
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dk, dv = _kv_steps(dk, dv, k, v, q_src, do_src, LSE + row_stats, DELTA + row_stats, dq, stride_qm, stride_dom,
                       HEAD_DIM, lo, mid, offs_n, offs_m, offs_d, N_Q, qk_scale,
                       BLOCK_M, CAUSAL, DQ_MODE, TMA)
    dk, dv = _kv_steps(dk, dv, k, v, q_src, do_src, LSE + row_stats, DELTA + row_stats, dq, stride_qm, stride_dom,
                       HEAD_DIM, mid, N_Q, offs_n, offs_m, offs_d, N_Q, qk_scale,
                       BLOCK_M, False, DQ_MODE, TMA)
    tl.store(DK + batch * stride_dkb + head * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=key_ok)
    tl.store(DV + batch * stride_dvb + head * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=key_ok)


# BH (batch x heads) only bounds the persistent loop: specialising on it would give the tuner's
# ragged gate shapes another binary than the timed one (as in the forward).
UNSPECIALISED = ("BH",)


@triton.jit(do_not_specialize=list(UNSPECIALISED))
def bwd_kv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ,
                  stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                  stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn,
                  stride_dvb, stride_dvh, stride_dvn, H, BH, N_Q, N_K, qk_scale, sm_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                  DQ_MODE: tl.constexpr = 0, TMA: tl.constexpr = False, PERSISTENT: tl.constexpr = 0):
    # Causal key tiles near the start are seen by the most queries: they go first (program 0 is
    # the first key tile), so the last wave of programs is short.
    if PERSISTENT > 0:
        tiles_n = tl.cdiv(N_K, BLOCK_N)
        for tile in tl.range(tl.program_id(0), tiles_n * BH, tl.num_programs(0)):
            _bwd_kv_tile(Q, K, V, DO, LSE, DELTA, DK, DV, DQ, tile // BH if CAUSAL else tile % tiles_n,
                         tile % BH if CAUSAL else tile // tiles_n,
                         stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                         stride_vn, stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn,
                         stride_dvb, stride_dvh, stride_dvn, H, N_Q, N_K, qk_scale, sm_scale,
                         HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, DQ_MODE, TMA)
    else:
        _bwd_kv_tile(Q, K, V, DO, LSE, DELTA, DK, DV, DQ, tl.program_id(0), tl.program_id(1),
                     stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                     stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn,
                     stride_dvb, stride_dvh, stride_dvn, H, N_Q, N_K, qk_scale, sm_scale,
                     HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, DQ_MODE, TMA)


@triton.jit
def _q_steps(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start, stop, rows, offs_n, N_K, qk_scale,
             BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr):
    """Fold key tiles [start, stop) into this query tile's dQ (without the final scale)."""
    for start_n in range(start, stop, BLOCK_N):
        k = _load_tile(k_src, start_n, stride_kn, offs_n, N_K, MASKED, TMA)      # [BLOCK_N, D]
        v = _load_tile(v_src, start_n, stride_vn, offs_n, N_K, MASKED, TMA)      # [BLOCK_N, D]
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])       # [BLOCK_M, BLOCK_N]
        if MASKED and CAUSAL:
            p = tl.where((start_n + offs_n)[None, :] <= rows[:, None], p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])                     # [BLOCK_M, BLOCK_N]
        dq = tl.dot(ds.to(k.dtype), k, dq)                                       # [BLOCK_M, D]
    return dq


@triton.jit
def bwd_q_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                 stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                 stride_dob, stride_doh, stride_dom, stride_dqb, stride_dqh, stride_dqm, H, N_Q, N_K, qk_scale,
                 sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, TMA: tl.constexpr = False):
    """dQ of one query tile of one (batch, head): the ``"pass"`` dq_mode."""
    pid_bh = tl.program_id(1)
    batch, head = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
    # Causal query tiles near the end see the most keys: they go first, so the last wave is short.
    tile_m = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    start_m = tile_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)                                  # [BLOCK_M] queries of this tile
    offs_n, offs_d = tl.arange(0, BLOCK_N), tl.arange(0, HEAD_DIM)
    row_ok = rows[:, None] < N_Q
    q = tl.load(Q + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qm + offs_d[None, :], mask=row_ok,
                other=0.0)                                                  # [BLOCK_M, D]
    do = tl.load(DO + batch * stride_dob + head * stride_doh + rows[:, None] * stride_dom + offs_d[None, :],
                 mask=row_ok, other=0.0)                                    # [BLOCK_M, D]
    first = pid_bh.to(tl.int64) * N_Q
    lse = tl.load(LSE + first + rows, mask=rows < N_Q, other=0.0) * 1.4426950408889634   # log2 units
    delta = tl.load(DELTA + first + rows, mask=rows < N_Q, other=0.0)
    k_src = _rows_source(K + batch * stride_kb + head * stride_kh, stride_kn, N_K, offs_n, offs_d, BLOCK_N,
                         HEAD_DIM, TMA)
    v_src = _rows_source(V + batch * stride_vb + head * stride_vh, stride_vn, N_K, offs_n, offs_d, BLOCK_N,
                         HEAD_DIM, TMA)
    # Key tiles [0, full) need no mask; [full, stop) hold the causal diagonal or the ragged last tile.
    if CAUSAL:
        stop = tl.minimum(N_K, start_m + BLOCK_M)
        full = (tl.minimum(N_K, start_m + 1) // BLOCK_N) * BLOCK_N
    else:
        stop = N_K
        full = (N_K // BLOCK_N) * BLOCK_N
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    dq = _q_steps(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, 0, full, rows, offs_n, N_K, qk_scale,
                  BLOCK_N, False, CAUSAL, TMA)
    dq = _q_steps(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, full, stop, rows, offs_n, N_K, qk_scale,
                  BLOCK_N, True, CAUSAL, TMA)
    tl.store(DQ + batch * stride_dqb + head * stride_dqh + rows[:, None] * stride_dqm + offs_d[None, :],
             (dq * sm_scale).to(DQ.dtype.element_ty), mask=row_ok)


@triton.jit
def bwd_dq_finish_kernel(DQ_ACC, DQ, stride_dqb, stride_dqh, stride_dqm, H, N_Q, sm_scale,
                         HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """dQ = scale * the fp32 accumulator, cast to the inputs' dtype (the atomic dq_modes)."""
    pid_bh = tl.program_id(1)
    batch, head = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    valid = rows[:, None] < N_Q
    acc = tl.load(DQ_ACC + pid_bh.to(tl.int64) * N_Q * HEAD_DIM + rows[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=valid, other=0.0)
    tl.store(DQ + batch * stride_dqb + head * stride_dqh + rows[:, None] * stride_dqm + offs_d[None, :],
             (acc * sm_scale).to(DQ.dtype.element_ty), mask=valid)


# ------------------------------------------- the kernels' arguments, shared with the tuner


@dataclass(frozen=True)
class BwdShape:
    """Everything about a backward launch that the JIT specialises on, except the pointers.

    Strides are (batch, head, row) in elements, for q, k, v, dout, dq, dk and dv; the
    head dimension's stride is 1 (the launcher makes it so).
    """

    batch: int
    heads: int
    n_q: int
    n_k: int
    head_dim: int
    q: tuple[int, int, int]
    k: tuple[int, int, int]
    v: tuple[int, int, int]
    do: tuple[int, int, int]
    dq: tuple[int, int, int]
    dk: tuple[int, int, int]
    dv: tuple[int, int, int]
    o: tuple[int, int, int]

    @classmethod
    def contiguous(cls, batch: int, heads: int, n_q: int, n_k: int, head_dim: int) -> BwdShape:
        """The shape of contiguous [B, H, N, D] tensors, as the tuner assumes."""
        q = (heads * n_q * head_dim, n_q * head_dim, head_dim)
        k = (heads * n_k * head_dim, n_k * head_dim, head_dim)
        return cls(batch, heads, n_q, n_k, head_dim, q, k, k, q, q, k, k, q)


def _scales(head_dim: int) -> tuple[float, float]:
    sm_scale = 1.0 / math.sqrt(head_dim)
    return sm_scale * LOG2E, sm_scale


def preprocess_arguments(pointers: Sequence[Any], shape: BwdShape) -> list[tuple[str, Any]]:
    """``bwd_preprocess_kernel``'s runtime arguments, (name, value); pointers (out, dout, delta, dq_acc)."""
    return [("OUT", pointers[0]), ("DO", pointers[1]), ("DELTA", pointers[2]), ("DQ_ACC", pointers[3]),
            *zip(("stride_ob", "stride_oh", "stride_om"), shape.o),
            *zip(("stride_dob", "stride_doh", "stride_dom"), shape.do), ("H", shape.heads), ("N_Q", shape.n_q)]


def kv_arguments(pointers: Sequence[Any], shape: BwdShape) -> list[tuple[str, Any]]:
    """``bwd_kv_kernel``'s runtime arguments; pointers (q, k, v, dout, lse, delta, dk, dv, dq_acc)."""
    names = ("Q", "K", "V", "DO", "LSE", "DELTA", "DK", "DV", "DQ")
    strides = [(f"stride_{t}{axis}", value) for t, triple in (("q", shape.q), ("k", shape.k), ("v", shape.v),
                                                              ("do", shape.do), ("dk", shape.dk), ("dv", shape.dv))
               for axis, value in zip(("b", "h", "m" if t in ("q", "do") else "n"), triple)]
    qk_scale, sm_scale = _scales(shape.head_dim)
    return [*zip(names, pointers), *strides, ("H", shape.heads), ("BH", shape.batch * shape.heads),
            ("N_Q", shape.n_q), ("N_K", shape.n_k), ("qk_scale", qk_scale), ("sm_scale", sm_scale)]


def q_arguments(pointers: Sequence[Any], shape: BwdShape) -> list[tuple[str, Any]]:
    """``bwd_q_kernel``'s runtime arguments; pointers (q, k, v, dout, lse, delta, dq)."""
    names = ("Q", "K", "V", "DO", "LSE", "DELTA", "DQ")
    strides = [(f"stride_{t}{axis}", value) for t, triple in (("q", shape.q), ("k", shape.k), ("v", shape.v),
                                                              ("do", shape.do), ("dq", shape.dq))
               for axis, value in zip(("b", "h", "m" if t in ("q", "do", "dq") else "n"), triple)]
    qk_scale, sm_scale = _scales(shape.head_dim)
    return [*zip(names, pointers), *strides, ("H", shape.heads), ("N_Q", shape.n_q), ("N_K", shape.n_k),
            ("qk_scale", qk_scale), ("sm_scale", sm_scale)]


def finish_arguments(pointers: Sequence[Any], shape: BwdShape) -> list[tuple[str, Any]]:
    """``bwd_dq_finish_kernel``'s runtime arguments; pointers (dq_acc, dq)."""
    return [("DQ_ACC", pointers[0]), ("DQ", pointers[1]), *zip(("stride_dqb", "stride_dqh", "stride_dqm"), shape.dq),
            ("H", shape.heads), ("N_Q", shape.n_q), ("sm_scale", _scales(shape.head_dim)[1])]


@dataclass(frozen=True)
class BwdConfig:
    """The backward's tiles, launch options and knobs (see :func:`kernel.flash_attn_bwd`).

    ``block_m``, ``block_n``, ``num_warps``, ``num_stages``: the dK/dV kernel's query tile, key
    tile and launch options; ``block_m_q``, ``block_n_q``, ``num_warps_q``, ``num_stages_q``:
    the dQ pass's (``dq_mode="pass"`` only). ``maxnreg`` (None or 0: no cap) caps the registers of
    both; ``persistent`` is the dK/dV kernel's programs per SM (0: one per key tile); ``overlap``
    runs the dQ pass on a second stream beside the dK/dV kernel (``dq_mode="pass"`` only).
    """

    block_m: int = 64
    block_n: int = 64
    block_m_q: int = 64
    block_n_q: int = 64
    num_warps: int = 4
    num_stages: int = 1
    num_warps_q: int = 4
    num_stages_q: int = 1
    dq_mode: str = "pass"
    tma: bool = False
    maxnreg: int | None = None
    persistent: int = 0
    overlap: bool = False

    def _options(self, num_warps: int, num_stages: int) -> dict:
        options = dict(num_warps=num_warps, num_stages=num_stages, **COMPILE_OPTIONS)
        if self.maxnreg:
            options["maxnreg"] = self.maxnreg
        return options

    def units(self) -> list[tuple[str, Any, dict, dict]]:
        """(name, JIT kernel, constexprs, launch options) of each kernel a launch runs, in order."""
        options = self._options(self.num_warps, self.num_stages)
        atomic = self.dq_mode != "pass"
        small = dict(num_warps=4, num_stages=1, **COMPILE_OPTIONS)
        units = [("preprocess", bwd_preprocess_kernel, dict(BLOCK=PREPROCESS_BLOCK, ZERO_DQ=atomic), small),
                 ("kv", bwd_kv_kernel, dict(BLOCK_M=self.block_m, BLOCK_N=self.block_n,
                                            DQ_MODE=DQ_MODES.index(self.dq_mode), TMA=self.tma,
                                            PERSISTENT=self.persistent), options)]
        if atomic:
            units.append(("dq_finish", bwd_dq_finish_kernel, dict(BLOCK=PREPROCESS_BLOCK), small))
        else:
            units.append(("q", bwd_q_kernel, dict(BLOCK_M=self.block_m_q, BLOCK_N=self.block_n_q, TMA=self.tma),
                          self._options(self.num_warps_q, self.num_stages_q)))
        return units


# Every JIT function of the backward, in file order: their source is the device code (the tuner's
# compile cache is keyed on it).
JIT_FUNCTIONS = (bwd_preprocess_kernel, _rows_source, _load_tile, _kv_steps, _bwd_kv_tile, bwd_kv_kernel, _q_steps,
                 bwd_q_kernel, bwd_dq_finish_kernel)
