"""What Gluon on this Triton and this GPU can run: the one place the Gluon kernels' gate lives.

:func:`gluon_api_support` looks at the installed Triton's Gluon modules (what they hold, never the
version string alone) and :func:`gluon_support` adds the device (:func:`kernel.arch.is_hopper`).
The forward's and the backward's launchers, the route (:mod:`kernel.route`) and the tuner's
budget all ask here, so a Triton that lacks something is refused the same way everywhere.
"""

from __future__ import annotations

import functools
import inspect
import re

import triton

from kernel.arch import device_capability, is_hopper
from kernel.gluon.attention import GLUON_IMPORT_ERROR

__all__ = ["SUPPORTED_TRITON", "GluonUnavailable", "gluon_api_support", "gluon_bwd_support", "gluon_support",
           "triton_release"]


class GluonUnavailable(RuntimeError):
    """This Triton, or this device, cannot run the Gluon forward; the message says what is missing."""


SUPPORTED_TRITON = (3, 6)        # the one Triton release whose Gluon API the kernels are written in


def triton_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a Triton version string ("3.6.0" -> (3, 6)); default the installed Triton's."""
    found = re.match(r"(\d+)\.(\d+)", version or triton.__version__)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


@functools.cache
def gluon_api_support() -> str | None:
    """None when this Triton's Gluon has the API the kernels are written in (Triton 3.6's), else why not.

    Detected by what the modules hold, not by the version string: 3.6 names the TMA copies
    ``async_copy_global_to_shared`` / ``async_copy_shared_to_global``; later releases renamed them
    ``async_load`` / ``async_store`` (the old names raise), count ``mbarrier.expect`` per CTA and
    renamed ``thread_barrier``, which this code does not follow yet.
    """
    version = f"Triton {triton.__version__}"
    if GLUON_IMPORT_ERROR is not None:
        return f"{version} has no Gluon for Hopper ({GLUON_IMPORT_ERROR}); the kernel needs Triton 3.6"
    if triton_release() != SUPPORTED_TRITON:
        return (f"{version} is not Triton 3.6: the Gluon forward is written and checked for Triton 3.6's Gluon "
                "API only (3.9 renamed the TMA copies to tma.async_load / async_store and changed mbarrier.expect)")
    from kernel.gluon.attention import gl as language, tma as tma_module

    if hasattr(tma_module, "async_load") or not hasattr(tma_module, "async_copy_global_to_shared"):
        return (f"{version}'s Gluon API is newer than the kernel's (tma.async_load replaced "
                "tma.async_copy_global_to_shared); the kernel is written for Triton 3.6")
    warp_specialize = getattr(language, "warp_specialize", None)
    params = list(inspect.signature(warp_specialize).parameters) if warp_specialize else []
    if params[:3] != ["functions_and_args", "worker_num_warps", "worker_num_regs"]:
        return f"{version}'s gl.warp_specialize is not Triton 3.6's ({params}); the kernel is written for Triton 3.6"
    return None


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
    if reason is None:
        from kernel.gluon.bwd.producer import tma_reduce_add

        if tma_reduce_add is None:
            reason = "this Triton's Gluon has no TMA reduce (create_async_tma_reduce); the kernel needs Triton 3.6"
    return reason.replace("Gluon forward", "Gluon backward") if reason else None
