"""The warp-specialized FlashAttention backward for Hopper in Gluon: checks and launcher.

The device code is in ``kernel.py`` and ``producer.py`` (a TMA producer warp, one consumer
warpgroup holding dK and dV, 5 matmuls per tile pair, dQ by TMA reduce-add into fp32), the
knobs in ``config.py``, the cross-compiler in ``compile.py`` (this folder, :mod:`kernel.gluon.bwd`).

A call runs three kernels: ``kernel.triton.bwd``'s preprocess (delta = rowsum(dO * O), the
fp32 dQ accumulator zeroed), the Gluon kernel, and ``kernel.triton.bwd``'s dQ conversion
(scale and cast); a launch plan per call signature launches them without the JITs after the
first call (``plan.py``). The contract is ``kernel.flash_attn_bwd``'s for [B, H, N, D] tensors:
bf16 or fp16, D 64 or 128, any N_q, N_k >= 0, causal top-left aligned, ``lse`` the forward's
(natural log); on CUDA sm_90, under a Triton whose Gluon has what it uses (:mod:`kernel.gluon.api`;
:class:`GluonUnavailable` elsewhere). A default call of ``kernel.flash_attn_bwd`` (and so
``flash_attention``'s backward) runs it where :mod:`kernel.route` says; the tuner sweeps it as the
kernel ``gluon_bwd``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import torch

from kernel.arch import capability_of
from kernel.checks import check_agreement, check_kinds
from kernel.gluon.api import GluonUnavailable, gl, gluon_bwd_support
from kernel.gluon.bwd.config import HEAD_DIMS, KEYS_PER_CONSUMER, GluonBwdConfig, default_gluon_bwd_config
from kernel.gluon.bwd.plan import GluonBwdPlan
from kernel.gluon.checks import DTYPES, tma_strides
from kernel.gluon.schedule import L2_BYTES
from kernel.triton.bwd_launch import _plan_key
from kernel.triton.launch import PLANS, cached_plan

LOG2E = 1.4426950408889634
_GL_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


# ---------------------------------------------------------------------------------- checks


def check_bwd_inputs(q, k, v, out, lse, dout, causal, grads=(None, None, None), devices: bool = True) -> None:
    """Every check of a call, each error naming the field; devices are checked last (``devices=False``:
    not at all, for the default call's router, which has asked the device already)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be [B, H, N, D] for the Gluon backward; got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype is {t.dtype}; the Gluon backward supports float16 and bfloat16")
    check_kinds(q, k, v, causal)
    check_agreement(q, k, v, HEAD_DIMS, " by the Gluon backward")
    for name, t in (("out", out), ("dout", dout)):
        if t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must be like q ({tuple(q.shape)}, {q.dtype}, {q.device}); got "
                             f"{tuple(t.shape)} {t.dtype} on {t.device}")
    if lse.shape != q.shape[:-1] or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"lse must be float32 {tuple(q.shape[:-1])} on {q.device} (the forward's); got "
                         f"{tuple(lse.shape)} {lse.dtype} on {lse.device}")
    if not lse.is_contiguous():
        raise ValueError(f"lse must be contiguous; got strides {tuple(lse.stride())}")
    for name, given, like in zip(("dq", "dk", "dv"), grads, (q, k, v)):
        if given is not None and (not isinstance(given, torch.Tensor) or given.shape != like.shape
                                  or given.dtype != like.dtype or given.device != like.device
                                  or not given.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous tensor like {'qkv'[('dq', 'dk', 'dv').index(name)]} "
                             f"({tuple(like.shape)}, {like.dtype}, {like.device})")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)) if devices else ():
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; the Gluon backward needs CUDA tensors on an sm_90 GPU")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} needs a unit last stride; got strides {tuple(t.stride())}")


