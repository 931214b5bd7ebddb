"""The inputs the Gluon forward takes: what its launcher checks, and the default call's router asks.

:func:`check_shapes` (types, ranks and dtypes here; the agreement of q, k and v as every
launcher checks it, :mod:`kernel.checks`, with the Gluon forward's head dims),
:func:`check_outputs` and :func:`tma_strides` (the copy engine's rules for a tensor read or
written in place). :func:`check_inputs` adds the device.
"""

from __future__ import annotations

import torch

from kernel.checks import check_agreement, check_kinds
from kernel.gluon.fwd.config import HEAD_DIMS

DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def check_inputs(q, k, v, causal) -> None:
    check_shapes(q, k, v, causal)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; the Gluon forward needs CUDA tensors on an sm_90 GPU")


def check_shapes(q, k, v, causal) -> None:
    """Every input check but the device's: types, ranks, dtypes, shapes, head dims (the default
    call's router asks these before it routes a call here)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name} must be [B, H, N, D] or [B, N, D]; got {t.ndim} dims, shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}.dtype is {t.dtype}; the Gluon forward supports float16 and bfloat16 "
                            "(use kernel.triton.fwd.flash_attn_fwd for float32)")
    check_kinds(q, k, v, causal)
    check_agreement(q, k, v, HEAD_DIMS, " by the Gluon forward")


def tma_strides(name: str, t4: torch.Tensor) -> list[int]:
    """The strides a TMA descriptor of [B, H, N, D] view ``t4`` is given, after checking the
    copy engine's rules: a 16-byte aligned start and row, head and batch strides that are
    positive multiples of 16 bytes. A dimension of size 1 is never stepped over, so its stride
    is replaced by the one a contiguous tensor would have there."""
    element = t4.element_size()
    strides = [0, 0, 0, 1]
    for i in (2, 1, 0):
        strides[i] = t4.stride(i) if t4.shape[i] > 1 else strides[i + 1] * t4.shape[i + 1]
    if t4.data_ptr() % 16 or any(s <= 0 or s * element % 16 for s in strides[:3]):
        fix = "out=None or a fresh out" if name == "out" else f"{name}.contiguous()"
        raise ValueError(f"{name} does not suit the TMA copy engine: it needs a 16-byte aligned start and "
                         f"positive strides in multiples of 16 bytes; got strides {tuple(t4.stride())} of "
                         f"{element}-byte elements at address % 16 = {t4.data_ptr() % 16}; pass {fix} "
                         "(a fresh tensor is aligned)")
    return strides


def check_outputs(out, lse, q) -> None:
    for name, given, shape, dtype in (("out", out, q.shape, q.dtype), ("lse", lse, q.shape[:-1], torch.float32)):
        if given is None:
            continue
        if not isinstance(given, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(given).__name__}")
        if tuple(given.shape) != tuple(shape) or given.dtype != dtype or given.device != q.device:
            raise ValueError(f"{name} must be {tuple(shape)} {dtype} on {q.device}; "
                             f"got {tuple(given.shape)} {given.dtype} on {given.device}")
    if out is not None and out.stride(-1) != 1:
        raise ValueError(f"out needs a unit last stride; got strides {tuple(out.stride())}")
    if lse is not None and not lse.is_contiguous():
        raise ValueError(f"lse must be contiguous; got strides {tuple(lse.stride())}")
