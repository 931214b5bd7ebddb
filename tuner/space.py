"""What is searched: a kernel config, and the space of configs with its restrictions.

Restrictions are pure functions of (config, head dim): they throw out tiles the kernel
cannot use before anything is compiled, with a reason. Whether a config fits a GPU's
shared memory is a separate question, answered per target by :mod:`tuner.budget`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

AXES = ("block_m", "block_n", "num_warps", "num_stages", "tma", "warp_specialize", "maxnreg", "persistent")
REGISTER_LIMIT = 255      # per thread, on every target in tuner.gpus
THREADS_PER_BLOCK = 1024  # on every target in tuner.gpus
MMA_TILE = (16, 8)        # the smallest mma.sync tile one warp owns (M x N)

# The knob searched by default is TMA loads: it won at every shape on the H200 (2-13%,
# docs/results/2026-11-30-h200-knobs.md) and costs nothing where the target lacks it (an
# "unsupported" verdict, no compile). The others are a study's to widen ([space]
# persistent = [0, 2], warp_specialize = [false, true], maxnreg = [0, 168], as the
# hopper_knobs study does): a persistent grid added 3-4% on top of TMA at D=128 but lost
# without it, and doubles the compiles of a budget-only run on Ada; register caps won only
# within the noise, and warp specialization compiles to the very binary without it (Triton
# 3.6, 8 warps) or not at all (4 warps).
DEFAULT_SPACE = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (16, 32, 64, 128, 256),
    "num_warps": (1, 2, 4, 8, 16),
    "num_stages": (1, 2, 3, 4, 5, 6),
    "tma": (False, True),
    "warp_specialize": (False,),
    "maxnreg": (0,),
    "persistent": (0,),
}
# What a study may ask for per axis (num_stages: 1 to 8).
ALLOWED_VALUES = {
    **{name: DEFAULT_SPACE[name] for name in ("block_m", "block_n", "num_warps")},
    "num_stages": tuple(range(1, 9)),
    "tma": (False, True),
    "warp_specialize": (False, True),
    "maxnreg": (0, *range(24, 256, 8)),
    "persistent": tuple(range(0, 9)),
}


KNOBS = ("tma", "warp_specialize", "maxnreg", "persistent")
PLAIN_KNOBS = {"tma": (False,), "warp_specialize": (False,), "maxnreg": (0,), "persistent": (0,)}
# The knobs that are constexprs of the kernel, by their names there (maxnreg is a compile option).
KNOB_CONSTEXPRS = {"tma": "TMA", "warp_specialize": "WARP_SPEC", "persistent": "PERSISTENT"}


@dataclass(frozen=True, order=True)
class Config:
    """One point of the space: what the kernel takes as tiles, launch options and knobs.

    The knobs (see ``kernel.flash_attn_fwd``): ``tma`` loads keys and values through TMA
    descriptors; ``warp_specialize`` splits the key loop into producer and consumer warps;
    ``maxnreg`` caps registers per thread (0: the compiler's choice); ``persistent`` is
    the programs per SM of a persistent grid (0: a program per query tile).
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    warp_specialize: bool = False
    maxnreg: int = 0
    persistent: int = 0

    @property
    def key(self) -> str:
        """A short stable name: ``128x64_w8_s3``, then any knob set: ``_tma_ws_r168_p1``."""
        key = f"{self.block_m}x{self.block_n}_w{self.num_warps}_s{self.num_stages}"
        key += "_tma" * self.tma + "_ws" * self.warp_specialize
        key += f"_r{self.maxnreg}" * bool(self.maxnreg) + f"_p{self.persistent}" * bool(self.persistent)
        return key

    @property
    def plain(self) -> bool:
        """No knob set: the kernel every Triton version and GPU runs."""
        return not any(getattr(self, knob) for knob in KNOBS)

    @classmethod
    def parse(cls, text: str) -> Config:
        """Parse ``BM,BN,WARPS,STAGES`` (or the ``key`` form, knobs included).

        Raises:
            ValueError: not four positive integers, or an unknown knob.
        """
        head, knobs = text.strip(), []
        if "_w" in head:                      # the key form: 128x64_w8_s3[_tma][_ws][_rN][_pN]
            pieces = head.split("_")
            head, knobs = "_".join(pieces[:3]), pieces[3:]
        cleaned = head.replace("x", ",").replace("_w", ",").replace("_s", ",")
        parts = [p.strip() for p in cleaned.split(",") if p.strip()]
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 4 or min(values) < 1:
            raise ValueError(f"config {text!r} must be BM,BN,WARPS,STAGES, e.g. 128,64,8,3 (or 128x64_w8_s3_tma_p1)")
        fields: dict = {}
        for knob in knobs:
            if knob in ("tma", "ws"):
                fields["tma" if knob == "tma" else "warp_specialize"] = True
            elif knob[:1] in ("r", "p") and knob[1:].isdigit():
                fields["maxnreg" if knob[0] == "r" else "persistent"] = int(knob[1:])
            else:
                raise ValueError(f"config {text!r}: unknown knob {knob!r}; knobs are _tma, _ws, _rN (maxnreg), "
                                 f"_pN (persistent programs per SM)")
        return cls(*values, **fields)

    @classmethod
    def from_triton(cls, config) -> Config:
        """The config a ``triton.Config`` of an emitted autotune list stands for (BLOCK_M,
        BLOCK_N and the knob constexprs TMA, WARP_SPEC, PERSISTENT as kwargs; maxnreg)."""
        kwargs = config.kwargs
        knobs = {knob: kwargs[name] for knob, name in KNOB_CONSTEXPRS.items() if name in kwargs}
        return cls(kwargs["BLOCK_M"], kwargs["BLOCK_N"], config.num_warps, config.num_stages,
                   maxnreg=config.maxnreg or 0, **knobs)

    def constexprs(self) -> dict:
        """The kernel's knob constexprs for this config, by their kernel names (``TMA``, ...)."""
        return {name: getattr(self, knob) for knob, name in KNOB_CONSTEXPRS.items()}

    def as_kwargs(self) -> dict:
        """Keyword arguments of ``kernel.flash_attn_fwd`` (knobs only when set, so a plain
        config calls the kernel exactly as before the knobs existed)."""
        kwargs: dict = dict(block_m=self.block_m, block_n=self.block_n, num_warps=self.num_warps,
                            num_stages=self.num_stages)
        return kwargs | {knob: getattr(self, knob) for knob in KNOBS if getattr(self, knob)}


def restriction(config: Config, head_dim: int) -> str | None:
    """Why the kernel cannot use this config at this head dim, or None.

    Rules, each a limit no compiler can beat:
      * threads: a block holds at most 1024 threads (32 warps);
      * registers: the fp32 score tile S [BLOCK_M, BLOCK_N] and output accumulator
        O [BLOCK_M, D] live in registers, spread over 32 * num_warps threads, and
        must fit under the 255-register limit and under ``maxnreg`` when one is set;
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
    if config.maxnreg and accumulator_regs > config.maxnreg:
        return (f"registers: S and O accumulators alone need {accumulator_regs} per thread > maxnreg "
                f"{config.maxnreg}; raise the cap or use more warps")
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
    tma: tuple[bool, ...] = DEFAULT_SPACE["tma"]
    warp_specialize: tuple[bool, ...] = DEFAULT_SPACE["warp_specialize"]
    maxnreg: tuple[int, ...] = DEFAULT_SPACE["maxnreg"]
    persistent: tuple[int, ...] = DEFAULT_SPACE["persistent"]
    exclude: tuple[Config, ...] = field(default=())

    @classmethod
    def plain(cls, **axes) -> SearchSpace:
        """A space over the plain kernel only (every knob off), with the given axes."""
        return cls(**{**PLAIN_KNOBS, **axes})

    def all_configs(self) -> list[Config]:
        """Every combination, restricted or not, in a stable order (knobs vary fastest)."""
        axes = [getattr(self, name) for name in AXES]
        return [config for config in (Config(*values) for values in itertools.product(*axes))
                if config not in self.exclude]

    def configs(self, head_dim: int) -> list[Config]:
        """The combinations that pass :func:`restriction` at this head dim."""
        return [c for c in self.all_configs() if restriction(c, head_dim) is None]
