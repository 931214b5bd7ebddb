"""The autograd op: :func:`kernel.flash_attn_fwd` forward (or a tuned one), :func:`kernel.flash_attn_bwd` backward.

``flash_attention(q, k, v, causal)`` is attention as PyTorch sees it (``out.backward()`` works);
both passes take tuned configs: ``fwd`` an autotuned forward entry point, ``bwd_config`` a
:class:`~kernel.triton.bwd.BwdConfig` or an autotuned backward (:mod:`kernel.triton.autotune`), or a
:class:`~kernel.gluon.bwd.config.GluonBwdConfig`: the Gluon backward for Hopper
(:func:`kernel.gluon.bwd.launch.flash_attn_bwd_gluon`; sm_90 with Triton 3.6, else
``GluonUnavailable`` names why), which a user asks for by its config (the default stays Triton's).
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from kernel.backward import flash_attn_bwd
from kernel.forward import flash_attn_fwd
from kernel.gluon.bwd.config import GluonBwdConfig
from kernel.triton.bwd import BwdConfig

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
        if torch.is_grad_enabled():            # create_graph=True: autograd wants this backward's own graph
            raise RuntimeError("flash_attention has no double backward: its backward's kernels are not "
                               "differentiable; take second derivatives through torch's scaled_dot_product_attention")
        q, k, v, out, lse = ctx.saved_tensors
        if ctx.bwd_config is None or isinstance(ctx.bwd_config, BwdConfig):
            dq, dk, dv = flash_attn_bwd(grad_out, q, k, v, out, lse, ctx.causal, config=ctx.bwd_config)
        elif isinstance(ctx.bwd_config, GluonBwdConfig):
            dq, dk, dv = gluon_backward(ctx.bwd_config, grad_out, q, k, v, out, lse, ctx.causal)
        else:                                    # an autotuned entry point (kernel.triton.autotune)
            dq, dk, dv = ctx.bwd_config(grad_out, q, k, v, out, lse, ctx.causal)
        return dq, dk, dv, None, None, None


def gluon_backward(config: GluonBwdConfig, grad_out, q, k, v, out, lse, causal: bool):
    """(dq, dk, dv) by the Gluon backward at ``config``. It reads [B, H, N, D] tensors by TMA: [B, N, D]
    ones get a head axis of 1 and their gradients lose it again, and a gradient PyTorch hands over
    in another layout (a broadcast one, of a ``.sum()``, which TMA cannot read) is made contiguous."""
    from kernel.gluon.bwd.launch import flash_attn_bwd_gluon

    three = q.ndim == 3
    if three:
        q, k, v, out, lse, grad_out = (t.unsqueeze(1) for t in (q, k, v, out, lse, grad_out))
    if not grad_out.is_contiguous():
        grad_out = grad_out.contiguous()
    grads = flash_attn_bwd_gluon(q, k, v, out, lse, grad_out, causal, **asdict(config))
    return tuple(g.squeeze(1) for g in grads) if three else grads


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    bwd_config=None, fwd=None) -> torch.Tensor:
    """Attention as an autograd op: :func:`kernel.flash_attn_fwd` forward, :func:`flash_attn_bwd` backward.

    Args:
        bwd_config: the backward's :class:`~kernel.triton.bwd.BwdConfig`, or an autotuned entry point
            over an emitted list (:class:`kernel.triton.autotune.AutotunedBackward`), or a
            :class:`~kernel.gluon.bwd.config.GluonBwdConfig` for the Gluon backward (Hopper, Triton
            3.6); default :func:`default_bwd_config`.
        fwd: the forward to use instead of :func:`kernel.flash_attn_fwd`, such as
            ``kernel.triton.autotune.flash_attn_fwd_autotuned`` (same arguments, returns ``(out, lse)``).

    Raises:
        TypeError: ``bwd_config`` or ``fwd`` is none of the above (checked here, not at backward time).
    """
    if not (bwd_config is None or isinstance(bwd_config, (BwdConfig, GluonBwdConfig)) or callable(bwd_config)):
        raise TypeError(f"bwd_config must be None, a kernel.BwdConfig, a GluonBwdConfig or an autotuned backward "
                        f"(kernel.triton.autotune.AutotunedBackward); got {bwd_config!r:.80}")
    if fwd is not None and not callable(fwd):
        raise TypeError(f"fwd must be a forward entry point like kernel.flash_attn_fwd; got {fwd!r:.80}")
    return FlashAttention.apply(q, k, v, causal, bwd_config, fwd)
