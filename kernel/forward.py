"""The forward's entry point, :func:`flash_attn_fwd`, and where a call that names no config goes.

A default call (no tile, no knob) runs the Gluon forward where :mod:`kernel.route` says so
(:data:`~kernel.route.GLUON_ROUTES`, this machine, inputs the Gluon launcher takes); every other
call runs the Triton kernel (:mod:`kernel.triton.fwd`) at the config given, unset values from
:func:`kernel.triton.defaults.default_config`. Either way the plan is made once per input layout
(the Triton launcher's plan cache, a default call under a key of its own), so a repeated call costs
little more than its launch.
"""

from __future__ import annotations

import torch

from kernel.route import gluon_plan
from kernel.triton.fwd import JIT_KERNEL, plan_for

__all__ = ["flash_attn_fwd"]


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
        num_warps, num_stages: Triton launch options. Unset values come from :func:`default_config`;
            a call that sets none nor a knob runs the Gluon kernel where :mod:`kernel.route` says.
        tma: load keys and values through device-side TMA tensor descriptors (one per
            head, so ragged lengths stay in bounds); sm_90 and later, elsewhere Triton
            falls back to plain loads. Needs 16-byte aligned heads and row strides.
        warp_specialize: let the compiler split the unmasked key loop into producer and
            consumer warps (``tl.range(..., warp_specialize=True)``); Hopper and later.
        maxnreg: cap on registers per thread, or None (or 0) for the compiler's choice.
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
    return plan_for(JIT_KERNEL, config, q, k, v, causal, out, lse, gluon_plan)(q, k, v, out, lse)
