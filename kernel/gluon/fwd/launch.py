"""The Gluon forward's launcher: its checks, the arguments of a launch, the plan cache, the entry point.

Read top to bottom: :func:`launch_arguments` (what a launch is given, shared with the
cross-compiler), :func:`checked_plan` (every check of a first call), :func:`plan_for` (the plan
kept per call signature) and :func:`flash_attn_fwd_gluon`. The kernels are ``kernel.py``
(pipelined) and ``kernel_ws.py`` (warp-specialized); the launch plan ``plan.py``; the knobs,
defaults and the shared-memory model ``config.py``; whether this Triton and GPU can run it
:mod:`kernel.gluon.api`.

The contract is :func:`kernel.flash_attn_fwd`'s: ``q`` [B, H, N_q, D] or [B, N_q, D],
``k``/``v`` [B, H, N_k, D] or [B, N_k, D]; any N_q, N_k >= 0; causal top-left aligned (key j
for query i when j <= i); ``lse`` fp32, natural log; a row with no key (N_k == 0) gets
out = 0, lse = -inf. Here: bf16 and fp16 only, D = 64 or 128, CUDA sm_90.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import torch
import triton

from kernel.arch import capability_of
from kernel.gluon.api import GluonUnavailable, gl, gluon_support
from kernel.gluon.checks import DTYPES, check_inputs, check_outputs, tma_strides
from kernel.gluon.fwd.config import HEAD_DIMS, VARIANTS, GluonConfig, default_gluon_config, tile_defaults
from kernel.gluon.fwd.kernel import _fwd_pipelined_kernel
from kernel.gluon.fwd.plan import GluonLaunchPlan, grid_for
from kernel.gluon.schedule import BALANCED, L2_BYTES, balanced_budget
from kernel.triton.launch import PLANS, cached_plan, plan_key

__all__ = ["GLUON_FORWARD", "KNOB_NAMES", "checked_plan", "config_from", "flash_attn_fwd_gluon",
           "flash_attn_fwd_gluon_jit", "launch_arguments", "plan_for", "supported"]

LOG2E = 1.4426950408889634

_GL_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _descriptor(name: str, t4: torch.Tensor, rows: int):
    """A TMA descriptor of [B, H, N, D] tensor ``t4`` with blocks of [1, 1, rows, D]."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = [1, 1, rows, t4.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _GL_DTYPES[t4.dtype]))
    return TensorDescriptor(t4, list(t4.shape), tma_strides(name, t4), block, layout)


def launch_arguments(q4, k4, v4, o4, lse, config: GluonConfig, causal: bool, split: tuple | None = None,
                     l2_bytes: int = L2_BYTES):
    """(kernel, positional arguments, constexprs, options) of a launch on [B, H, N, D] views.

    The launcher and the cross-compiler (``compile.py``, with stand-in tensors) both use this.
    ``split``: the ws kernel's ``(TAIL, SPLITS, WS_O, WS_L)`` (:mod:`kernel.gluon.fwd.split`); None
    splits nothing (``TAIL`` = every tile, the workspaces stand-ins never written). ``l2_bytes``: what
    a group of heads of the causal tile order may read (:mod:`kernel.gluon.schedule`).
    """
    from kernel.gluon.fwd.kernel_ws import _fwd_ws_kernel

    batch, heads, n_q, head_dim = q4.shape
    rows = 64 if config.variant == "ws" else config.block_m
    descriptors = (_descriptor("q", q4, rows), _descriptor("k", k4, config.block_n),
                   _descriptor("v", v4, config.block_n), _descriptor("out", o4, rows))
    scalars = (heads, batch * heads, n_q, k4.shape[2], LOG2E / math.sqrt(head_dim))
    constexprs = dict(CAUSAL=causal, OVERLAP=config.overlap, NUM_STAGES=config.num_stages, L2_BYTES=l2_bytes)
    options = dict(num_warps=config.num_warps)
    if config.variant == "ws":
        tail, splits, ws_o, ws_l = split or (triton.cdiv(n_q, config.block_m) * batch * heads, 1, lse, lse)
        args = (*descriptors, lse, ws_o, ws_l, *scalars, tail, splits)
        constexprs.update(CONSUMERS=config.consumers, PINGPONG=config.pingpong,
                          PRODUCER_REGS=config.producer_regs, CONSUMER_REGS=config.consumer_regs,
                          SPLIT=split is not None)
        options["maxnreg"] = config.maxnreg
        return _fwd_ws_kernel, args, constexprs, options
    return _fwd_pipelined_kernel, (*descriptors, lse, *scalars), constexprs, options


