"""Gluon as the installed Triton has it: the one module that knows how Triton releases differ.

The Gluon kernels import Triton's Gluon names from here, and where releases differ they call the
name found here instead of spelling one release's (each found by what the modules hold, never by
the version string):

* :data:`tma_load` / :data:`tma_store`: ``tma.async_load`` / ``async_store`` (Triton 3.8 on), else
  3.6's ``async_copy_global_to_shared`` / ``async_copy_shared_to_global`` (3.8 keeps them as aliases,
  3.9 as stubs that raise, so the new names are asked first);
* :data:`cta_barrier`: ``gl.barrier`` (3.8 on), else 3.6's ``gl.thread_barrier``: the same barrier
  of the CTA's threads;
* :data:`tma_reduce_add`: the TMA reduce-add the backward's dQ uses, built on the IR builder's
  ``create_async_tma_reduce`` (3.6 to 3.9; ``hopper.tma`` has no reduce in 3.6).

Everything else the kernels use has the same name and meaning in 3.6, 3.8 and 3.9 for their calls
(``mbarrier.expect`` counts bytes per CTA from 3.8, which is the same at one CTA per cluster).
:func:`gluon_api_support` says what the installed Gluon lacks, if anything; :func:`gluon_support`
adds the device (:func:`kernel.arch.is_hopper`). The launchers, the route (:mod:`kernel.route`) and
the tuner's budget all ask here, so a Triton that lacks something is refused the same way everywhere.
This module imports on any Triton, with or without Gluon: :data:`GLUON_IMPORT_ERROR` says what is missing.
"""

from __future__ import annotations

import functools
import inspect

import triton

from kernel.arch import device_capability, is_hopper

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    GLUON_IMPORT_ERROR: str | None = None
    jit = gluon.jit
except ImportError as exc:  # a Triton without Gluon: the kernels are never compiled
    gluon = gl = fence_async_shared = mbarrier = tma = warpgroup_mma = warpgroup_mma_wait = None
    GLUON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

    def jit(fn=None, **_):
        return fn if fn is not None else (lambda f: f)

__all__ = ["CTA_BARRIER", "GLUON_IMPORT_ERROR", "TMA_LOAD", "TMA_STORE", "GluonUnavailable", "cta_barrier",
           "fence_async_shared", "gl", "gluon", "gluon_api_support", "gluon_bwd_support", "gluon_support", "jit",
           "mbarrier", "tma", "tma_load", "tma_reduce_add", "tma_store", "warpgroup_mma", "warpgroup_mma_wait"]


def _first(module, *names):
    """The first of ``names`` that ``module`` holds (the newest spelling first), else None."""
    return next((getattr(module, name) for name in names if module is not None and hasattr(module, name)), None)


# Each helper's spellings, the newest first: where a Triton keeps the old name as an alias (3.8 kept 3.6's
# TMA copy names), the new one is taken; where it has only the old one (3.6's gl.thread_barrier), that one.
TMA_LOAD = ("async_load", "async_copy_global_to_shared")
TMA_STORE = ("async_store", "async_copy_shared_to_global")
CTA_BARRIER = ("barrier", "thread_barrier")
tma_load = _first(tma, *TMA_LOAD)
tma_store = _first(tma, *TMA_STORE)
cta_barrier = _first(gl, *CTA_BARRIER)


def _tma_reduce_add():
    """The TMA reduce-add as a Gluon builtin over the IR builder's op, or None where Triton lacks it."""
    try:
        from triton._C.libtriton import gluon_ir, ir
        from triton.experimental.gluon.language._core import builtin
    except ImportError:
        return None
    if not hasattr(ir, "DESCRIPTOR_REDUCE_KIND") or not hasattr(gluon_ir.GluonOpBuilder, "create_async_tma_reduce"):
        return None

    @builtin
    def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        """Add shared buffer ``src`` into the global tile at ``coord`` of ``tensor_desc`` (TMA reduce,
        ``cp.reduce.async.bulk.tensor``; rows out of bounds are clipped). It joins the bulk group
        that ``tma.store_wait`` waits on, as a TMA store does."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)

    return tma_reduce_add


tma_reduce_add = _tma_reduce_add() if GLUON_IMPORT_ERROR is None else None

WARP_SPECIALIZE = ["functions_and_args", "worker_num_warps", "worker_num_regs"]   # the call the kernels make


class GluonUnavailable(RuntimeError):
    """This Triton, or this device, cannot run the Gluon kernels; the message says what is missing."""


@functools.cache
def gluon_api_support() -> str | None:
    """None when this Triton's Gluon has everything the kernels use, else what it lacks."""
    version = f"Triton {triton.__version__}"
    if GLUON_IMPORT_ERROR is not None:
        return f"{version} has no Gluon for Hopper ({GLUON_IMPORT_ERROR}); the Gluon kernels need Triton 3.6 or later"
    missing = [what for what, found in (
        ("a TMA load (tma.async_load or tma.async_copy_global_to_shared)", tma_load),
        ("a TMA store (tma.async_store or tma.async_copy_shared_to_global)", tma_store),
        ("a CTA barrier (gl.barrier or gl.thread_barrier)", cta_barrier)) if found is None]
    warp_specialize = getattr(gl, "warp_specialize", None)
    params = list(inspect.signature(warp_specialize).parameters)[:3] if warp_specialize else []
    if params != WARP_SPECIALIZE:
        missing.append(f"gl.warp_specialize({', '.join(WARP_SPECIALIZE)}, ...) (it takes {params})")
    return f"{version}'s Gluon lacks {'; '.join(missing)}" if missing else None


def gluon_support(capability: int | None = None) -> str | None:
    """None when the Gluon forward can run, else the reason (for the tuner's ``unsupported`` verdicts).

    Args:
        capability: compute capability as an int (90 for sm_90); default the current CUDA device.
    """
    reason = gluon_api_support()
    if reason is not None:
        return reason
    if capability is None:
        capability = device_capability()
        if not capability:
            return "no CUDA device: the Gluon forward needs an sm_90 GPU (H100, H200)"
    if not is_hopper(capability):
        return f"sm_{capability} has no wgmma: the Gluon forward is for sm_90 (Hopper) only"
    return None


def gluon_bwd_support(capability: int | None = None) -> str | None:
    """None when the Gluon backward can run here (or on ``capability``), else why not."""
    reason = gluon_support(capability)
    if reason is None and tma_reduce_add is None:
        reason = (f"Triton {triton.__version__}'s Gluon has no TMA reduce (the IR builder's "
                  "create_async_tma_reduce), which the backward's dQ needs")
    return reason.replace("Gluon forward", "Gluon backward") if reason else None
