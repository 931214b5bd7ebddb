"""The analytic shared-memory model of the kernel, per target architecture.

e = element bytes, Q = BLOCK_M*D*e, K = V = BLOCK_N*D*e, s = num_stages; only the K and
V loads of the key loop are multi-buffered, Q is loaded once and kept in shared memory
as a dot operand:

================================  ==========================  ================
path                              s >= 2                      s = 1
================================  ==========================  ================
mma.sync + cp.async (sm_8x, 120)  (s-1)*(K+V) + Q + C         Q + K + C
wgmma (sm_90, sm_100)             s*(K+V) + Q                 Q + K + V
================================  ==========================  ================

C = BLOCK_M*BLOCK_N*e, the P tile passed through shared memory on its way to being a
dot operand, when num_warps >= 2 and BLOCK_M < D; else 0 (:func:`_conversion_scratch`).
Hopper takes the wgmma path only with num_warps a multiple of 4 and BLOCK_M >= 64;
otherwise it falls back to the mma.sync row. The sm_100 row is unchecked.

TMA loads (sm_90 and later) add one 8-byte mbarrier per stage; where the allocator puts
them depends on the 1024-byte alignment of the copy engine's swizzled buffers: in a gap
(+8 per stage) or in a new 1024-byte block. The model takes the block (:data:`TMA_BARRIERS`),
so for TMA it is an upper bound at most 1 KB over the compiler; everywhere else the
tests hold it to the compiler byte for byte.
"""

from __future__ import annotations

from tuner.gpus import GpuSpec
from tuner.problem import DTYPE_BYTES
from tuner.space import Config

TMA_BARRIERS = 1024


def uses_wgmma(config: Config, gpu: GpuSpec) -> bool:
    """Whether Triton lowers this config's dots to Hopper's wgmma."""
    return 90 <= gpu.capability < 120 and config.num_warps % 4 == 0 and config.block_m >= 64


def _conversion_scratch(config: Config, head_dim: int, elem: int) -> int:
    """Scratch for layout conversions that coexist with the pipeline buffers."""
    if config.num_warps == 1 or config.block_m >= head_dim:
        return 0
    return config.block_m * config.block_n * elem


def model_smem_bytes(config: Config, head_dim: int, dtype: str, gpu: GpuSpec) -> int:
    """Predicted dynamic shared memory of the kernel, in bytes (formula in the module doc)."""
    elem = DTYPE_BYTES[dtype]
    if config.tma and gpu.capability >= 90:
        return _plain_bytes(config, head_dim, elem, gpu) + TMA_BARRIERS
    return _plain_bytes(config, head_dim, elem, gpu)


def _plain_bytes(config: Config, head_dim: int, elem: int, gpu: GpuSpec) -> int:
    q_bytes = config.block_m * head_dim * elem
    kv_bytes = config.block_n * head_dim * elem
    if uses_wgmma(config, gpu):
        if config.num_stages == 1:
            return q_bytes + 2 * kv_bytes
        return config.num_stages * 2 * kv_bytes + q_bytes
    scratch = _conversion_scratch(config, head_dim, elem)
    if config.num_stages == 1:
        return q_bytes + kv_bytes + scratch
    return (config.num_stages - 1) * 2 * kv_bytes + q_bytes + scratch
