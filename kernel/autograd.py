"""The autograd op: :func:`kernel.flash_attn_fwd` forward (or a tuned one), :func:`kernel.flash_attn_bwd` backward.

``flash_attention(q, k, v, causal)`` is attention as PyTorch sees it (``out.backward()`` works);
both passes take tuned configs: ``fwd`` an autotuned forward entry point, ``bwd_config`` a
:class:`~kernel.flash_bwd.BwdConfig` or an autotuned backward (:mod:`kernel.bwd_autotune`).
"""

from __future__ import annotations

import torch

from kernel.bwd_launch import flash_attn_bwd
from kernel.flash_bwd import BwdConfig
from kernel.flash_fwd import flash_attn_fwd

__all__ = ["FlashAttention", "flash_attention"]


class FlashAttention(torch.autograd.Function):
    """``out = softmax(q k^T / sqrt(D)) v`` with the FA2 forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, bwd_config=None, fwd=None):
        out, lse = (fwd or flash_attn_fwd)(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.bwd_config = causal, bwd_config
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        if ctx.bwd_config is None or isinstance(ctx.bwd_config, BwdConfig):
            dq, dk, dv = flash_attn_bwd(grad_out, q, k, v, out, lse, ctx.causal, config=ctx.bwd_config)
        else:                                    # an autotuned entry point (kernel.bwd_autotune)
            dq, dk, dv = ctx.bwd_config(grad_out, q, k, v, out, lse, ctx.causal)
        return dq, dk, dv, None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    bwd_config=None, fwd=None) -> torch.Tensor:
    """Attention as an autograd op: :func:`kernel.flash_attn_fwd` forward, :func:`flash_attn_bwd` backward.

    Args:
        bwd_config: the backward's :class:`~kernel.flash_bwd.BwdConfig`, or an autotuned entry point
            over an emitted list (:class:`kernel.bwd_autotune.AutotunedBackward`); default
            :func:`default_bwd_config`.
        fwd: the forward to use instead of :func:`kernel.flash_attn_fwd`, such as
            ``kernel.autotuned.flash_attn_fwd_autotuned`` (same arguments, returns ``(out, lse)``).
    """
    return FlashAttention.apply(q, k, v, causal, bwd_config, fwd)
