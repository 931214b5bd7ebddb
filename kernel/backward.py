"""The backward's entry point, :func:`flash_attn_bwd`, and where a call that names no config goes.

A default call (no config, no field) runs the Gluon backward (:mod:`kernel.flash_bwd_gluon`) where
:data:`kernel.bwd_defaults.GLUON_BWD_ROUTES` and this machine say so: sm_90 with Triton 3.6, both
detected on the call's device and the installed Triton, never assumed; inputs the Gluon launcher
takes as they are (its own checks are asked, the device's aside; [B, N, D] inputs are viewed as
[B, 1, N, D]). Every other call, and inputs the Gluon launcher would refuse (fp32, a head dim it
lacks, a layout TMA cannot read), run the Triton kernels (:mod:`kernel.bwd_launch`) rather than
erroring. The route is asked once per input layout, after the Triton launcher's own checks, and
the plan cache keeps its answer under a key without a config (:func:`_default_plan`): a later
default call costs the key and the plan's launch, no config and no route.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import torch

from kernel.bwd_defaults import GLUON_BWD_ROUTES, default_bwd_config
from kernel.bwd_launch import _tma_misfit, bwd_plan_for, cached_bwd_plan, make_bwd_plan
from kernel.flash_bwd import BwdConfig
from kernel.gluon_bwd_config import GluonBwdConfig
from kernel.gluon_route import capability_of, route_reason

__all__ = ["GluonBwdRoute", "backward_route_reason", "bwd_refusal", "flash_attn_bwd", "gluon_bwd_plan"]


def backward_route_reason(device: torch.device) -> str | None:
    """Why a default backward call on ``device`` cannot run the Gluon backward (None: it can): the
    forward's reasons (:func:`kernel.gluon_route.route_reason`), or a Gluon without TMA reduce."""
    reason = route_reason(device)
    if reason is None:
        from kernel.flash_bwd_gluon import gluon_bwd_support

        reason = gluon_bwd_support(capability_of(device))
    return reason


def _heads_axis(*tensors):
    """[B, N, D] inputs (and their [B, N] lse) as [B, 1, N, D] views; None stays None."""
    return tuple(None if t is None else t.unsqueeze(1) for t in tensors)


def bwd_refusal(dout, q, k, v, out, lse, causal, grads=(None, None, None)) -> str | None:
    """Why the Gluon launcher would refuse these tensors (its checks but the device's, which
    :func:`backward_route_reason` answers), as [B, H, N, D]; None: it takes them."""
    from kernel.flash_bwd_gluon import check_bwd_inputs
    from kernel.gluon_checks import tma_strides

    if q.ndim == 3:
        q, k, v, out, lse, dout, *grads = _heads_axis(q, k, v, out, lse, dout, *grads)
    try:
        check_bwd_inputs(q, k, v, out, lse, dout, causal, tuple(grads), devices=False)
        for name, t in (("q", q), ("k", k), ("v", v), ("dout", dout)):
            if t.stride(-1) != 1:
                return f"{name} has a non-unit last stride (TMA reads rows of unit stride)"
            tma_strides(name, t)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


class GluonBwdRoute:
    """A default backward call's plan that runs the Gluon backward: ``route(dout, q, k, v, out, lse,
    dq, dk, dv) -> (dq, dk, dv)``, the Triton plan's signature. Kept per input layout by the Triton
    launcher's plan cache (its key holds everything the Gluon plan depends on): the first call
    makes the Gluon launch plan (its checks, once), and every call runs it."""

    def __init__(self, config: GluonBwdConfig, causal: bool, three_dims: bool):
        self.config, self.causal, self.three_dims = config, causal, three_dims
        self.launch = None              # the kernel.gluon_bwd_launch.GluonBwdPlan, from the first call

    def __call__(self, dout, q, k, v, out, lse, dq=None, dk=None, dv=None):
        if self.three_dims:
            q, k, v, out, lse, dout, dq, dk, dv = _heads_axis(q, k, v, out, lse, dout, dq, dk, dv)
        launch = self.launch
        if launch is None:
            from kernel.flash_bwd_gluon import checked_plan

            launch = self.launch = checked_plan(q, k, v, out, lse, dout, self.causal, asdict(self.config),
                                                (dq, dk, dv))
        grads = launch(q, k, v, out, lse, dout, dq, dk, dv)
        return tuple(g.squeeze(1) for g in grads) if self.three_dims else grads

    def __repr__(self) -> str:
        return f"GluonBwdRoute({self.config.key()}, causal={self.causal})"


def gluon_bwd_plan(dout, q, k, v, out, lse, causal, grads=(None, None, None)) -> GluonBwdRoute | None:
    """The Gluon route for a default call where :data:`GLUON_BWD_ROUTES` and this machine say so, else
    None (the caller runs the Triton kernels). Called after the Triton launcher's input checks."""
    config = GLUON_BWD_ROUTES.get((q.shape[-1], bool(causal)))
    if config is None or backward_route_reason(q.device) is not None:
        return None
    if bwd_refusal(dout, q, k, v, out, lse, causal, grads) is not None:
        return None
    return GluonBwdRoute(config, bool(causal), q.ndim == 3)


# --------------------------------------------------------------------------- entry point


def flash_attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, causal: bool = False, *, config: BwdConfig | None = None,
                   dq: torch.Tensor | None = None, dk: torch.Tensor | None = None, dv: torch.Tensor | None = None,
                   **fields):
    """Gradients of ``out = attention(q, k, v)`` given ``dout``, from the forward's ``out`` and ``lse``.

    Args:
        dout: the gradient of ``out``, like ``q``.
        q, k, v, out, lse: the forward's inputs and outputs (:func:`kernel.flash_attn_fwd`).
        causal: as in the forward.
        config: a :class:`~kernel.flash_bwd.BwdConfig`; default: the Gluon backward where
            :data:`~kernel.bwd_defaults.GLUON_BWD_ROUTES` routes the call (sm_90, Triton 3.6, inputs
            it takes), else :func:`~kernel.bwd_defaults.default_bwd_config`.
        **fields: :class:`~kernel.flash_bwd.BwdConfig` fields that replace the config's:
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
