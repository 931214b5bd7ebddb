"""Budget rules for the kernel's knobs: can this target and this Triton run them at all?

Pure functions of (config, target, what the installed Triton offers). A knob the target
lacks (TMA and warp specialization below sm_90) or the Triton version lacks gets an
``unsupported`` verdict with its reason, before anything is compiled; so Ada's sweep
never compiles a TMA config.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache

from tuner.gpus import GpuSpec
from tuner.space import Config

HOPPER = 90
# Below this many warps Triton's warp-specialization pass fails on this kernel whenever the
# loop is pipelined: 39 of 39 such configs on the H200 (Triton 3.6), 36 of 36 cross-compiled
# under 3.9 ("PassManager::run failed" in NVGPUWarpSpecialization).
WS_MIN_WARPS = 8


@dataclass(frozen=True)
class TritonFeatures:
    """What the installed Triton offers the knobs."""

    version: str
    tensor_descriptors: bool        # tl.make_tensor_descriptor (device-side TMA descriptors)
    warp_specialize: bool           # tl.range(..., warp_specialize=True)
    maxnreg: bool                   # the maxnreg compile option


@lru_cache(maxsize=1)
def triton_features() -> TritonFeatures:
    """Read off the installed Triton (cached: it does not change within a process)."""
    import triton
    import triton.language as tl

    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        options = set(CUDAOptions.__dataclass_fields__)
    except ImportError:                                   # pragma: no cover (a Triton without NVIDIA)
        options = set()
    return TritonFeatures(version=triton.__version__,
                          tensor_descriptors=hasattr(tl, "make_tensor_descriptor"),
                          warp_specialize="warp_specialize" in inspect.signature(tl.range.__init__).parameters,
                          maxnreg="maxnreg" in options)


def knob_restriction(config: Config, gpu: GpuSpec, features: TritonFeatures | None = None) -> str | None:
    """Why ``gpu`` (or the installed Triton) cannot run this config's knobs, or None."""
    features = features or triton_features()
    arch = f"sm_{gpu.capability}"
    if config.tma:
        if gpu.capability < HOPPER:
            return f"unsupported: TMA needs sm_90 or later; {arch} has none"
        if not features.tensor_descriptors:
            return (f"unsupported: TMA needs tl.make_tensor_descriptor, which Triton {features.version} lacks; "
                    f"drop tma from the space or upgrade Triton")
    if config.warp_specialize:
        if gpu.capability < HOPPER:
            return f"unsupported: warp specialization needs sm_90 or later; {arch} has none"
        if not features.warp_specialize:
            return (f"unsupported: warp specialization needs tl.range(warp_specialize=...), which Triton "
                    f"{features.version} lacks")
        if config.num_warps < WS_MIN_WARPS and config.num_stages > 1:
            return (f"unsupported: warp specialization of a pipelined loop needs {WS_MIN_WARPS} or more warps; "
                    f"with {config.num_warps}, Triton's warp-specialization pass fails (3.6 and 3.9)")
    if config.maxnreg and not features.maxnreg:
        return f"unsupported: Triton {features.version} has no maxnreg option"
    return None
