"""FlashAttention-2 forward and backward in Triton, and in Gluon for Hopper, with references and stopwatches.

Public API:
    flash_attn_fwd(q, k, v, causal=False, *, block_m, block_n, num_warps, num_stages, ...) -> (out, lse)
    flash_attn_bwd(dout, q, k, v, out, lse, causal=False, *, config=None, ...) -> (dq, dk, dv)
    flash_attention(q, k, v, causal=False) -> out   (autograd op: both passes)
    default_variant(head_dim, causal, device=None) -> "ws" or None   (the Gluon kernel a default call runs)

The module map (the one place it is written; tests/test_imports.py checks the import direction):

``kernel/`` (the entry points and what every kernel shares)
    ``forward``, ``backward``, ``autograd``: the public entry points; ``route``: which kernel a
    call that names no config runs, both passes, by ``route_table`` (measured per bucket) of
    ``candidates`` (each of our kernels at a named config); ``arch``: what the GPU is and can do (Hopper,
    TMA, shared memory), asked by every other module; ``checks``: the inputs and outputs the
    launchers accept; ``reference``: float64 references and the accuracy rule.
``kernel/triton/`` (the portable path: every GPU, every Triton; never imports Gluon)
    ``fwd`` (the forward kernel, its arguments and knobs, its plan cache), ``bwd`` (the
    backward's kernels and config), ``launch`` (launch plans: direct launches after the first
    call), ``bwd_launch`` (the backward's plans), ``defaults`` (the configs of a call that names
    none), ``autotune`` (both passes under an autotuner), ``configs_h200*`` (emitted lists).
``kernel/gluon/`` (Hopper only; shared: ``api`` the gate on Triton's Gluon and the device,
``attention`` device code, ``schedule`` the order programs take tiles in (causal: groups of heads
that fit in the L2), ``checks``, ``direct`` direct launches, ``smem`` the budget's units)
    ``fwd/``: ``kernel`` (pipelined), ``kernel_ws`` (warp-specialized), ``split`` (the last
    wave's split), ``config``, ``launch``, ``plan``, ``compile`` (cross-compiler), ``autotune``;
    ``bwd/``: ``kernel``, ``producer``, ``config``, ``launch``, ``plan``, ``compile``, ``check``.
``kernel/measure/``
    ``timing`` (stopwatches, interleaved rounds beside SDPA), ``retime`` (finalists' rounds),
    ``clock`` (the SM clock beside a timing).
"""

from kernel.arch import interpreting
from kernel.autograd import FlashAttention, flash_attention
from kernel.backward import flash_attn_bwd
from kernel.checks import DTYPES, HEAD_DIMS, check_inputs
from kernel.forward import flash_attn_fwd
from kernel.reference import attention_reference, flash_attn_tiled_reference
from kernel.route import GLUON_ROUTES, default_variant
from kernel.triton.bwd import BwdConfig
from kernel.triton.defaults import default_bwd_config, default_config
from kernel.triton.fwd import (
    AUTOTUNE_KEY,
    COMPILE_OPTIONS,
    JIT_FUNCTIONS,
    JIT_KERNEL,
    KNOBS,
    kernel_arguments,
    plan_for,
)
from kernel.triton.launch import LaunchPlan, LaunchShape

__all__ = [
    "AUTOTUNE_KEY", "COMPILE_OPTIONS", "DTYPES", "GLUON_ROUTES", "HEAD_DIMS", "JIT_FUNCTIONS", "JIT_KERNEL", "KNOBS",
    "BwdConfig", "FlashAttention", "LaunchPlan", "LaunchShape", "attention_reference", "check_inputs",
    "default_bwd_config", "default_config", "default_variant", "flash_attention", "flash_attn_bwd", "flash_attn_fwd",
    "flash_attn_tiled_reference", "interpreting", "kernel_arguments", "plan_for",
]
