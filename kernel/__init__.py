"""FlashAttention-2 forward and backward in Triton, with their references and stopwatches.

Public API:
    flash_attn_fwd(q, k, v, causal=False, *, block_m, block_n, num_warps, num_stages) -> (out, lse)
    flash_attn_bwd(dout, q, k, v, out, lse, causal=False, *, block_m, block_n, ...) -> (dq, dk, dv)
    flash_attention(q, k, v, causal=False) -> out   (autograd op: both kernels)
"""

from kernel.bwd_launch import FlashAttention, default_bwd_config, flash_attention, flash_attn_bwd
from kernel.flash_bwd import BwdConfig
from kernel.flash_fwd import (
    AUTOTUNE_KEY,
    COMPILE_OPTIONS,
    DTYPES,
    HEAD_DIMS,
    LaunchPlan,
    LaunchShape,
    default_config,
    flash_attn_fwd,
    interpreting,
    kernel_arguments,
    plan_for,
)
from kernel.reference import attention_reference, flash_attn_tiled_reference

__all__ = [
    "AUTOTUNE_KEY", "COMPILE_OPTIONS", "DTYPES", "HEAD_DIMS", "BwdConfig", "FlashAttention", "LaunchPlan",
    "LaunchShape", "attention_reference", "default_bwd_config", "default_config", "flash_attention", "flash_attn_bwd",
    "flash_attn_fwd", "flash_attn_tiled_reference", "interpreting", "kernel_arguments", "plan_for",
]
