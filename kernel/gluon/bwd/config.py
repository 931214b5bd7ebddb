"""What a launch of the Gluon backward is made of: its knobs, defaults and shared memory.

Plain Python (no Triton needed), read by the launcher (``launch.py``), the
cross-compiler (``compile.py``) and the benchmark (``benchmarks.bwd_gluon``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.gluon.smem import SMEM_LIMIT, STATIC_SMEM, place

HEAD_DIMS = (64, 128)
KEYS_PER_CONSUMER = 64        # the rows of a consumer warpgroup's dK and dV
DQ_CHUNK = 64                 # dQ columns per wgmma and per reduce at most (a [block_m, 64] fp32 accumulator)


@dataclass(frozen=True)
class GluonBwdConfig:
    """A launch of the Gluon backward (``kernel.gluon.bwd.kernel``).

    Attributes:
        block_m: query rows per tile, 64 or 128 (the N of S^T = K Q^T, the K of dV and dK).
        num_stages: ring stages of Q and dO tiles, 1 to 4.
        dq_bufs: fp32 dQ staging buffers, 1 or 2 (2: a tile's reduce runs under the next tile).
        consumers: consumer warpgroups, 1 or 2 (2: a key tile of 128, half each, dS shared so
            that dQ's reduce traffic halves; each consumer takes half of dQ's columns, :meth:`dq_chunk`:
            at D=64 a 32-column slice of K inside its 128-byte swizzle).
        persistent: 0 for a program per key tile, else programs per SM.
        producer_regs, consumer_regs: the register split (``setmaxnreg``) per thread of the
            producer warp's warpgroup and of the consumer warpgroup; multiples of 8 in [24, 256].
    """

    block_m: int = 64
    num_stages: int = 2
    dq_bufs: int = 2
    consumers: int = 1
    persistent: int = 0
    producer_regs: int = 24
    consumer_regs: int = 240

    @property
    def block_n(self) -> int:
        """Keys per program."""
        return KEYS_PER_CONSUMER * self.consumers

    @property
    def maxnreg(self) -> int:
        """Registers per thread at launch, so that consumer 0 (the default partition) gets
        ``consumer_regs`` of what the others leave: registers are counted per warpgroup, the
        producer warp holding a whole one."""
        return (self.producer_regs + self.consumer_regs * self.consumers) // (1 + self.consumers)

    def dq_chunk(self, head_dim: int) -> int:
        """dQ columns per wgmma and per TMA reduce: a consumer's share of them (``head_dim / consumers``),
        in chunks of at most :data:`DQ_CHUNK`."""
        return min(DQ_CHUNK, head_dim // self.consumers)

    def key(self) -> str:
        return (f"m{self.block_m}-c{self.consumers}-s{self.num_stages}-dq{self.dq_bufs}-p{self.persistent}"
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
        if self.consumers not in (1, 2):
            found.append(f"consumers={self.consumers!r} must be 1 or 2")
        if not found and (self.producer_regs + self.consumer_regs * self.consumers) % (1 + self.consumers):
            found.append(f"producer_regs + {self.consumers} x consumer_regs must divide by {1 + self.consumers} "
                         "(the launch's registers per thread)")
        if not found and self.maxnreg * 128 * (1 + self.consumers) > 65536:
            found.append(f"registers: {self.maxnreg} per thread over {1 + self.consumers} warpgroups exceed 65,536")
        if head_dim not in HEAD_DIMS:
            found.append(f"head dim {head_dim} is not supported by the Gluon backward; use one of {HEAD_DIMS}")
        if not found and smem_bytes(self, head_dim) + STATIC_SMEM > SMEM_LIMIT:
            found.append(f"shared memory: {smem_bytes(self, head_dim)} B + {STATIC_SMEM} B static > {SMEM_LIMIT} B "
                         "on sm_90")
        return found


# Defaults per (head_dim, causal), the H200's winners (bf16, B4 H8 N4096; `python -m benchmarks.bwd_gluon`
# and the grid of studies/hopper_gluon_bwd.toml agree, docs/results/2026-12-01-h200-backward-default.md):
# D=64 three Q/dO stages (232 consumer registers keep the launch at 128 per thread); D=128 two consumer
# warpgroups over a 128-key tile, which halves dQ's reduce traffic (1.45x one consumer). Each
# cross-compiles for sm_90 without spills; the default backward call runs these (kernel.triton.defaults).
GLUON_BWD_DEFAULTS = {
    (64, False): GluonBwdConfig(64, num_stages=3, dq_bufs=2, consumer_regs=232),
    (64, True): GluonBwdConfig(64, num_stages=3, dq_bufs=2, consumer_regs=232),
    (128, False): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumers=2, consumer_regs=240),
    (128, True): GluonBwdConfig(64, num_stages=2, dq_bufs=2, consumers=2, consumer_regs=240),
}


def default_gluon_bwd_config(head_dim: int, causal: bool = False) -> GluonBwdConfig:
    try:
        return GLUON_BWD_DEFAULTS[(head_dim, bool(causal))]
    except KeyError:
        raise ValueError(f"head dim {head_dim} is not supported by the Gluon backward; use one of "
                         f"{HEAD_DIMS}") from None


def smem_bytes(config: GluonBwdConfig, head_dim: int, element_bytes: int = 2, constant_lengths: int = 0) -> int:
    """Shared memory of a config, as Triton 3.6 allocates it (bytes, = ``metadata.shared``).

    The tiles first: K and V, the Q/dO ring, P and dS, the fp32 dQ buffers (``head_dim / 64``
    chunks of 64 columns per buffer). Then the small buffers, largest first, each 16-byte
    aligned: the worker partitions' captured arguments (:func:`_capture_bytes`), the four K/V
    and dS barriers (32 bytes), the ring's two barrier arrays (8 bytes a stage); and a word per
    worker partition last. The compile tests check the figure against compiles.
    """
    kv = 2 * config.block_n * head_dim * element_bytes
    ring = 2 * config.num_stages * config.block_m * head_dim * element_bytes
    ps = 2 * config.block_m * config.block_n * element_bytes
    dq = config.dq_bufs * config.block_m * head_dim * 4
    small = [_capture_bytes(config.consumers, constant_lengths), 32, 8 * config.num_stages, 8 * config.num_stages]
    placed = sorted(((size, 16) for size in small), reverse=True) + [(4 * config.consumers, 4)]
    return kv + ring + ps + dq + place(placed)


def _capture_bytes(consumers: int, constant_lengths: int) -> int:
    """The arguments Triton 3.6 hands the worker partitions through shared memory (each value
    once, end to end, rounded to 16): a tensor descriptor or global pointer is 8 bytes, a
    shared buffer 8 + 4 per dimension, an int or float 4. The producer takes 4 descriptors, the
    K and V buffers (rank 5), their barriers (rank 1), the ring (2 rank-5 buffers, 2 rank-2
    barrier arrays) and H, BH, N_q, N_k; a second consumer adds the dQ, dK and dV descriptors,
    P and dS (rank 3), the dS barriers, the dQ buffers (rank 5), lse, delta and the two scales.
    A length the JIT made a constant (N = 1: ``constant_lengths``) is not passed."""
    rank = lambda dims: 8 + 4 * dims  # noqa: E731
    size = 4 * 8 + 2 * rank(5) + 2 * rank(1) + 2 * rank(5) + 2 * rank(2) + 4 * (4 - constant_lengths)
    if consumers == 2:
        size += 3 * 8 + 2 * rank(3) + 2 * rank(1) + rank(5) + 2 * 8 + 2 * 4
    return -(-size // 16) * 16
