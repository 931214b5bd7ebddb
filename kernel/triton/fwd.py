"""FlashAttention-2 forward in Triton: one program per (query tile, batch x head).

Read top to bottom: the kernel, the description of its arguments that the launcher and
the tuner's cross-compiler share (with the knob table), the config checks, and the plan cache
(:func:`plan_for`), which keeps a launch plan per input layout (:mod:`kernel.triton.launch`), so a
repeated call costs little more than the launch itself. The entry point is
:func:`kernel.flash_attn_fwd` (``kernel/forward.py``), the defaults ``defaults.py``. The autograd op, with the backward,
is in ``kernel/autograd.py``, the backward in ``bwd.py``. Nothing here imports ``tuner``: copy the
``kernel`` package.

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
from collections.abc import Sequence
from typing import Any, NamedTuple

import triton
import triton.language as tl

from kernel.checks import (
    as_int,
    check_inputs,
    check_outputs,
    check_tile_area,
    check_tile_rows,
    check_tma_layout,
    is_pow2,
    programs_per_sm,
    register_cap,
    stage_count,
)
from kernel.triton.defaults import default_config
from kernel.triton.launch import LaunchPlan, LaunchShape, LaunchSpec, cached_plan, plan_key, use_tma_allocator

LOG2E = 1.4426950408889634
LN2 = tl.constexpr(0.6931471805599453)  # a constexpr: the compiled kernel reads it

# Compile options the launcher and the tuner's cross-compiler both pass, so neither
# depends on a Triton default (3.9 warns that fp fusion's default will change).
COMPILE_OPTIONS = {"enable_fp_fusion": True}


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


# BH only bounds the persistent loop: specialised, it would give the ragged gate shapes another binary. The
# lengths stay specialised: unspecialised, the Hopper default ran 1-1.6% slower (scripts/ab_specialise.py).
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


class Knob(NamedTuple):
    """A keyword of :func:`flash_attn_fwd` after the tiles, and how the kernel takes it."""

    name: str                 # the launcher's keyword
    default: Any              # its value when not given: the knob is off
    constexpr: str | None     # the constexpr of _flash_fwd_kernel it sets; None: the compile option ``name``


# The knobs, in the launcher's order: TMA loads of K and V, warp specialization of the key loop,
# a register cap per thread, a persistent grid (programs per SM; 0: a program per query tile).
KNOBS = (Knob("tma", False, "TMA"), Knob("warp_specialize", False, "WARP_SPEC"), Knob("maxnreg", None, None),
         Knob("persistent", 0, "PERSISTENT"))
# The knob constexprs of the kernel, in signature order after CAUSAL, with their defaults.
KNOB_CONSTEXPRS = tuple((knob.constexpr, knob.default) for knob in KNOBS if knob.constexpr)
# (block_m, block_n, num_warps, num_stages) and the knobs, with their defaults, as the launcher takes them.
KNOB_DEFAULTS = (None, None, None, None) + tuple(knob.default for knob in KNOBS)
TILE_NAMES = ("block_m", "block_n", "num_warps", "num_stages")      # a config's first four, by name
# The kernel arguments whose change makes @triton.autotune tune again (it adds dtypes itself).
AUTOTUNE_KEY = ("N_Q", "N_K", "HEAD_DIM", "CAUSAL")
# The JIT function a launch runs, and every JIT function whose source makes its device code.
JIT_KERNEL = _flash_fwd_kernel
JIT_FUNCTIONS = (_attend_tiles, _attend_query_tile, _flash_fwd_kernel)
LAUNCH = LaunchSpec(kernel_arguments, KNOB_CONSTEXPRS, COMPILE_OPTIONS)


# ------------------------------------------------------------------------------ checks


def check_config(block_m: int, block_n: int, num_warps: int, num_stages: int, tma: bool = False,
                 warp_specialize: bool = False, maxnreg: int | None = None, persistent: int = 0) -> tuple:
    """The config in Python ints (any integer kind; no bool), or TypeError/ValueError naming the value."""
    block_m, block_n = (as_int(n, v, "a power of two >= 16") for n, v in (("block_m", block_m), ("block_n", block_n)))
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if not is_pow2(value) or value < 16:
            raise ValueError(f"{name}={value!r} must be a power of two >= 16 (tl.dot's smallest tile)")
    check_tile_area("block_m", block_m, "block_n", block_n)
    if not is_pow2(num_warps := as_int("num_warps", num_warps, "a power of two from 1 to 32")) or num_warps > 32:
        raise ValueError(f"num_warps={num_warps!r} must be a power of two from 1 to 32")
    num_stages = stage_count("num_stages", num_stages)
    for name, value in (("tma", tma), ("warp_specialize", warp_specialize)):
        if value is not True and value is not False:
            raise TypeError(f"{name} must be True or False; got {value!r}")
    persistent = programs_per_sm(persistent)
    return block_m, block_n, num_warps, num_stages, tma, warp_specialize, register_cap(maxnreg), persistent


# ------------------------------------------------------------------------- entry point


def _with_defaults(config: tuple, q, k, v, causal: bool, capability: int | None = None) -> tuple:
    """A call that left the tiles unset takes :func:`default_config` for the device, knobs
    included where the call set none (TMA only where this layout allows it, and not at a length
    of 1: the JIT makes it a constant, and Triton 3.6's Hopper pipeliner then fails on the
    descriptors, "tensormap_create ... doesn't know how to predicate this op")."""
    defaults = default_config(q.shape[-1], causal, capability)
    if defaults.get("tma") and 1 in (q.shape[-2], k.shape[-2]):
        # Without TMA the Hopper tiles may not fit (128x128 with 3 stages asks 320 KB of plain buffers):
        # the portable default instead, which fits every target.
        defaults = default_config(q.shape[-1], causal, 0)
    tiles = tuple(defaults[name] if given is None else given for name, given in zip(TILE_NAMES, config[:4]))
    if tuple(config[4:]) != KNOB_DEFAULTS[4:]:
        return tiles + tuple(config[4:])
    knobs = {knob.name: defaults.get(knob.name, knob.default) for knob in KNOBS}
    if knobs["tma"]:
        try:
            check_tma_layout(q, k, v)
        except ValueError:
            knobs["tma"] = False
    return tiles + tuple(knobs.values())


def _checked_plan(kernel, config: tuple | None, q, k, v, causal, out, lse, route=None) -> LaunchPlan:
    """Check every input as a first call must, then make the plan (``config`` None: an autotuner picks).
    ``route(q, k, v, causal, out, lse)``: for a default call, another kernel's plan, this kernel's tiles
    (a dict of :data:`TILE_NAMES`), or None (this kernel at its defaults)."""
    check_inputs(q, k, v, causal)
    if route is not None:
        routed = route(q, k, v, causal, out, lse)
        if isinstance(routed, dict):        # the route's tiles for this kernel, over the defaults' tiles and knobs
            config = _with_defaults(config, q, k, v, causal)
            config = tuple(routed.get(name, value) for name, value in zip(TILE_NAMES, config[:4])) + config[4:]
        elif routed is not None:
            return routed
    launch = {}
    if config is not None:
        if None in config[:4]:  # only untuned calls ask the device for defaults
            config = _with_defaults(config, q, k, v, causal)
        block_m, block_n, num_warps, num_stages, tma, warp_specialize, maxnreg, persistent = config = check_config(*config)
        check_tile_rows(q.shape[-1], block_m=block_m, block_n=block_n)
        if tma:
            check_tma_layout(q, k, v)
            use_tma_allocator()
        launch = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
                      TMA=tma, WARP_SPEC=warp_specialize, PERSISTENT=persistent)
        if maxnreg is not None:
            launch["maxnreg"] = maxnreg
    check_outputs(q, out, lse)
    return LaunchPlan(kernel, launch, q, k, v, causal, out, lse, LAUNCH)


DEFAULT_CALL = "default forward call"      # the config slot of a routed default call's plan key


def plan_for(kernel, config: tuple | None, q, k, v, causal=False, out=None, lse=None, route=None) -> LaunchPlan:
    """The cached plan for this call, made (and every input checked) on first sight.

    ``config`` is (block_m, block_n, num_warps, num_stages[, tma, warp_specialize, maxnreg, persistent]);
    missing knobs take their defaults, maxnreg 0 is None (no cap, as in study files). None: an autotuner picks.
    ``route``: asked on first sight (:func:`kernel.route.gluon_plan`) where the call names no tile and sets
    no knob: another kernel's plan, or tiles for this one (a dict), or None; its plans are kept under a key
    of their own, so a routed and an unrouted call never share one.
    """
    if config is not None:
        config = (*config, *KNOB_DEFAULTS[len(config):])
        config = (*config[:6], register_cap(config[6]), *config[7:])
    if config != KNOB_DEFAULTS:
        route = None
    try:
        key = plan_key(kernel, q, k, v, causal, config if route is None else (DEFAULT_CALL, config), out, lse)
    except (AttributeError, TypeError):       # not tensors: the checks say what is wrong
        key = None
    return cached_plan(key, lambda: _checked_plan(kernel, config, q, k, v, causal, out, lse, route))
