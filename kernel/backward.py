"""The backward's entry point, :func:`flash_attn_bwd`, and where a call that names no config goes.

A default call (no config, no field) runs the Gluon backward where :mod:`kernel.route` says so
(:data:`~kernel.route.GLUON_BWD_ROUTES`, this machine, inputs the Gluon launcher takes); every other
call, and inputs the Gluon launcher would refuse, run the Triton kernels (:mod:`kernel.triton.bwd_launch`).
The route is asked once per input layout, after the Triton launcher's own checks, and the plan
cache keeps its answer under a key without a config (:func:`_default_plan`): a later default call
costs the key and the plan's launch, no config and no route.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kernel.route import gluon_bwd_plan
from kernel.triton.bwd import BwdConfig
from kernel.triton.bwd_launch import _tma_misfit, bwd_plan_for, cached_bwd_plan, make_bwd_plan
from kernel.triton.defaults import default_bwd_config

__all__ = ["flash_attn_bwd"]


def flash_attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, causal: bool = False, *, config: BwdConfig | None = None,
                   dq: torch.Tensor | None = None, dk: torch.Tensor | None = None, dv: torch.Tensor | None = None,
                   **fields):
    """Gradients of ``out = attention(q, k, v)`` given ``dout``, from the forward's ``out`` and ``lse``.

    Args:
        dout: the gradient of ``out``, like ``q``.
        q, k, v, out, lse: the forward's inputs and outputs (:func:`kernel.flash_attn_fwd`).
        causal: as in the forward.
        config: a :class:`~kernel.triton.bwd.BwdConfig`; default: the Gluon backward where
            :data:`~kernel.route.GLUON_BWD_ROUTES` routes the call (sm_90, Triton 3.6, inputs
            it takes), else :func:`~kernel.triton.defaults.default_bwd_config`.
        **fields: :class:`~kernel.triton.bwd.BwdConfig` fields that replace the config's:
            ``block_m``, ``block_n`` (the dK/dV kernel's query and key tiles), ``num_warps``,
            ``num_stages``; ``block_m_q``, ``block_n_q``, ``num_warps_q``, ``num_stages_q`` (the
            dQ pass's; default those of the dK/dV kernel when it names them and no config is
            given); ``dq_mode`` ("pass", "atomic" or "tma"); ``tma`` (TMA loads of the tiles a
            loop walks, sm_90+); ``maxnreg``; ``persistent``; ``overlap`` (the dQ pass on a second
            stream beside the dK/dV kernel).
        dq, dk, dv: optional preallocated gradients (contiguous, like q, k and v); tests fill
            them with NaN so that an element the kernels never write shows up.

    Returns:
        ``(dq, dk, dv)``, like ``q``, ``k`` and ``v``.

    Raises:
        TypeError, ValueError: a bad input or config; the message names it.
    """
    grads = (dq, dk, dv)
    if config is not None and not isinstance(config, BwdConfig):
        hint = " (pass its fields as keywords: flash_attn_bwd(..., **config))" if isinstance(config, dict) else ""
        raise TypeError(f"config must be None or a kernel.BwdConfig; got {type(config).__name__}{hint}")
    if config is None and not fields:
        return _default_plan(dout, q, k, v, out, lse, causal, grads)(dout, q, k, v, out, lse, dq, dk, dv)
    if config is None:
        config = _default_config(dout, q, k, v, causal)
        if "block_m" in fields and "block_m_q" not in fields:
            fields["block_m_q"] = fields["block_m"]
        if "block_n" in fields and "block_n_q" not in fields:
            fields["block_n_q"] = fields["block_n"]
        for name in ("num_warps", "num_stages"):
            if name in fields and f"{name}_q" not in fields:
                fields[f"{name}_q"] = fields[name]
        if fields.get("dq_mode", "pass") != "pass" and "overlap" not in fields:
            fields["overlap"] = False     # a default that overlaps its dQ pass has none to overlap then
    if fields:
        unknown = sorted(set(fields) - set(BwdConfig.__dataclass_fields__))
        if unknown:
            raise TypeError(f"flash_attn_bwd got unknown config field {unknown[0]!r}; fields: "
                            f"{', '.join(BwdConfig.__dataclass_fields__)}")
        config = replace(config, **fields)
    return bwd_plan_for(config, dout, q, k, v, out, lse, causal, grads)(dout, q, k, v, out, lse, dq, dk, dv)


def _default_config(dout, q, k, v, causal) -> BwdConfig:
    """The Triton backward's default for this call; TMA dropped where these tensors do not suit it."""
    shaped = isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
    config = default_bwd_config(q.shape[-1] if shaped else 64, causal, None if not shaped or q.is_cuda else 0,
                                (q.shape[-2], k.shape[-2]) if shaped else None)
    if (config.tma or config.dq_mode == "tma") and (not isinstance(dout, torch.Tensor) or _tma_misfit(
            (("q", q), ("k", k), ("v", v), ("dout", dout)))):
        config = replace(config, tma=False, dq_mode="pass")     # the defaults never refuse a layout
    return config


DEFAULT_CALL = "default backward call"      # the config slot of a default call's plan key


def _default_plan(dout, q, k, v, out, lse, causal, grads):
    """A call naming no config: its plan kept under a key without one (the key holds everything the
    default config, its TMA fit and the route depend on: shapes, strides, dtypes, devices, alignment),
    so the default config and the route are worked out on first sight only."""
    return cached_bwd_plan(DEFAULT_CALL, causal, (dout, q, k, v, out, lse, *grads), lambda: make_bwd_plan(
        _default_config(dout, q, k, v, causal), dout, q, k, v, out, lse, causal, grads, gluon_bwd_plan))