def config_from(variant, head_dim, causal, knobs: dict) -> GluonConfig:
    """The default config with the knobs a call sets; a ws query tile other than the default's
    brings that tile's own schedule and registers (:func:`tile_defaults`) under the knobs set."""
    given = {name: value for name, value in knobs.items() if value is not None}
    config = default_gluon_config(head_dim, causal, variant)
    if variant == "ws" and given.get("block_m", config.block_m) != config.block_m:
        given = tile_defaults(given["block_m"]) | given
    config = replace(config, **given)
    problems = config.problems(head_dim)
    if problems:
        raise ValueError(f"Gluon config {config}: " + "; ".join(problems))
    return config


GLUON_FORWARD = "gluon-forward"      # the kernel slot of a Gluon plan's key (kernel.triton.launch.plan_key)
# The knobs of flash_attn_fwd_gluon after the variant, in its order (a plan's key holds their values in it).
KNOB_NAMES = ("block_m", "block_n", "num_stages", "overlap", "pingpong", "persistent", "producer_regs",
              "consumer_regs")


def checked_plan(q, k, v, causal, variant: str = "pipelined", knobs: dict | None = None, out=None, lse=None,
                 l2_bytes: int | str = BALANCED, **plan_options) -> GluonLaunchPlan:
    """Every check of a first call, then its :class:`~kernel.gluon.fwd.plan.GluonLaunchPlan` (not kept:
    :func:`plan_for` keeps it). ``plan_options``: the plan's ``direct`` and ``cache_maps``; ``l2_bytes``:
    the causal tile order's budget (:mod:`kernel.gluon.schedule`; the tests and ``benchmarks.tile_order``
    set others), by default ``"balanced"``: the budget a persistent grid deals out most evenly
    (:func:`balanced_l2_bytes`; on the H200 it took B16 H16 N1024 D128 causal from 0.90x cuDNN to 0.98x and
    tied the fixed 32 MB elsewhere, docs/results/2026-12-05-h200-balanced-order.md)."""
    reason = gluon_support(capability_of(q))
    if reason is not None:
        raise GluonUnavailable(reason)
    check_inputs(q, k, v, causal)
    check_outputs(out, lse, q)
    config = config_from(variant, q.shape[-1], causal, knobs or {})
    if l2_bytes == BALANCED:
        l2_bytes = balanced_l2_bytes(q, k, causal, config)
    arguments = functools.partial(launch_arguments, l2_bytes=l2_bytes)
    return GluonLaunchPlan(q, k, v, causal, config, out, lse, arguments, **plan_options)


def balanced_l2_bytes(q, k, causal: bool, config: GluonConfig) -> int:
    """The causal order's budget a persistent launch deals out most evenly (:func:`kernel.gluon.schedule.
    balanced_budget`); :data:`~kernel.gluon.schedule.L2_BYTES` where the order is not dealt in a stride."""
    if not (causal and config.persistent):
        return L2_BYTES
    bh, n_q, n_k = q.numel() // (q.shape[-1] * q.shape[-2]), q.shape[-2], k.shape[-2]
    programs = grid_for(config, bh, n_q, q.device)[0]
    return balanced_budget(n_q, n_k, bh, q.shape[-1], config.block_m, config.block_n, programs)


