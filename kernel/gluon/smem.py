"""Shared memory on sm_90 as the Gluon kernels' models count it: the limit, and how buffers are placed.

Plain Python, read by both passes' configs (:mod:`kernel.gluon.fwd.config`,
:mod:`kernel.gluon.bwd.config`) and, through them, the tuner's budget.
"""

from __future__ import annotations

from kernel.arch import HOPPER, smem_optin

__all__ = ["SMEM_LIMIT", "STATIC_SMEM", "place"]

SMEM_LIMIT = smem_optin(HOPPER)   # bytes a block may opt in to on sm_90 (H100, H200): 232,448
STATIC_SMEM = 1_024               # static shared memory of every sm_90 cubin here (cuobjdump), beside metadata.shared


def place(sizes_and_alignments) -> int:
    """The end of buffers placed one after another, each at the next multiple of its alignment."""
    end = 0
    for size, alignment in sizes_and_alignments:
        end = -(-end // alignment) * alignment + size
    return end
