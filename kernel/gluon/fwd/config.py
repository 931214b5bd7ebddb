"""What a launch of the Gluon forward is made of: its knobs, defaults, space and shared memory.

Plain Python (no Triton needed): the launcher (``launch.py``), the cross-compiler
(``compile.py``) and the tuner read the same :class:`GluonConfig`. :func:`smem_bytes` is
the shared memory Triton 3.6 allocates for a config, checked against compiles by the tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernel.gluon.smem import SMEM_LIMIT, STATIC_SMEM, place

HEAD_DIMS = (64, 128)
VARIANTS = ("pipelined", "ws")


@dataclass(frozen=True)
class GluonConfig:
    """A launch of the Gluon forward; every advanced piece can be switched off for a fallback.

    Attributes:
        variant: "pipelined" (one partition) or "ws" (warp-specialized).
        block_m: query rows per tile, 64 or 128 (ws: also 192): warpgroups of 64 rows
            (pipelined: ``block_m // 16`` warps in one partition; ws: ``block_m // 64`` consumers).
        block_n: keys per tile, 64 or 128.
        num_stages: K/V ring buffers (each holds a key and a value tile).
        overlap: softmax of key tile j under the PV wgmma of tile j - 1 (else strictly in order).
        pingpong: ws with two consumers: their wgmma take turns (needs overlap); stored as
            False wherever there are not two consumer warpgroups.
        persistent: 0 for a program per query tile, else programs per SM.
        producer_regs, consumer_regs: ws register split (``setmaxnreg``) per thread of the
            producer warp's warpgroup and of a consumer warpgroup; multiples of 8 in [24, 256].
    """

    variant: str = "pipelined"
    block_m: int = 128
    block_n: int = 128
    num_stages: int = 2
    overlap: bool = True
    pingpong: bool = True
    persistent: int = 0
    producer_regs: int = 24
    consumer_regs: int = 240

    def __post_init__(self):
        # Turns need two consumer warpgroups; elsewhere the knob means nothing and is stored off,
        # so a config equals the one that is compiled.
        if self.pingpong and not (self.variant == "ws" and self.block_m == 128):
            object.__setattr__(self, "pingpong", False)

    @property
    def consumers(self) -> int:
        """Consumer warpgroups (ws) or warpgroups of the single partition (pipelined)."""
        return self.block_m // 64

    @property
    def num_warps(self) -> int:
        """The launch's num_warps: all warps (pipelined), the default partition's (ws: consumer 0)."""
        return self.block_m // 16 if self.variant == "pipelined" else 4

    @property
    def maxnreg(self) -> int | None:
        """ws: registers per thread at launch, so the consumers get ``consumer_regs`` after setmaxnreg.

        Registers are counted per warpgroup: the producer warp holds a whole one. The default
        partition (consumer 0) gets what the others leave of ``maxnreg`` times all threads.
        """
        if self.variant != "ws":
            return None
        total = 4 * self.producer_regs + 4 * self.consumer_regs * self.consumers
        return total // (4 * (1 + self.consumers)) // 8 * 8

    @property
    def may_split(self) -> bool:
        """Whether its non-causal launches may split the last wave over the keys (kernel.gluon.fwd.split):
        ws, in order, persistent. Such a config also has the larger splitting binary."""
        return self.variant == "ws" and not self.overlap and self.persistent > 0

    def problems(self, head_dim: int) -> list[str]:
        """Why this config cannot run at ``head_dim`` (empty: it can)."""
        found = []
        if self.variant not in VARIANTS:
            found.append(f"variant={self.variant!r} must be one of {VARIANTS}")
        if self.block_m not in ((64, 128, 192) if self.variant == "ws" else (64, 128)):
            found.append(f"block_m={self.block_m!r} must be 64 or 128 (ws: also 192, three consumers)")
        if self.block_n not in (64, 128):
            found.append(f"block_n={self.block_n!r} must be 64 or 128")
        if not (isinstance(self.num_stages, int) and 1 <= self.num_stages <= 4):
            found.append(f"num_stages={self.num_stages!r} must be 1 to 4")
        for name in ("overlap", "pingpong"):
            if getattr(self, name) not in (True, False):
                found.append(f"{name}={getattr(self, name)!r} must be True or False")
        if self.pingpong and self.variant == "ws" and self.consumers == 2 and not self.overlap:
            found.append("pingpong=True needs overlap=True (the turns interleave the overlapped schedule)")
        if not (isinstance(self.persistent, int) and 0 <= self.persistent <= 8):
            found.append(f"persistent={self.persistent!r} must be 0 (a program per tile) or 1 to 8 programs per SM")
        for name in ("producer_regs", "consumer_regs"):
            regs = getattr(self, name)
            if not (isinstance(regs, int) and 24 <= regs <= 256 and regs % 8 == 0):
                found.append(f"{name}={regs!r} must be a multiple of 8 from 24 to 256")
        if self.variant == "ws" and not found and self.maxnreg * 32 * 4 * (1 + self.consumers) > 65536:
            found.append(f"registers: {self.maxnreg} per thread over {4 * (1 + self.consumers)} warps exceed 65,536")
        if head_dim not in HEAD_DIMS:
            found.append(f"head dim {head_dim} is not supported; use one of {HEAD_DIMS}")
        # the larger binary where a launch may split its last wave (kernel.gluon.fwd.split)
        smem = smem_bytes(self, head_dim, split=self.may_split)
        if not found and smem + STATIC_SMEM > SMEM_LIMIT:
            found.append(f"shared memory: {smem} B + {STATIC_SMEM} B static > {SMEM_LIMIT} B on sm_90")
        return found


# Three consumers over a 192-row tile (FA3's D=64 tile): in order, at the 152 registers each that fit
# the register file (with two live score tiles, the overlapped schedule, they spill).
_THREE_CONSUMERS = dict(pingpong=False, overlap=False, consumer_regs=152)
# Defaults per (head_dim, causal): the pipelined ones chosen by shared memory and register budget;
# the ws ones timed on the H200 (bf16, B4 H8 N4096, docs/results/2026-12-01-h200-gluon.md): at D=64
# three consumers over a 192-row tile, persistent non-causal (0.97x cuDNN against the 128-row
# kernel's 0.93x) and a program per tile causal (heaviest first: 1.00x against 0.95x); at D=128
# two consumers in ping-pong, persistent. Non-causal D=64 rings 3 stages: once the last wave is
# split (kernel.gluon.fwd.split) the hopper_gluon_d64 grid put 3 stages 2.8% ahead of 2 (noise 0.2%).
GLUON_DEFAULTS = {
    "pipelined": {
        (64, False): GluonConfig("pipelined", 128, 128, num_stages=3),
        (64, True): GluonConfig("pipelined", 128, 128, num_stages=3),
        (128, False): GluonConfig("pipelined", 128, 128, num_stages=2),
        (128, True): GluonConfig("pipelined", 128, 128, num_stages=2),
    },
    "ws": {
        (64, False): GluonConfig("ws", 192, 128, num_stages=3, persistent=1, **_THREE_CONSUMERS),
        (64, True): GluonConfig("ws", 192, 128, num_stages=2, persistent=0, **_THREE_CONSUMERS),
        (128, False): GluonConfig("ws", 128, 128, num_stages=2, persistent=1),
        (128, True): GluonConfig("ws", 128, 128, num_stages=2, persistent=1),
    },
}


def tile_defaults(block_m: int) -> dict:
    """The knobs a ws tile of ``block_m`` rows takes unless a call sets them: three consumers (192)
    in order at 152 registers each (what fits the register file; two live score tiles spill), else
    the overlapped schedule, two consumers' turns and 240 registers each."""
    if block_m == 192:
        return dict(_THREE_CONSUMERS)
    return dict(overlap=GluonConfig.overlap, pingpong=GluonConfig.pingpong, consumer_regs=GluonConfig.consumer_regs)


def default_gluon_config(head_dim: int, causal: bool = False, variant: str = "pipelined") -> GluonConfig:
    """The default config of ``variant`` for this head dim and mask."""
    try:
        return GLUON_DEFAULTS[variant][(head_dim, bool(causal))]
    except KeyError:
        raise ValueError(f"no Gluon default for variant={variant!r}, head dim {head_dim}; variants {VARIANTS}, "
                         f"head dims {HEAD_DIMS}") from None


def gluon_configs(head_dim: int) -> list[GluonConfig]:
    """Every config the Gluon forward supports at ``head_dim``, at the defaults' registers (three ws
    consumers at the 152 each that fit the register file)."""
    configs = []
    for variant, block_m in [(v, m) for v in VARIANTS for m in (64, 128)] + [("ws", 192)]:
        regs = dict(consumer_regs=tile_defaults(block_m)["consumer_regs"])
        for block_n in (64, 128):
            for stages in (1, 2, 3, 4):
                for overlap in (False, True):
                    for persistent in (0, 1, 2):
                        config = GluonConfig(variant, block_m, block_n, stages, overlap, overlap, persistent, **regs)
                        if not config.problems(head_dim):
                            configs.append(config)
    return sorted(set(configs), key=lambda c: tuple(asdict(c).values()))


# ------------------------------------------------------------------ shared-memory model

# The warp-specialized kernel hands its worker partitions' arguments through shared memory
# (Triton 3.6 lays them end to end and rounds the block to 16 bytes): a tensor descriptor or
# a global pointer is 8 bytes, an int or float 4, a shared buffer 8 + 4 per dimension. The
# producer takes q, k, v, Q buffers, the ring and its barriers, H, BH, N_q, N_k (and, in a binary
# that splits its last wave, TAIL and SPLITS); a second consumer adds the output descriptor and
# buffers, lse, the scale, when it takes turns the turnstile (and, splitting, the two
# workspaces). (A length the JIT made a constant 1 is not passed: 4 bytes the rounding absorbs.)
WS_WORD_BYTES = 4          # and a word per worker partition, placed last


def _ws_capture_bytes(consumers: int, pingpong: bool, split: bool = False) -> int:
    rank5, rank2 = 8 + 4 * 5, 8 + 4 * 2
    size = 3 * 8 + 3 * rank5 + 6 * rank2 + 4 * 4 + (2 * 4 if split else 0)        # producer
    if consumers >= 2:
        size += 8 + rank5 + 8 + 4 + (rank2 if pingpong else 0) + (2 * 8 if split else 0)
    return -(-size // 16) * 16


def smem_bytes(config: GluonConfig, head_dim: int, element_bytes: int = 2, split: bool = False) -> int:
    """Shared memory of a config, as Triton 3.6 allocates it (bytes, = ``metadata.shared``).

    Tiles first (multiples of 1 KB): the K and V ring, then Q (pipelined: Q's buffer also
    stages the output; ws: a Q and an output buffer per consumer). Then the small buffers,
    largest first, each 16-byte aligned: mbarrier arrays of 8 bytes a barrier (ready per
    stage for K and V; ws also empty per stage, Q ready and empty per consumer, and the two
    turnstile barriers when two consumers take turns), and for ws the captured arguments and
    a word per worker partition last. Without turns (one consumer, or ``pingpong`` off) the
    turnstile is never used, and its barriers share the capture block's place (they are dead
    after their initialisation).
    """
    stages = config.num_stages
    kv_tile = config.block_n * head_dim * element_bytes
    ring = 2 * stages * kv_tile
    if config.variant == "pipelined":
        tiles = ring + config.block_m * head_dim * element_bytes
        small = [8 * stages, 8 * stages, 8]
        return tiles + place(sorted(((size, 16) for size in small), reverse=True))
    consumers = config.consumers
    tiles = ring + 2 * consumers * 64 * head_dim * element_bytes
    small = ([_ws_capture_bytes(consumers, config.pingpong, split)] + [8 * stages] * 4 + [8 * consumers] * 2
             + ([16] if config.pingpong else []))
    placed = sorted(((size, 16) for size in small), reverse=True) + [(WS_WORD_BYTES * consumers, 4)]
    return tiles + place(placed)
