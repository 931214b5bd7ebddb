"""FlashAttention-2 forward and backward in Triton, with their references and stopwatches.

Public API:
    flash_attn_fwd(q, k, v, causal=False, *, block_m, block_n, num_warps, num_stages, ...) -> (out, lse)
    flash_attn_bwd(dout, q, k, v, out, lse, causal=False, *, block_m, block_n, ...) -> (dq, dk, dv)
    flash_attention(q, k, v, causal=False) -> out   (autograd op: both kernels)
    default_variant(head_dim, causal, device=None) -> "ws" or None   (the Gluon kernel a default call runs)

Modules: ``flash_fwd`` (the forward kernel, its arguments, knob table and entry point),
``flash_bwd`` (the backward's kernels and config), ``bwd_launch`` (its launcher and launch plans),
``bwd_defaults`` (what a default backward call runs: the Gluon backward on Hopper, else Triton's config),
``autograd`` (the autograd op), ``launch`` (the forward's launch plans), ``checks``
(the inputs the launchers accept), ``reference`` (references and the accuracy rule),
``timing`` (stopwatches and interleaved rounds), ``autotuned`` (under ``@triton.autotune``).
"""

from kernel.autograd import FlashAttention, flash_attention
from kernel.backward import flash_attn_bwd
from kernel.bwd_defaults import default_bwd_config
from kernel.checks import DTYPES, HEAD_DIMS, check_inputs
from kernel.flash_bwd import BwdConfig
from kernel.flash_fwd import (
    AUTOTUNE_KEY,
    COMPILE_OPTIONS,
    JIT_FUNCTIONS,
    JIT_KERNEL,
    KNOBS,
    default_config,
    flash_attn_fwd,
    kernel_arguments,
    plan_for,
)
from kernel.gluon_route import GLUON_ROUTES, default_variant
from kernel.launch import LaunchPlan, LaunchShape, interpreting
from kernel.reference import attention_reference, flash_attn_tiled_reference

__all__ = [
    "AUTOTUNE_KEY", "COMPILE_OPTIONS", "DTYPES", "GLUON_ROUTES", "HEAD_DIMS", "JIT_FUNCTIONS", "JIT_KERNEL", "KNOBS",
    "BwdConfig", "FlashAttention", "LaunchPlan", "LaunchShape", "attention_reference", "check_inputs",
    "default_bwd_config", "default_config", "default_variant", "flash_attention", "flash_attn_bwd", "flash_attn_fwd",
    "flash_attn_tiled_reference", "interpreting", "kernel_arguments", "plan_for",
]
