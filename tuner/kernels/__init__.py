"""Tunable kernels: one module per kernel, each saying once what the tuner needs to know of it.

A kernel is a :class:`TunableKernel` (``_base``): its name and pass, its config type and
space (:mod:`tuner.space`), its restrictions and budget rules, its compile units for a
target, its launch for the gate and the timing, its reference and the baseline it is
compared with, its FLOPs, its emitted ``triton.Config`` form and that form's inverse, and
its kernel names for Nsight Compute. The stages, the store, the outputs and the profile
work on any kernel through it.

Modules:
    ``triton_fwd``: the Triton forward, ``kernel.flash_attn_fwd`` (name "triton", pass "fwd").
    ``gluon_fwd``: the Gluon forward for Hopper, ``flash_attn_fwd_gluon(variant="ws")`` (name "gluon_fwd").
    ``gluon_bwd``: the Gluon backward for Hopper, ``flash_attn_bwd_gluon`` (name "gluon_bwd", pass "bwd").
    ``_attention``: what every attention forward shares (inputs, reference, SDPA, FLOPs).
    ``_gluon``: what every Gluon kernel shares (its compile unit, the JIT's specialisation of its launch).
    ``_triton``: what every Triton kernel shares (the JIT's specialisation, Triton's features).
    ``_registry``: :func:`get` by name and pass (or a user's module path), :func:`kernel_of` a config.

A user's kernel: a module exposing ``KERNEL`` (a :class:`TunableKernel`), named by a study as
``kernel = "mypkg.mykernel"``.
"""

from tuner.kernels._attention import AttentionForward
from tuner.kernels._base import Case, CompileUnit, GateResult, NamedError, Pinned, TunableKernel
from tuner.kernels._registry import DEFAULT_KERNEL, DEFAULT_PASS, KernelNotFound, get, kernel_of, known, registered
from tuner.kernels._triton import TritonFeatures, specialise, triton_features

__all__ = ["DEFAULT_KERNEL", "DEFAULT_PASS", "AttentionForward", "Case", "CompileUnit", "GateResult", "KernelNotFound",
           "NamedError", "Pinned", "TritonFeatures", "TunableKernel", "get", "kernel_of", "known", "registered",
           "specialise", "triton_features"]
