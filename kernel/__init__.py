"""FlashAttention-2 forward in Triton, with its references.

Public API:
    flash_attn_fwd(q, k, v, causal=False, *, block_m, block_n, num_warps, num_stages) -> (out, lse)
    flash_attention(q, k, v, causal=False) -> out   (autograd op; backward not implemented)
"""

from kernel.flash_fwd import (
    COMPILE_OPTIONS,
    DTYPES,
    HEAD_DIMS,
    FlashAttention,
    LaunchShape,
    compile_source,
    default_config,
    flash_attention,
    flash_attn_fwd,
    interpreting,
    kernel_arguments,
)
from kernel.reference import attention_reference, flash_attn_tiled_reference

__all__ = [
    "COMPILE_OPTIONS", "DTYPES", "HEAD_DIMS", "FlashAttention", "LaunchShape", "attention_reference", "compile_source",
    "default_config", "flash_attention", "flash_attn_fwd", "flash_attn_tiled_reference", "interpreting",
    "kernel_arguments",
]