def plan_for(q, k, v, causal, variant: str, knobs: dict, out=None, lse=None) -> GluonLaunchPlan:
    """The plan kept for this call signature, made (and every input checked) on first sight.

    The key is :func:`kernel.triton.launch.plan_key`'s (shapes, strides, dtypes, devices, pointer
    alignment, causal, the outputs given) with the variant and the knobs as given, their types
    too, so a call is taken or refused as it would be on first sight: ``persistent=1.0``, which the
    config check refuses, never finds the plan of ``persistent=1``.
    """
    given = (variant, *knobs.values())
    try:
        key = plan_key(GLUON_FORWARD, q, k, v, causal, (given, tuple(map(type, given))), out, lse)
        plan = PLANS.get(key)
    except (AttributeError, TypeError):       # not tensors, or an unhashable knob: the checks say what is wrong
        key = plan = None
    return plan if plan is not None else cached_plan(key, lambda: checked_plan(q, k, v, causal, variant, knobs,
                                                                                 out, lse))


def flash_attn_fwd_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, *,
                         variant: str = "pipelined", block_m: int | None = None, block_n: int | None = None,
                         num_stages: int | None = None, overlap: bool | None = None, pingpong: bool | None = None,
                         persistent: int | None = None, producer_regs: int | None = None,
                         consumer_regs: int | None = None, out: torch.Tensor | None = None,
                         lse: torch.Tensor | None = None):
    """FlashAttention forward in Gluon for Hopper: ``kernel.triton.fwd.flash_attn_fwd``'s contract.

    A launch plan per call signature (:func:`plan_for`): the first call checks everything and
    compiles through the JIT, later ones launch the compiled kernel directly.

    Args:
        q: [B, H, N_q, D] or [B, N_q, D], float16 or bfloat16, D = 64 or 128, on an sm_90 GPU.
        k, v: [B, H, N_k, D] or [B, N_k, D], like ``q``. Tensors with a non-unit last stride
            are copied; others need 16-byte aligned starts and strides (TMA).
        causal: key j is kept for query i when j <= i (top-left aligned).
        variant, block_m, block_n, num_stages, overlap, pingpong, persistent, producer_regs,
            consumer_regs: the knobs of :class:`GluonConfig`; unset ones take
            :func:`default_gluon_config` of the variant.
        out, lse: optional preallocated outputs (``out`` like ``q``, 16-byte aligned; ``lse``
            contiguous fp32 [B, H, N_q] or [B, N_q]), sharing no memory with q, k, v (``out``
            may be ``q`` itself).

    Returns:
        ``(out, lse)``, ``lse`` the natural-log logsumexp of each row of scaled scores.

    Raises:
        GluonUnavailable: this Triton or device cannot run it (see :func:`gluon_support`).
        TypeError, ValueError: a bad input or config; the message names it.
    """
    knobs = dict(zip(KNOB_NAMES, (block_m, block_n, num_stages, overlap, pingpong, persistent, producer_regs,
                                  consumer_regs)))
    return plan_for(q, k, v, causal, variant, knobs, out, lse)(q, k, v, out, lse)


def flash_attn_fwd_gluon_jit(q, k, v, causal: bool = False, *, variant: str = "pipelined", out=None, lse=None,
                             **knobs):
    """:func:`flash_attn_fwd_gluon` as it was before launch plans: every call checks everything and
    launches through the Gluon JIT. The reference of the plan's tests, and the benchmark's baseline."""
    return checked_plan(q, k, v, causal, variant, knobs, out, lse, direct=False)(q, k, v, out, lse)


def supported() -> dict:
    """What the Gluon forward takes: dtypes, head dims, variants, knob values, and whether it runs here."""
    return dict(dtypes=tuple(DTYPES.values()), head_dims=HEAD_DIMS, variants=VARIANTS,
                block_m="64 or 128 (ws: also 192)", block_n=(64, 128), num_stages=(1, 2, 3, 4),
                persistent="0 or programs per SM (1-8)",
                regs="multiples of 8 in [24, 256]", unsupported_here=gluon_support())
