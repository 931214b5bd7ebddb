"""What the GPU is and what it can do: the one place that answers, every other module asks.

A compute capability is an int (90 for sm_90). The questions the kernels and the tuner ask of it:

* :func:`is_hopper`: sm_90 (H100, H200), the one architecture the Gluon kernels are written for
  (wgmma, setmaxnreg and Hopper's TMA; sm_100 and sm_120 have other matrix instructions);
* :func:`has_tma`: the copy engine's tensor descriptors (sm_90 and later; below, Triton's device
  descriptors fall back to plain loads);
* :func:`has_warp_specialization`: Triton's own producer/consumer split of a loop (sm_90 and later);
* :func:`has_wgmma`: Triton's asynchronous MMA pipelines (sm_90 up to, not including, sm_120);
* :func:`smem_per_sm` and :func:`smem_optin`: shared memory per SM, and the most one block may opt
  in to (the per-SM figure less the 1 KB the hardware reserves per block; NVIDIA CCCL
  ``libcudacxx/include/cuda/__device/arch_traits.h`` and CUTLASS ``include/cutlass/arch/arch.h``).

And of the machine: :func:`interpreting` (Triton's numpy interpreter, no GPU at all),
:func:`device_capability` / :func:`capability_of` (the device a call runs on), :func:`sm_count`.
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["HOPPER", "RESERVED_SMEM_PER_BLOCK", "SMEM_PER_SM", "capability_of", "device_capability", "has_tma",
           "has_warp_specialization", "has_wgmma", "interpreting", "is_hopper", "sm_count", "smem_optin", "smem_per_sm"]

HOPPER = 90                     # sm_90: the Gluon kernels' architecture
RESERVED_SMEM_PER_BLOCK = 1024  # bytes of each SM's shared memory the hardware keeps per resident block
KB = 1024
# Shared memory per SM, bytes, by architecture [CCCL arch_traits.h; CUTLASS arch.h].
SMEM_PER_SM = {80: 164 * KB, 86: 100 * KB, 87: 164 * KB, 89: 100 * KB, 90: 228 * KB, 100: 228 * KB, 120: 100 * KB}


def is_hopper(capability: int | None) -> bool:
    """sm_90: wgmma, setmaxnreg and Hopper's TMA, what the Gluon kernels are written in."""
    return capability is not None and capability // 10 == HOPPER // 10


def has_tma(capability: int | None) -> bool:
    """The copy engine's tensor descriptors (TMA): sm_90 and every later architecture."""
    return capability is not None and capability >= HOPPER


def has_warp_specialization(capability: int | None) -> bool:
    """Triton's automatic warp specialization of a loop (``tl.range(warp_specialize=True)``): sm_90 and later."""
    return capability is not None and capability >= HOPPER


def has_wgmma(capability: int | None) -> bool:
    """Whether Triton lowers a dot of 4-warp multiples to Hopper-style asynchronous MMA with its
    operands in shared memory (wgmma on sm_90, its successor on sm_100), whose pipelines keep every
    stage's buffers: sm_90 up to, not including, sm_120 (consumer Blackwell, mma.sync as Ada)."""
    return capability is not None and HOPPER <= capability < 120


def smem_per_sm(capability: int) -> int:
    """Shared memory per SM, bytes (KeyError: an architecture the table lacks)."""
    return SMEM_PER_SM[capability]


def smem_optin(capability: int) -> int:
    """The most shared memory one block may opt in to, bytes: 232,448 on sm_90."""
    return smem_per_sm(capability) - RESERVED_SMEM_PER_BLOCK


def interpreting() -> bool:
    """True when Triton runs kernels in its numpy interpreter (``TRITON_INTERPRET=1``), as Triton itself
    reads the variable ("1", "true", "on", "yes", "y" in any case; anything else, "false" or "2" too, is off)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):      # a Triton before knobs (3.4): the same reading
        return os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes", "y")


def device_capability() -> int:
    """The current CUDA device's compute capability (90 for sm_90); 0 without one."""
    if not torch.cuda.is_available():
        return 0
    return _capability(torch.cuda.current_device())


def capability_of(where) -> int | None:
    """The compute capability of a CUDA device, or of the device a tensor lives on; None for
    anything else (a CPU tensor, a non-tensor)."""
    device = where.device if isinstance(where, torch.Tensor) else where
    if not isinstance(device, torch.device) or device.type != "cuda":
        return None
    return _capability(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _capability(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


def sm_count(device: torch.device) -> int:
    """The device's multiprocessors: what a persistent grid is sized by."""
    if device.type != "cuda":
        return 4          # the interpreter: a few programs, so the persistent loop runs several tiles each
    return torch.cuda.get_device_properties(device).multi_processor_count