def config_from(head_dim: int, causal: bool, knobs: dict) -> GluonBwdConfig:
    config = replace(default_gluon_bwd_config(head_dim, causal),
                     **{name: value for name, value in knobs.items() if value is not None})
    problems = config.problems(head_dim)
    if problems:
        raise ValueError(f"Gluon backward config {config}: " + "; ".join(problems))
    return config


# ------------------------------------------------------------------------ launch arguments


def _descriptor(name: str, t4: torch.Tensor, rows: int, cols: int | None = None):
    """A TMA descriptor of [B, H, N, D] tensor ``t4`` with blocks of [1, 1, rows, cols or D]."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = [1, 1, rows, cols or t4.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _GL_DTYPES[t4.dtype]))
    return TensorDescriptor(t4, list(t4.shape), tma_strides(name, t4), block, layout)


def launch_arguments(q, k, v, dout, dq_acc, dk, dv, lse, delta, config: GluonBwdConfig, causal: bool,
                     l2_bytes: int = L2_BYTES):
    """(kernel, positional arguments, constexprs, options) of the Gluon kernel's launch on
    [B, H, N, D] tensors (``dq_acc`` fp32 [B, H, N_q, D]); the launcher and the
    cross-compiler (with stand-in tensors) both use this. ``l2_bytes``: what a group of heads of the
    causal tile order may read (:mod:`kernel.gluon.schedule`)."""
    from kernel.gluon.bwd.kernel import bwd_gluon_kernel

    batch, heads, n_q, head_dim = q.shape
    block_m, block_n = config.block_m, config.block_n
    descriptors = (_descriptor("q", q, block_m), _descriptor("k", k, block_n), _descriptor("v", v, block_n),
                   _descriptor("dout", dout, block_m), _descriptor("dq", dq_acc, block_m, config.dq_chunk(head_dim)),
                   _descriptor("dk", dk, KEYS_PER_CONSUMER), _descriptor("dv", dv, KEYS_PER_CONSUMER))
    sm_scale = 1.0 / math.sqrt(head_dim)
    args = (*descriptors, lse, delta, heads, batch * heads, n_q, k.shape[2], sm_scale * LOG2E, sm_scale)
    constexprs = dict(CAUSAL=causal, NUM_STAGES=config.num_stages, DQ_BUFS=config.dq_bufs,
                      CONSUMERS=config.consumers, PRODUCER_REGS=config.producer_regs,
                      CONSUMER_REGS=config.consumer_regs, L2_BYTES=l2_bytes)
    options = dict(num_warps=4, maxnreg=config.maxnreg)
    return bwd_gluon_kernel, args, constexprs, options


GLUON_BACKWARD = "gluon-backward"    # the kernel slot of a backward plan's key
# The knobs of flash_attn_bwd_gluon, in its order (a plan's key holds their values and types in it).
KNOB_NAMES = ("block_m", "num_stages", "dq_bufs", "consumers", "persistent", "producer_regs", "consumer_regs")


def checked_plan(q, k, v, out, lse, dout, causal, knobs: dict | None = None, grads=(None, None, None),
                 l2_bytes: int = L2_BYTES, **plan_options) -> GluonBwdPlan:
    """Every check of a first call, then its :class:`~kernel.gluon.bwd.plan.GluonBwdPlan` (not kept:
    :func:`plan_for` keeps it). ``plan_options``: the plan's ``direct`` and ``cache_maps``; ``l2_bytes``:
    the causal tile order's budget (:mod:`kernel.gluon.schedule`; the tests and ``benchmarks.tile_order``
    set others)."""
    reason = gluon_bwd_support(capability_of(q))
    if reason is not None:
        raise GluonUnavailable(reason)
    check_bwd_inputs(q, k, v, out, lse, dout, causal, grads)
    config = config_from(q.shape[-1], causal, knobs or {})
    arguments = functools.partial(launch_arguments, l2_bytes=l2_bytes)
    return GluonBwdPlan(q, k, v, out, lse, dout, causal, config, grads, arguments, **plan_options)


def plan_for(q, k, v, out, lse, dout, causal, knobs: dict, grads=(None, None, None)) -> GluonBwdPlan:
    """The plan kept for this call signature, made (and every input checked) on first sight.

    The key is ``kernel.triton.bwd_launch``'s (each tensor's shape, strides, dtype, device and pointer
    alignment; the gradients given) with causal and the knobs as given, their types too, so a call is
    taken or refused as it would be on first sight (``causal=1`` or ``persistent=1.0`` never find
    the plan of ``True`` or ``1``).
    """
    given = (causal, *knobs.values())
    try:
        key = _plan_key((GLUON_BACKWARD, given, tuple(map(type, given))), causal, (q, k, v, out, lse, dout, *grads))
        plan = PLANS.get(key)
    except (AttributeError, TypeError):       # not tensors, or an unhashable knob: the checks say what is wrong
        key = plan = None
    return plan if plan is not None else cached_plan(key, lambda: checked_plan(q, k, v, out, lse, dout, causal, knobs,
                                                                                 grads))


# ---------------------------------------------------------------------------------- launcher


def flash_attn_bwd_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                         dout: torch.Tensor, causal: bool = False, *, block_m: int | None = None,
                         num_stages: int | None = None, dq_bufs: int | None = None, consumers: int | None = None,
                         persistent: int | None = None,
                         producer_regs: int | None = None, consumer_regs: int | None = None,
                         dq: torch.Tensor | None = None, dk: torch.Tensor | None = None,
                         dv: torch.Tensor | None = None):
    """Gradients of ``out = attention(q, k, v)`` given ``dout``: ``kernel.flash_attn_bwd``'s contract.

    A launch plan per call signature (:func:`plan_for`): the first call checks everything and
    compiles through the JITs, later ones launch the compiled kernels directly.

    Args:
        q: [B, H, N_q, D] float16 or bfloat16, D = 64 or 128, on an sm_90 GPU; k, v [B, H, N_k, D].
            Read by TMA: 16-byte aligned starts and strides, a unit last stride.
        out, lse: the forward's output (like q) and natural-log logsumexp (fp32 [B, H, N_q], contiguous).
        dout: the gradient of ``out``, like q.
        causal: key j is seen by query i when j <= i (top-left aligned).
        block_m, num_stages, dq_bufs, consumers, persistent, producer_regs, consumer_regs: the knobs of
            :class:`GluonBwdConfig`; unset ones take :func:`default_gluon_bwd_config`'s.
        dq, dk, dv: optional preallocated gradients (contiguous, like q, k and v), sharing no memory
            with the inputs or each other.

    Returns:
        ``(dq, dk, dv)``.

    Raises:
        GluonUnavailable: this Triton or device cannot run it (:func:`gluon_bwd_support`).
        TypeError, ValueError: a bad input or config; the message names it.
    """
    knobs = dict(zip(KNOB_NAMES, (block_m, num_stages, dq_bufs, consumers, persistent, producer_regs, consumer_regs)))
    grads = (dq, dk, dv)
    return plan_for(q, k, v, out, lse, dout, causal, knobs, grads)(q, k, v, out, lse, dout, *grads)


def flash_attn_bwd_gluon_jit(q, k, v, out, lse, dout, causal: bool = False, *, dq=None, dk=None, dv=None, **knobs):
    """:func:`flash_attn_bwd_gluon` as it was before launch plans: every call checks everything and
    launches the three kernels through their JITs. The reference of the plan's tests, and the benchmark's baseline."""
    grads = (dq, dk, dv)
    return checked_plan(q, k, v, out, lse, dout, causal, knobs, grads, direct=False)(q, k, v, out, lse, dout, *grads)


__all__ = ["GluonBwdConfig", "GluonUnavailable", "check_bwd_inputs", "default_gluon_bwd_config",
           "flash_attn_bwd_gluon", "flash_attn_bwd_gluon_jit", "launch_arguments", "plan_for"]
