"""What a launch of the Gluon backward is made of: its knobs, defaults and shared memory.

Plain Python (no Triton needed), read by the launcher (``flash_bwd_gluon``), the
cross-compiler (``gluon_bwd_compile``) and the benchmark (``benchmarks.bwd_gluon``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.gluon_config import SMEM_LIMIT, STATIC_SMEM

HEAD_DIMS = (64, 128)
BLOCK_N = 64                  # keys per program: one consumer warpgroup of 64 rows


@dataclass(frozen=True)
class GluonBwdConfig:
    """A launch of the Gluon backward (``kernel.flash_bwd_gluon_kernel``).

    Attributes:
        block_m: query rows per tile, 64 or 128 (the N of S^T = K Q^T, the K of dV and dK).
        num_stages: ring stages of Q and dO tiles, 1 to 4.
        dq_bufs: fp32 dQ staging buffers, 1 or 2 (2: a tile's reduce runs under the next tile).
        persistent: 0 for a program per key tile, else programs per SM.
        producer_regs, consumer_regs: the register split (``setmaxnreg``) per thread of the
            producer warp's warpgroup and of the consumer warpgroup; multiples of 8 in [24, 256].
    """

    block_m: int = 64
    num_stages: int = 2
    dq_bufs: int = 2
    persistent: int = 0
    producer_regs: int = 24
    consumer_regs: int = 240

    @property
    def block_n(self) -> int:
        return BLOCK_N

    @property
    def maxnreg(self) -> int:
        """Registers per thread at launch (the consumer gets what the producer gives back): two
        warpgroups, the producer warp holding a whole one."""
        return (self.producer_regs + self.consumer_regs) // 2

    def key(self) -> str:
        return (f"m{self.block_m}-s{self.num_stages}-dq{self.dq_bufs}-p{self.persistent}"
                f"-r{self.producer_regs}/{self.consumer_regs}")

    def problems(self, head_dim: int) -> list[str]:
        """Why this config cannot run at ``head_dim`` (empty: it can)."""
        found = []
        if self.block_m not in (64, 128):
            found.append(f"block_m={self.block_m!r} must be 64 or 128")
        if not (isinstance(self.num_stages, int) and 1 <= self.num_stages <= 4):
            found.append(f"num_stages={self.num_stages!r} must be 1 to 4")
        if self.dq_bufs not in (1, 2):
            found.append(f"dq_bufs={self.dq_bufs!r} must be 1 or 2")
        if not (isinstance(self.persistent, int) and 0 <= self.persistent <= 8):
            found.append(f"persistent={self.persistent!r} must be 0 (a program per key tile) or 1 to 8 per SM")
        for name in ("producer_regs", "consumer_regs"):
            regs = getattr(self, name)
            if not (isinstance(regs, int) and 24 <= regs <= 256 and regs % 8 == 0):
                found.append(f"{name}={regs!r} must be a multiple of 8 from 24 to 256")
        if head_dim not in HEAD_DIMS:
            found.append(f"head dim {head_dim} is not supported by the Gluon backward; use one of {HEAD_DIMS}")
        if not found and smem_bytes(self, head_dim) + STATIC_SMEM > SMEM_LIMIT:
            found.append(f"shared memory: {smem_bytes(self, head_dim)} B + {STATIC_SMEM} B static > {SMEM_LIMIT} B "
                         "on sm_90")
        return found


# Defaults per (head_dim, causal): by shared memory and registers (cross-compiled, no spills), not
# yet timed. D=64: 232 registers keep the launch at 128 per thread, so two programs fit an SM
# (2 x 256 threads x 128 registers; 2 x 97 KB of shared memory). D=128: one program per SM.
GLUON_BWD_DEFAULTS = {
    (64, False): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumer_regs=232),
    (64, True): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumer_regs=232),
    (128, False): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumer_regs=240),
    (128, True): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumer_regs=240),
}


def default_gluon_bwd_config(head_dim: int, causal: bool = False) -> GluonBwdConfig:
    try:
        return GLUON_BWD_DEFAULTS[(head_dim, bool(causal))]
    except KeyError:
        raise ValueError(f"head dim {head_dim} is not supported by the Gluon backward; use one of "
                         f"{HEAD_DIMS}") from None


def smem_bytes(config: GluonBwdConfig, head_dim: int, element_bytes: int = 2, constant_lengths: int = 0) -> int:
    """Shared memory of a config, as Triton 3.6 allocates it (bytes, = ``metadata.shared``).

    The tiles: K and V, the Q/dO ring, P and dS, the fp32 dQ buffers (``head_dim / 64`` chunks
    of 64 columns per buffer). Then the small buffers: the ring's two barrier arrays (8 bytes a
    stage, each rounded to 16); the producer's captured arguments, rounded to 16: 4 tensor
    descriptors of 8 bytes, 4 rank-5 shared buffers and 4 barrier arrays (2 of rank 1, 2 of
    rank 2) of 8 + 4 per dimension, and H, BH, N_q, N_k of 4 bytes, less the lengths the JIT
    made constants (``constant_lengths``: N = 1); and a fixed 28 (the K/V barriers and the
    partition word). Fitted to compiles; the compile tests check the figure.
    """
    kv = 2 * BLOCK_N * head_dim * element_bytes
    ring = 2 * config.num_stages * config.block_m * head_dim * element_bytes
    ps = 2 * config.block_m * BLOCK_N * element_bytes
    dq = config.dq_bufs * config.block_m * head_dim * 4
    ring_barriers = 2 * _round16(8 * config.num_stages)
    captures = _round16(4 * 8 + 4 * (8 + 4 * 5) + 2 * (8 + 4 * 1) + 2 * (8 + 4 * 2) + 4 * (4 - constant_lengths))
    return kv + ring + ps + dq + ring_barriers + captures + 28


def _round16(size: int) -> int:
    return -(-size // 16) * 16
