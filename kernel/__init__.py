"""FlashAttention-2 forward in Triton, with its references and stopwatches.

Public API:
    flash_attn_fwd(q, k, v, causal=False, *, block_m, block_n, num_warps, num_stages) -> (out, lse)
    flash_attention(q, k, v, causal=False) -> out   (autograd op; backward not implemented)
"""

from kernel.flash_fwd import (
    AUTOTUNE_KEY,
    COMPILE_OPTIONS,
    DTYPES,
    HEAD_DIMS,
    FlashAttention,
    LaunchPlan,
    LaunchShape,
    default_config,
    flash_attention,
    flash_attn_fwd,
    interpreting,
    kernel_arguments,
    plan_for,
)
from kernel.reference import attention_reference, flash_attn_tiled_reference

__all__ = [
    "AUTOTUNE_KEY", "COMPILE_OPTIONS", "DTYPES", "HEAD_DIMS", "FlashAttention", "LaunchPlan", "LaunchShape",
    "attention_reference", "default_config", "flash_attention", "flash_attn_fwd", "flash_attn_tiled_reference",
    "interpreting", "kernel_arguments", "plan_for",
]
