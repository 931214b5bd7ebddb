"""The candidates of a default call: each one of our kernels at a config, under the name the route table uses.

A route table entry (:mod:`kernel.route_table`) names the candidate that ran fastest in its bucket;
:mod:`kernel.route` runs it for a call in that bucket. A candidate is a kernel and a few knobs set
over that kernel's default for the call's head dim and mask, so one name means the same idea at
D=64 and D=128 (``ws_64``: the warp-specialized forward over 64-row query tiles, one consumer):

* forward: ``triton`` (:func:`kernel.triton.defaults.default_config`), ``triton_64x64`` (its knobs,
  64 x 64 tiles on 4 warps: fewer rows wasted past a short length, more programs per SM), ``ws``
  and ``pipelined`` (the Gluon variants at :data:`kernel.gluon.fwd.config.GLUON_DEFAULTS`),
  ``ws_128`` (ws over 128-row tiles, with that tile's own schedule), ``ws_64`` and ``ws_64x64`` (one
  consumer over 64-row tiles, at registers and shared memory that let two programs share an SM), their
  persistent forms (``_p2``), and at D=64 64 x 64 tiles at fewer registers, three or four programs an SM
  (``ws_64x64_r144``, ``ws_64x64_p3``, ``ws_64x64_p4``);
* backward: ``triton`` (:func:`kernel.triton.defaults.default_bwd_config`), ``gluon``
  (:data:`kernel.gluon.bwd.config.GLUON_BWD_DEFAULTS`), ``gluon_1c`` (one consumer warpgroup over
  64 keys: twice the programs of D=128's two), ``gluon_2c`` (D=64 over 128 keys, two consumers: D=128's shape),
  ``gluon_128`` (gluon_2c over 128-query tiles).

Plain Python: the route, the benchmark that measures the table (``python -m benchmarks.route``) and
the tests read the same names. Names are identifiers (the table's comments are parsed back).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKWARD", "FORWARD", "Candidate", "candidates"]


@dataclass(frozen=True)
class Candidate:
    """One of our kernels at its default config for the call's head dim and mask, with ``knobs`` set over it.

    Attributes:
        kernel: forward ``"triton"``, ``"ws"`` or ``"pipelined"``; backward ``"triton"`` or ``"gluon"``.
        knobs: (name, value) pairs: for the Triton forward its tiles (block_m, block_n, num_warps,
            num_stages; its knobs stay the default's), for a Gluon kernel the fields of its config.
        head_dims: where it is a candidate (elsewhere it spills, or is another candidate's config).
    """

    kernel: str
    knobs: tuple[tuple[str, object], ...] = ()
    head_dims: tuple[int, ...] = (64, 128)

    @property
    def settings(self) -> dict:
        return dict(self.knobs)

    @property
    def gluon(self) -> bool:
        return self.kernel != "triton"


FORWARD = {
    "triton": Candidate("triton"),
    "triton_64x64": Candidate("triton", (("block_m", 64), ("block_n", 64), ("num_warps", 4), ("num_stages", 3))),
    "ws": Candidate("ws"),
    "ws_128": Candidate("ws", (("block_m", 128),)),
    # One consumer at 232 registers: (4 x 24 + 4 x 232) / 8 = 128 per thread at launch, 32,768 a program, so two
    # programs share an SM (at 240 it would be 33,792: one), each one's prologue and epilogue under the other's
    # matmuls; a program per tile (a persistent grid of one program per SM would keep it at one), a ring of two
    # stages (D=64: 82 KB of shared memory a program, where three stages would take 116 KB, too many for two).
    # (D=64 only: at D=128 the 128-key ring leaves one program per SM, and Triton 3.6's ptxas spills at 232.)
    "ws_64": Candidate("ws", (("block_m", 64), ("num_stages", 2), ("persistent", 0), ("consumer_regs", 232)), (64,)),
    # The same over 64-key tiles: at D=128 a 128-key ring of two stages (128 KB) leaves room for one program only.
    "ws_64x64": Candidate("ws", (("block_m", 64), ("block_n", 64), ("persistent", 0), ("consumer_regs", 232))),
    # Persistent forms of the short tiles (two programs an SM walk the tiles, the producer loading a program's
    # next Q and keys while its consumer finishes a tile), and of the 128-row tile at D=64.
    "ws_64_p2": Candidate("ws", (("block_m", 64), ("num_stages", 2), ("persistent", 2), ("consumer_regs", 232)),
                          (64,)),
    "ws_64x64_p2": Candidate("ws", (("block_m", 64), ("block_n", 64), ("persistent", 2), ("consumer_regs", 232))),
    "ws_128_p1": Candidate("ws", (("block_m", 128), ("persistent", 1)), (64,)),
    # More programs an SM over 64 x 64 tiles at D=64, at fewer registers a consumer (its accumulator and one score
    # tile are 64 of them): each program's prologue, epilogue and softmax hide under the others' matmuls.
    # ws_64x64_r144: a program per tile at 144 registers, (4 x 24 + 4 x 144) / 8 rounded down to 80 a thread at
    # launch, 20,480 a program: three share an SM (48 KB of shared memory each, 64 KB with three stages).
    # ws_64x64_p3: the same on a persistent grid of three programs per SM. ws_64x64_p4: four per SM, in order
    # (one live score tile) at 104 registers, 64 a thread at launch, 16,384 a program; two stages (48 KB).
    # (D=128: its accumulator does not fit in these registers, ptxas refuses the binaries.)
    "ws_64x64_r144": Candidate("ws", (("block_m", 64), ("block_n", 64), ("persistent", 0), ("consumer_regs", 144)),
                               (64,)),
    "ws_64x64_p3": Candidate("ws", (("block_m", 64), ("block_n", 64), ("persistent", 3), ("consumer_regs", 144)),
                             (64,)),
    "ws_64x64_p4": Candidate("ws", (("block_m", 64), ("block_n", 64), ("num_stages", 2), ("overlap", False),
                                    ("persistent", 4), ("consumer_regs", 104)), (64,)),
    # D=128's default tile (two consumers in turns, 128 x 128) on a program per tile: the GPU's own scheduler hands
    # the causal tiles out heaviest first, where the persistent grid deals them out in a fixed stride.
    "ws_p0": Candidate("ws", (("persistent", 0),), (128,)),
    "pipelined": Candidate("pipelined"),
}

BACKWARD = {
    "triton": Candidate("triton"),
    "gluon": Candidate("gluon"),
    # D=128's defaults with one consumer (D=64's have one already): the config the GPU tests check at D=128.
    "gluon_1c": Candidate("gluon", (("consumers", 1),)),
    # D=64 over 128-key tiles, two consumers sharing dS (each 32 of dQ's columns): half the dQ reduces of one
    # consumer over 64 keys, as D=128's default; 240 registers so that (24 + 2 x 240) / 3 = 168 a thread at launch;
    # one dQ buffer leaves shared memory to the stages (the fastest of bwd_gluon's D=64 two-consumer knobs,
    # non-causal, 2026-12-07: 0.8865 ms against 0.9229 for D=64's default).
    "gluon_2c": Candidate("gluon", (("consumers", 2), ("consumer_regs", 240), ("dq_bufs", 1)), (64,)),
    # gluon_2c over 128-query tiles: each K/V tile's pass over the queries takes half the steps, each one's
    # wgmma twice as long, so its barriers and dQ reduces weigh half as much (224 KB of shared memory with three
    # stages and one dQ buffer). On an H100 at B4 H8 N4096 D64 (bwd_gluon, 2026-12-07): 0.8428 ms non-causal
    # against 0.9417 for D=64's default and 0.9272 for two consumers over 64 queries; causal 0.46-0.47 against 0.4763.
    # Its two consumers' [64, 128] fp32 tiles fill the 168-register launch cap: Triton 3.6's ptxas spills 40 B of
    # stack (3.8's up to 48 B, 3.9's up to 128 B), and those figures are with the spills.
    "gluon_128": Candidate("gluon", (("block_m", 128), ("consumers", 2), ("consumer_regs", 240), ("dq_bufs", 1)),
                           (64,)),
}


def candidates(pass_: str) -> dict[str, Candidate]:
    """The candidates of ``pass_`` ("fwd" or "bwd") by name."""
    if pass_ not in ("fwd", "bwd"):
        raise ValueError(f"pass {pass_!r} must be 'fwd' or 'bwd'")
    return FORWARD if pass_ == "fwd" else BACKWARD
