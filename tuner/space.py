"""What is searched: a kernel config, and the space of configs with its restrictions.

Restrictions are pure functions of (config, head dim): they throw out tiles the kernel
cannot use before anything is compiled, with a reason. Whether a config fits a GPU's
shared memory is a separate question, answered per target by :mod:`tuner.budget`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

REGISTER_LIMIT = 255      # per thread, on every target in tuner.gpus
THREADS_PER_BLOCK = 1024  # on every target in tuner.gpus
MMA_TILE = (16, 8)        # the smallest mma.sync tile one warp owns (M x N)

DEFAULT_SPACE = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (16, 32, 64, 128, 256),
    "num_warps": (1, 2, 4, 8, 16),
    "num_stages": (1, 2, 3, 4, 5, 6),
}


@dataclass(frozen=True, order=True)
class Config:
    """One point of the space: what the kernel takes as tiles and launch options."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    @property
    def key(self) -> str:
        """A short stable name, ``128x64_w8_s3``."""
        return f"{self.block_m}x{self.block_n}_w{self.num_warps}_s{self.num_stages}"

    @classmethod
    def parse(cls, text: str) -> Config:
        """Parse ``BM,BN,WARPS,STAGES`` (or the ``key`` form).

        Raises:
            ValueError: not four positive integers.
        """
        cleaned = text.replace("x", ",").replace("_w", ",").replace("_s", ",")
        parts = [p.strip() for p in cleaned.split(",") if p.strip()]
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 4 or min(values) < 1:
            raise ValueError(f"config {text!r} must be BM,BN,WARPS,STAGES, e.g. 128,64,8,3")
        return cls(*values)

    def as_kwargs(self) -> dict[str, int]:
        """Keyword arguments of ``kernel.flash_attn_fwd``."""
        return dict(block_m=self.block_m, block_n=self.block_n, num_warps=self.num_warps, num_stages=self.num_stages)


def restriction(config: Config, head_dim: int) -> str | None:
    """Why the kernel cannot use this config at this head dim, or None.

    Three rules, each a limit no compiler can beat:
      * threads: a block holds at most 1024 threads (32 warps);
      * registers: the fp32 score tile S [BLOCK_M, BLOCK_N] and output accumulator
        O [BLOCK_M, D] live in registers, spread over 32 * num_warps threads;
      * warps: each warp needs at least one 16x8 mma tile of S, or it idles.
    """
    threads = 32 * config.num_warps
    if threads > THREADS_PER_BLOCK:
        return (f"threads: {config.num_warps} warps are {threads} threads per block "
                f"> {THREADS_PER_BLOCK}; use at most {THREADS_PER_BLOCK // 32} warps")
    accumulator_regs = (config.block_m * config.block_n + config.block_m * head_dim) // threads
    if accumulator_regs > REGISTER_LIMIT:
        return (f"registers: S and O accumulators alone need {accumulator_regs} per thread "
                f"> {REGISTER_LIMIT}; use more warps or smaller tiles")
    mma_tiles = (config.block_m // MMA_TILE[0]) * (config.block_n // MMA_TILE[1])
    if config.num_warps > mma_tiles:
        return f"warps: {config.num_warps} warps for {mma_tiles} mma tiles of 16x8; use fewer warps"
    return None


@dataclass(frozen=True)
class SearchSpace:
    """The values searched per parameter; the space is their product less restrictions."""

    block_m: tuple[int, ...] = DEFAULT_SPACE["block_m"]
    block_n: tuple[int, ...] = DEFAULT_SPACE["block_n"]
    num_warps: tuple[int, ...] = DEFAULT_SPACE["num_warps"]
    num_stages: tuple[int, ...] = DEFAULT_SPACE["num_stages"]
    exclude: tuple[Config, ...] = field(default=())

    def all_configs(self) -> list[Config]:
        """Every combination, restricted or not, in a stable order."""
        return [Config(*values) for values in
                itertools.product(self.block_m, self.block_n, self.num_warps, self.num_stages)
                if Config(*values) not in self.exclude]

    def configs(self, head_dim: int) -> list[Config]:
        """The combinations that pass :func:`restriction` at this head dim."""
        return [c for c in self.all_configs() if restriction(c, head_dim) is None]
