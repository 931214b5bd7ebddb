"""What the launchers accept: attention inputs, TMA-readable layouts, the outputs a caller gives.

Shared by the forward (:mod:`kernel.flash_fwd`) and the backward (:mod:`kernel.flash_bwd`),
which take the same q, k, v; each error names the input and what is allowed.
"""

from __future__ import annotations

import operator

import torch

from kernel.launch import interpreting

__all__ = ["DTYPES", "HEAD_DIMS", "as_int", "check_agreement", "check_inputs", "check_kinds", "check_output",
           "check_outputs", "check_tma_layout",
           "is_count", "is_pow2", "register_cap", "tma_misfit"]

HEAD_DIMS = (16, 32, 64, 128, 256)
DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def is_pow2(value: int) -> bool:
    """A positive integer power of two."""
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


def is_count(value, low: int) -> bool:
    """An integer (not a bool) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def as_int(name: str, value, allowed: str) -> int:
    """``value`` as a Python int when it is an integer of any kind (``np.int64(64)``, a 0-dim integer
    tensor), else ValueError naming ``name`` and ``allowed``. A bool is refused, never taken as 0 or 1."""
    if isinstance(value, bool) or "bool" in type(value).__name__ or getattr(value, "dtype", None) == torch.bool:
        raise ValueError(f"{name}={value!r} must be an int ({allowed}), not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name}={value!r} must be an int ({allowed}); got {type(value).__name__}") from None


def register_cap(value) -> int | None:
    """``maxnreg`` as the launchers take it: None or 0 is no cap (as in study files), else a multiple of
    8 from 24 to 255 registers per thread; ValueError otherwise."""
    allowed = "None or 0 for no cap, or a multiple of 8 from 24 to 255 registers per thread"
    if value is None:
        return None
    cap = as_int("maxnreg", value, allowed)
    if cap != 0 and not (24 <= cap <= 255 and cap % 8 == 0):
        raise ValueError(f"maxnreg={value!r} must be None or a multiple of 8 from 24 to 255 (registers per "
                         "thread), or 0 for no cap")
    return cap or None


def _check_device(name: str, t: torch.Tensor) -> None:
    """CUDA tensors, or CPU tensors under the interpreter; a meta tensor (no data) or another device never."""
    if t.device.type == "cuda" or (t.device.type == "cpu" and interpreting()):
        return
    if t.device.type == "cpu":
        raise ValueError(f"{name} is on {t.device}; the kernel needs CUDA tensors "
                         "(or TRITON_INTERPRET=1 set before importing kernel, to run on the CPU)")
    raise ValueError(f"{name} is on the {t.device.type!r} device; the kernel runs on CUDA tensors (or on CPU "
                     f"tensors under TRITON_INTERPRET=1){': meta tensors hold no data' if t.is_meta else ''}")


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    """Raise TypeError or ValueError, naming the input, unless q, k, v and causal can be launched."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name} must be [B, H, N, D] or [B, N, D]; got {t.ndim} dims, shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype is {t.dtype}; supported: float32, float16, bfloat16")
        _check_device(name, t)
    check_kinds(q, k, v, causal)
    if q.dtype == torch.bfloat16 and interpreting():
        raise TypeError("bfloat16 does not work under TRITON_INTERPRET=1: the interpreter's dot multiplies the raw "
                        "bits and returns garbage; use float32 or float16 there, bfloat16 on a GPU")
    check_agreement(q, k, v, HEAD_DIMS)


def check_kinds(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal) -> None:
    """causal a bool; q, k, v of one rank and one dtype (each tensor's own checks come first)."""
    if causal is not True and causal is not False:
        raise TypeError(f"causal must be True or False; got {causal!r} ({type(causal).__name__})")
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"q, k, v must have the same rank; got {q.ndim}, {k.ndim}, {v.ndim}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")


def check_agreement(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dims, by: str = "") -> None:
    """q, k, v on one device, k and v alike, q and k agreeing on batch, heads and a head dim in
    ``head_dims`` (``by``: who does not support another, for the message)."""
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q and k must agree on batch (and heads); got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim; got {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[-1] not in head_dims:
        raise ValueError(f"head dim {q.shape[-1]} is not supported{by}; use one of {head_dims}")


def check_output(given: torch.Tensor, name: str, shape, dtype, device) -> None:
    """Raise TypeError or ValueError unless a given output tensor is ``shape`` ``dtype`` on ``device``."""
    if not isinstance(given, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(given).__name__}")
    if tuple(given.shape) != tuple(shape) or given.dtype != dtype or given.device != device:
        raise ValueError(f"{name} must be {tuple(shape)} {dtype} on {device}; "
                         f"got {tuple(given.shape)} {given.dtype} on {given.device}")


def check_outputs(q: torch.Tensor, out: torch.Tensor | None, lse: torch.Tensor | None) -> None:
    """The forward's given outputs: ``out`` like ``q`` with a unit last stride, ``lse`` contiguous fp32."""
    if out is not None:
        check_output(out, "out", q.shape, q.dtype, q.device)
        if out.stride(-1) != 1:
            raise ValueError(f"out needs a unit last stride; got strides {tuple(out.stride())}")
    if lse is not None:
        check_output(lse, "lse", q.shape[:-1], torch.float32, q.device)
        if not lse.is_contiguous():
            raise ValueError(f"lse must be contiguous; got strides {tuple(lse.stride())}")


def tma_misfit(tensors, knob: str, fix: str) -> str | None:
    """Why TMA cannot read these (name, tensor) pairs through per-head descriptors, or None: a
    head's first byte and every batch, head and row stride must be multiples of 16 bytes. The
    message names ``knob`` ("tma=True") and ends with ``fix``."""
    for name, t in tensors:
        element = t.element_size()
        if t.data_ptr() % 16 or any(t.stride(i) * element % 16 for i in range(t.ndim - 1)):
            return (f"{knob} needs {name}'s start and its batch, head and row strides in multiples of 16 bytes; got "
                    f"strides {tuple(t.stride())} of {element}-byte elements at address % 16 = {t.data_ptr() % 16}; "
                    f"{fix}")
    return None


def check_tma_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """TMA reads each head's [N_k, D] keys through a descriptor (:func:`tma_misfit`'s rule)."""
    misfit = tma_misfit((("k", k), ("v", v)), "tma=True", "use tma=False or a contiguous copy")
    if misfit:
        raise ValueError(misfit)
