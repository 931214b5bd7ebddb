"""Which kernel a forward call that names no config runs: the Gluon kernel where it wins, else Triton's.

:data:`GLUON_ROUTES` is the rule, in one table: on sm_90 with Triton 3.6 (both detected on the
call's device and the installed Triton, never assumed) the default call at these (head dim,
causal) runs the Gluon forward (:mod:`kernel.flash_fwd_gluon`) with that variant at its default
config, through a launch plan (:class:`GluonPlan`, :mod:`kernel.gluon_launch`); everywhere else,
and for every call that names a tile or sets a knob, the Triton kernel runs (the portable path:
Ada, other Triton versions, the CPU interpreter).

A routed call must be one the Gluon launcher takes as it is: its own checks
(:mod:`kernel.gluon_checks`) are asked first, and inputs it would refuse (fp32, a head dim it
lacks, a misaligned view, an output it cannot store to by TMA) stay on the Triton kernel rather
than erroring. :func:`gluon_plan` is asked once per input layout (the launcher's plan cache keeps
its answer), so the check costs nothing on later calls.
"""

from __future__ import annotations

import torch

from kernel.gluon_checks import check_outputs, check_shapes, tma_strides
from kernel.launch import interpreting

__all__ = ["GLUON_ROUTES", "ROUTE_MIN_FLOPS", "GluonPlan", "attention_work",
           "default_variant", "gluon_plan", "refusal", "route_reason"]

# (head dim, causal) -> the Gluon variant a default call runs on sm_90 with Triton 3.6; a pair not
# here runs the Triton kernel. On the H200 (bf16, B4 H8 N4096, docs/results/2026-12-01-h200-gluon.md)
# "ws" ran at 1.19x / 1.12x the Triton kernel's default at D=128 (non-causal / causal). At D=64 its
# 128-row tile tied Triton's non-causal (0.99x, and 0.97x at B1 H8 N16384) and won causal by 3%; its
# 192-row tile (three consumers, the D=64 default since) reached 0.97x / 1.00x cuDNN's speed against
# the 128-row tile's 0.93x / 0.95x, so both D=64 masks take the route.
GLUON_ROUTES: dict[tuple[int, bool], str] = {(128, False): "ws", (128, True): "ws", (64, False): "ws",
                                             (64, True): "ws"}

# The least work (4·B·H·N_q·N_k·D FLOPs, halved when causal) a default call needs to take the route.
# Through the Gluon JIT a routed call cost 164-252 µs of host time, so small calls stayed on Triton
# (2e11). Through its launch plan (kernel.gluon_launch) a routed call costs 13-20 µs against the
# Triton plan's 16-27 µs, and the Gluon kernel's GPU time is below the Triton kernel's at every
# D=128 length measured (N 256-2048, B4 H8; `python -m benchmarks.gluon --host`, H200, 2026-12-01,
# docs/results/2026-12-01-h200-gluon.md): no bound is left. The one place to set one again.
ROUTE_MIN_FLOPS = 0.0


def route_reason(device: torch.device) -> str | None:
    """Why a default call on ``device`` cannot run the Gluon kernel (None: it can): the interpreter,
    a device other than CUDA, a GPU other than sm_90, a Triton other than 3.6 or without Gluon."""
    if interpreting():
        return "TRITON_INTERPRET=1: the interpreter runs the Triton kernel only"
    if device.type != "cuda":
        return f"the inputs are on {device}, not a CUDA GPU"
    from kernel.flash_fwd_gluon import gluon_support

    return gluon_support(capability_of(device))


def capability_of(device: torch.device) -> int:
    """A CUDA device's compute capability as an int (90 for sm_90)."""
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def refusal(q, k, v, causal, out=None, lse=None) -> str | None:
    """Why the Gluon launcher would refuse (or copy) these tensors, by its own checks; None: it takes them."""
    try:
        check_shapes(q, k, v, causal)
        check_outputs(out, lse, q)
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            if t is not None:
                if t.stride(-1) != 1:
                    return f"{name} has a non-unit last stride (the Gluon launcher would copy it)"
                tma_strides(name, t if t.ndim == 4 else t.unsqueeze(1))
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


class GluonPlan:
    """A default call's plan that runs the Gluon kernel: ``plan(q, k, v, out, lse) -> (out, lse)``.

    Kept per input layout by the Triton launcher's plan cache, whose key holds everything a Gluon
    launch plan depends on; so the first call makes the Gluon launch plan
    (:func:`kernel.flash_fwd_gluon.checked_plan`: the Gluon launcher's checks, once) and every
    call runs it, with no second key: from the second call on it launches the compiled kernel.
    """

    def __init__(self, variant: str, causal: bool):
        self.variant, self.causal = variant, causal
        self.launch = None                 # the kernel.gluon_launch.GluonLaunchPlan, from the first call

    def __call__(self, q, k, v, out=None, lse=None):
        launch = self.launch
        if launch is None:
            from kernel.flash_fwd_gluon import checked_plan

            launch = self.launch = checked_plan(q, k, v, self.causal, self.variant, None, out, lse)
        return launch(q, k, v, out, lse)

    def __repr__(self) -> str:
        return f"GluonPlan(variant={self.variant!r}, causal={self.causal})"


def default_variant(head_dim: int, causal: bool = False, device=None) -> str | None:
    """The Gluon variant a default call of this head dim and mask runs on ``device`` (default the
    current CUDA device), for inputs the Gluon launcher takes; None: the Triton kernel at
    :func:`kernel.default_config`."""
    variant = GLUON_ROUTES.get((head_dim, bool(causal)))
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return None if variant is None or route_reason(torch.device(device)) is not None else variant


def gluon_plan(q, k, v, causal, out=None, lse=None) -> GluonPlan | None:
    """The Gluon plan for a default call where :data:`GLUON_ROUTES` and this machine say so, else None
    (the caller runs the Triton kernel). Called after the Triton launcher's own input checks."""
    if attention_work(q, k, causal) < ROUTE_MIN_FLOPS:
        return None
    variant = default_variant(q.shape[-1], causal, q.device)
    if variant is None or refusal(q, k, v, causal, out, lse) is not None:
        return None
    return GluonPlan(variant, bool(causal))


def attention_work(q, k, causal: bool) -> float:
    """The forward's FLOPs, 4·B·H·N_q·N_k·D, halved when causal (what :data:`ROUTE_MIN_FLOPS` bounds)."""
    flops = 4.0 * q.numel() * k.shape[-2]
    return flops / 2 if causal else flops
