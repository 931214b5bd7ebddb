"""Which kernel a call that names no config runs, for both passes: the Gluon kernel where it wins, else Triton's.

One rule per pass, each a table, built the same way:

* :data:`GLUON_ROUTES`: (head dim, causal) -> the Gluon forward's variant a default forward call
  runs (:mod:`kernel.gluon.fwd.launch`), at its default config, through its launch plan
  (:class:`GluonPlan`);
* :data:`GLUON_BWD_ROUTES`: (head dim, causal) -> the Gluon backward's config a default backward
  call runs (:mod:`kernel.gluon.bwd.launch`), through :class:`GluonBwdRoute`.

Within a (head dim, causal) pair the tables route, :mod:`kernel.route_table` decides by the call's
length and batch x heads: the fastest of our candidates there (:mod:`kernel.candidates`: a kernel at a
config, Triton's or Gluon's), as measured on the GPU it names (:func:`measured_kernel`;
``python -m benchmarks.route --table FILE`` writes it for yours, and ``FA2_TUNER_ROUTE_TABLE=FILE``
makes the default call read that file instead: :func:`measured_tables`).

Where the call's device and the installed Triton can run Gluon (:mod:`kernel.gluon.api`:
:func:`route_reason`), for inputs the Gluon launcher takes as they are
(its own checks are asked first: :func:`refusal`, :func:`bwd_refusal`). Everywhere else, and for
every call that names a tile, a config or a knob, the Triton kernels run (the portable path: Ada,
a Triton whose Gluon lacks something, the CPU interpreter); inputs Gluon would refuse (fp32, a
head dim it lacks, a misaligned view) stay on Triton rather than erroring.

The entry points (:mod:`kernel.forward`, :mod:`kernel.backward`) hand :func:`gluon_plan` and
:func:`gluon_bwd_plan` to the Triton launchers, which ask them once per input layout (the plan
cache keeps the answer under a default call's key), so the route costs nothing on later calls.
The Triton code never imports Gluon.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from dataclasses import asdict, replace

import torch

import kernel.route_table as route_table
from kernel.arch import capability_of, interpreting
from kernel.candidates import BACKWARD, FORWARD, Candidate
from kernel.gluon.bwd.config import GLUON_BWD_DEFAULTS, GluonBwdConfig
from kernel.gluon.checks import check_outputs, check_shapes, tma_strides

__all__ = ["GLUON_BWD_ROUTES", "GLUON_ROUTES", "ROUTE_MIN_FLOPS", "GluonBwdRoute", "GluonPlan", "attention_work",
           "ROUTE_TABLE_ENV", "backward_route_reason", "bwd_refusal", "default_variant", "gluon_bwd_plan", "gluon_plan",
           "measured_kernel", "measured_table_file", "measured_tables", "refusal", "route_reason"]

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
# (2e11). Through its launch plan (kernel.gluon.fwd.plan) a routed call costs 13-20 µs against the
# Triton plan's 16-27 µs, and the Gluon kernel's GPU time is below the Triton kernel's at every
# D=128 length measured (N 256-2048, B4 H8; `python -m benchmarks.gluon --host`, H200, 2026-12-01,
# docs/results/2026-12-01-h200-gluon.md): no bound is left. The one place to set one again.
ROUTE_MIN_FLOPS = 0.0

# (head dim, causal) -> the Gluon backward's config of a default call on sm_90 with Triton 3.6: its
# defaults (kernel.gluon.bwd.config.GLUON_BWD_DEFAULTS). On the H200 (bf16, B4 H8 N4096, paired with
# SDPA-cuDNN; docs/results/2026-12-01-h200-backward-default.md) they ran at 1.05x / 1.19x (D=64) and
# 1.40x / 1.39x (D=128) the Triton backward's default, non-causal / causal: every pair the Gluon
# backward has takes the route.
GLUON_BWD_ROUTES: dict[tuple[int, bool], GluonBwdConfig] = {
    key: GLUON_BWD_DEFAULTS[key] for key in ((64, False), (64, True), (128, False), (128, True))}


def route_reason(device: torch.device) -> str | None:
    """Why a default call on ``device`` cannot run the Gluon forward (None: it can): the interpreter,
    a device other than CUDA, a GPU other than sm_90, a Triton whose Gluon lacks what the kernels use."""
    if interpreting():
        return "TRITON_INTERPRET=1: the interpreter runs the Triton kernel only"
    if device.type != "cuda":
        return f"the inputs are on {device}, not a CUDA GPU"
    from kernel.gluon.api import gluon_support

    return gluon_support(capability_of(device))


def backward_route_reason(device: torch.device) -> str | None:
    """Why a default backward call on ``device`` cannot run the Gluon backward (None: it can): the
    forward's reasons (:func:`route_reason`), or a Gluon without what the backward adds (TMA reduce)."""
    reason = route_reason(device)
    if reason is None:
        from kernel.gluon.api import gluon_bwd_support

        reason = gluon_bwd_support(capability_of(device))
    return reason


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
    (:func:`kernel.gluon.fwd.launch.checked_plan`: the Gluon launcher's checks, once) and every
    call runs it, with no second key: from the second call on it launches the compiled kernel.
    """

    def __init__(self, variant: str, causal: bool, knobs: dict | None = None):
        self.variant, self.causal, self.knobs = variant, causal, dict(knobs or {})
        self.launch = None                 # the kernel.gluon.fwd.plan.GluonLaunchPlan, from the first call

    def __call__(self, q, k, v, out=None, lse=None):
        launch = self.launch
        if launch is None:
            from kernel.gluon.fwd.launch import checked_plan

            launch = self.launch = checked_plan(q, k, v, self.causal, self.variant, self.knobs or None, out, lse)
        return launch(q, k, v, out, lse)

    def __repr__(self) -> str:
        knobs = "".join(f", {name}={value!r}" for name, value in self.knobs.items())
        return f"GluonPlan(variant={self.variant!r}, causal={self.causal}{knobs})"


def default_variant(head_dim: int, causal: bool = False, device=None) -> str | None:
    """The Gluon variant a default call of this head dim and mask runs on ``device`` (default the
    current CUDA device), for inputs the Gluon launcher takes; None: the Triton kernel at
    :func:`kernel.triton.defaults.default_config`."""
    variant = GLUON_ROUTES.get((head_dim, bool(causal)))
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return None if variant is None or route_reason(torch.device(device)) is not None else variant


def gluon_plan(q, k, v, causal, out=None, lse=None) -> GluonPlan | dict | None:
    """What a default forward call runs where :data:`GLUON_ROUTES` and this machine let it route: the
    measured table's candidate of its bucket (:mod:`kernel.candidates`; where the table has no entry
    of its head dim and mask, the typed table's variant). A Gluon candidate is a :class:`GluonPlan`;
    a Triton one the tiles it sets (a dict, empty: None), which the Triton launcher takes over its
    defaults; None everywhere else (the Triton kernel at its defaults). Called after the Triton
    launcher's own input checks."""
    if attention_work(q, k, causal) < ROUTE_MIN_FLOPS:
        return None
    variant = default_variant(q.shape[-1], causal, q.device)
    if variant is None:
        return None
    candidate = FORWARD.get(measured_kernel("fwd", q, k, causal), Candidate(variant))
    if not candidate.gluon:
        return candidate.settings or None
    if refusal(q, k, v, causal, out, lse) is not None:
        return None
    return GluonPlan(candidate.kernel, bool(causal), candidate.settings)


# A route table of the user's own (``python -m benchmarks.route --table FILE`` on their GPU), read by the
# default call instead of the committed kernel/route_table.py: an installed package need not be edited.
ROUTE_TABLE_ENV = "FA2_TUNER_ROUTE_TABLE"
_KERNELS = {"FORWARD": tuple(FORWARD), "BACKWARD": tuple(BACKWARD)}


def measured_table_file() -> str:
    """The file of the measured route a default call reads: the one :data:`ROUTE_TABLE_ENV` names (absolute), else
    the committed kernel/route_table.py. Not checked here: :func:`measured_tables` loads and checks it."""
    path = os.environ.get(ROUTE_TABLE_ENV, "")
    return os.path.abspath(path) if path else os.path.abspath(route_table.__file__)


def measured_tables() -> tuple[dict, dict]:
    """(FORWARD, BACKWARD) of the measured route: the file :data:`ROUTE_TABLE_ENV` names, where set, else
    :mod:`kernel.route_table`. A file that is not a route table is an error naming it and the variable."""
    path = os.environ.get(ROUTE_TABLE_ENV, "")
    if not path:
        return route_table.FORWARD, route_table.BACKWARD
    stat = os.stat(path) if os.path.isfile(path) else None
    return _load_tables(os.path.abspath(path), stat and (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4)
def _load_tables(path: str, version) -> tuple[dict, dict]:
    """The tables of the route-table file at ``path`` (read again when it changes: ``version``)."""
    where = f"{ROUTE_TABLE_ENV}={path}"
    if version is None:
        raise ValueError(f"{where}: no such file; write one with `python -m benchmarks.route --table {path}`, "
                         f"or unset {ROUTE_TABLE_ENV} for the committed table")
    spec = importlib.util.spec_from_file_location("_fa2_user_route_table", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ValueError(f"{where} is not a route table: it fails to load ({type(exc).__name__}: {exc})") from None
    return tuple(_checked_table(module, name, where) for name in ("FORWARD", "BACKWARD"))


def _checked_table(module, name: str, where: str) -> dict:
    table = getattr(module, name, None)
    if not isinstance(table, dict):
        raise ValueError(f"{where} is not a route table: it defines no {name} dict "
                         "(`python -m benchmarks.route --table FILE` writes one)")
    for key, kernel_name in table.items():
        shape_ok = (isinstance(key, tuple) and len(key) == 4 and isinstance(key[1], bool)
                    and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (key[0], *key[2:])))
        if not shape_ok or kernel_name not in _KERNELS[name]:
            raise ValueError(f"{where}: {name}[{key!r}] = {kernel_name!r}; keys are (head dim, causal, length, "
                             f"batch x heads), candidates one of {', '.join(_KERNELS[name])}")
        head_dims = (FORWARD if name == "FORWARD" else BACKWARD)[kernel_name].head_dims
        if key[0] not in head_dims:
            raise ValueError(f"{where}: {name}[{key!r}] = {kernel_name!r}, a candidate at head dim "
                             f"{' or '.join(map(str, head_dims))} only (kernel/candidates.py)")
    return table


def measured_kernel(pass_: str, q, k, causal: bool, table=None) -> str | None:
    """The candidate :mod:`kernel.route_table` measured fastest at the bucket nearest this call (a name
    of :mod:`kernel.candidates`), or None where it measured nothing of this head dim and mask (the
    tables above decide alone then). Nearest: in log2 of the length (N_k), then of batch x heads,
    ties to the smaller bucket."""
    table = table if table is not None else measured_tables()[0 if pass_ == "fwd" else 1]
    head_dim, n = q.shape[-1], max(k.shape[-2], 1)
    batch_heads = max(q.numel() // max(q.shape[-1] * q.shape[-2], 1), 1)
    buckets = [(length, bh) for (d, c, length, bh) in table if d == head_dim and c == bool(causal)]
    if not buckets:
        return None
    length, bh = min(buckets, key=lambda b: (abs(math.log2(b[0] / n)), abs(math.log2(b[1] / batch_heads)), b))
    return table[(head_dim, bool(causal), length, bh)]


def attention_work(q, k, causal: bool) -> float:
    """The forward's FLOPs, 4·B·H·N_q·N_k·D, halved when causal (what :data:`ROUTE_MIN_FLOPS` bounds)."""
    flops = 4.0 * q.numel() * k.shape[-2]
    return flops / 2 if causal else flops


# ------------------------------------------------------------------------------ backward


def _heads_axis(*tensors):
    """[B, N, D] inputs (and their [B, N] lse) as [B, 1, N, D] views; None stays None."""
    return tuple(None if t is None else t.unsqueeze(1) for t in tensors)


def bwd_refusal(dout, q, k, v, out, lse, causal, grads=(None, None, None)) -> str | None:
    """Why the Gluon launcher would refuse these tensors (its checks but the device's, which
    :func:`backward_route_reason` answers), as [B, H, N, D]; None: it takes them."""
    from kernel.gluon.bwd.launch import check_bwd_inputs

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
        self.launch = None              # the kernel.gluon.bwd.plan.GluonBwdPlan, from the first call

    def __call__(self, dout, q, k, v, out, lse, dq=None, dk=None, dv=None):
        if self.three_dims:
            q, k, v, out, lse, dout, dq, dk, dv = _heads_axis(q, k, v, out, lse, dout, dq, dk, dv)
        launch = self.launch
        if launch is None:
            from kernel.gluon.bwd.launch import checked_plan

            launch = self.launch = checked_plan(q, k, v, out, lse, dout, self.causal, asdict(self.config),
                                                (dq, dk, dv))
        grads = launch(q, k, v, out, lse, dout, dq, dk, dv)
        return tuple(g.squeeze(1) for g in grads) if self.three_dims else grads

    def __repr__(self) -> str:
        return f"GluonBwdRoute({self.config.key()}, causal={self.causal})"


def gluon_bwd_plan(dout, q, k, v, out, lse, causal, grads=(None, None, None)) -> GluonBwdRoute | None:
    """The Gluon route for a default call where :data:`GLUON_BWD_ROUTES` and this machine say so, at the
    measured table's candidate of its bucket (:mod:`kernel.candidates`: its knobs over the routed config),
    else None (the caller runs the Triton kernels). Called after the Triton launcher's input checks."""
    config = GLUON_BWD_ROUTES.get((q.shape[-1], bool(causal)))
    if config is None:
        return None
    candidate = BACKWARD.get(measured_kernel("bwd", q, k, causal), Candidate("gluon"))
    if not candidate.gluon:
        return None
    config = replace(config, **candidate.settings)
    if backward_route_reason(q.device) is not None:
        return None
    if bwd_refusal(dout, q, k, v, out, lse, causal, grads) is not None:
        return None
    return GluonBwdRoute(config, bool(causal), q.ndim == 3)
