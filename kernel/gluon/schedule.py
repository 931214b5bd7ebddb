"""The order in which the Gluon kernels' programs take their tiles: one home for both passes.

A program takes the tiles ``pid, pid + programs, ...`` of a linear order (a persistent grid), or
one tile (a program per tile, dispatched in about the same order), so the programs running at
any moment work on a window of consecutive tiles. The order decides two things:

* **the last wave**: causal tiles differ in work (a query tile near the end of the sequence sees
  every key; in the backward, key tile 0 is seen by every query), so the heaviest go first and the
  short ones fill the gaps at the end (longest-processing-time first);
* **the L2**: the tiles in flight should read inputs that another tile in flight has just read.
  Non-causal, a head's tiles are consecutive. Causal, "heaviest first across every head" puts
  each head's tiles ``BH`` apart: with 256 heads at N=1024, D=64, the forward reads 64 MB of keys
  and values in each row of tiles, more than the H200's L2 (60 MB, in two halves), so every tile
  went to DRAM for its keys. So the causal order is taken in **groups of heads** whose inputs fit
  in :data:`L2_BYTES`: within a group, heaviest row of tiles first, heads fastest; then the next
  group (FlashAttention-3's longest-first scheduler does the same, with 32 MB).

The group is worked out in the kernel from the lengths and the head dim (:func:`heads_per_group`);
:data:`L2_BYTES` is a compile-time constant of each kernel (``L2_BYTES``), so a launch with a
group of every head (``L2_BYTES`` huge) is the ungrouped order, which the benchmark
``python -m benchmarks.tile_order`` times beside the grouped one.

The functions use integer arithmetic only, so their undecorated bodies (``fn.fn``) run on Python
ints too (with :func:`tile_coords`, which :func:`query_tile_coords` calls, replaced by its body): the
tests walk every order on the CPU.
"""

from __future__ import annotations

from kernel.gluon.api import gl, jit

__all__ = ["BALANCED", "BWD_BYTES_PER_ELEMENT", "FWD_BYTES_PER_ELEMENT", "L2_BYTES", "balanced_budget",
           "forward_tile_costs", "heads_per_group", "key_tile_coords", "query_tile_coords", "stride_imbalance",
           "tile_coords"]

# What a group of heads may read: about half the H100's (50 MB) and H200's (60 MB) L2, as FlashAttention-3
# takes, leaving the other half to the outputs streaming through and to the far half of the L2.
L2_BYTES = 32 * 1024 * 1024
# Bytes a head's inputs take per row and head-dim column: the forward reads K and V (2 bytes each); the
# backward's key tiles read Q and dO (2 bytes each) and add into the fp32 dQ accumulator (4). (Constants
# the kernels read: gl.constexpr where Gluon is there.)
FWD_BYTES = 4
FWD_BYTES_PER_ELEMENT = gl.constexpr(FWD_BYTES) if gl is not None else FWD_BYTES
BWD_BYTES_PER_ELEMENT = gl.constexpr(8) if gl is not None else 8


@jit
def heads_per_group(n, BH, L2: gl.constexpr, ROW_BYTES: gl.constexpr):
    """Heads whose ``n`` rows of ``ROW_BYTES`` each fit in ``L2`` bytes: at least 1, at most ``BH``."""
    # Constants first, so no product of n can overflow; ``BH * 0`` makes a tensor of it even where the JIT
    # made n a constant 1 (BH is never specialised), as both branches below must assign one.
    group = BH * 0 + L2 // ROW_BYTES // n
    if group < 1:
        group = group * 0 + 1
    if group > BH:
        group = BH
    return group


@jit
def tile_coords(tile, tiles, BH, GROUP, CAUSAL: gl.constexpr):
    """(tile of its head, batch x head) of linear tile ``tile`` over ``tiles`` tiles a head. Causal: in groups of
    ``GROUP`` heads (the last group may be smaller), each head's tile 0 first, then tile 1, ..., heads fastest;
    else a head's tiles together. The backward's order as it is (key tile 0 is seen by the most queries)."""
    if CAUSAL:
        first = tile // (GROUP * tiles) * GROUP      # the group's first head
        size = BH - first
        if size > GROUP:
            size = GROUP
        rest = tile - first * tiles
        step = rest // size
        bh = first + rest % size
    else:
        step = tile % tiles
        bh = tile // tiles
    return step, bh


@jit
def query_tile_coords(tile, tiles_m, BH, GROUP, CAUSAL: gl.constexpr):
    """(query tile, batch x head) of the forward's linear tile ``tile``: :func:`tile_coords`' order, causal
    with the rows of query tiles reversed (the last row, which sees every key, first)."""
    tile_m, bh = tile_coords(tile, tiles_m, BH, GROUP, CAUSAL)
    if CAUSAL:
        tile_m = tiles_m - 1 - tile_m
    return tile_m, bh


# The backward's key tiles go in tile_coords' order itself.
key_tile_coords = tile_coords


# ------------------------------------------------------------------ the budget a persistent grid balances best (host)
#
# A persistent grid deals the order out in a fixed stride (program p takes tiles p, p + P, ...), so the heaviest-
# first order balances the programs' work only where the group's tiles fall evenly among them. At B16 H16 N1024
# D=128 causal (128 x 128 tiles, 132 programs) the 32 MB group leaves the busiest program 12.5% over the mean
# (python scripts/schedule_balance.py), 4 MB 3.1%, and the H200 timed the kernel at 0.92x and 0.99x cuDNN with
# them (python -m benchmarks.tile_order --budget 4 ..., docs/results/2026-12-04-h200-many-programs.md).
BALANCE_BUDGETS = (L2_BYTES, L2_BYTES // 2, L2_BYTES // 4, L2_BYTES // 8)
BALANCED = "balanced"          # checked_plan's l2_bytes that asks for balanced_budget
TILE_OVERHEAD = 1.0            # a tile's prologue and epilogue, in key tiles


def group_for(n_k: int, bh: int, budget: int, row_bytes: int) -> int:
    """:func:`heads_per_group` on the host: its body on ints (a launch with no keys counted as one key)."""
    return int(getattr(heads_per_group, "fn", heads_per_group)(max(n_k, 1), bh, budget, row_bytes))


def forward_tile_costs(n_q: int, n_k: int, bh: int, block_m: int, block_n: int, group: int) -> list[int]:
    """Key tiles of each causal forward tile, in :func:`query_tile_coords`' order."""
    tiles_m = -(-n_q // block_m)
    costs = []
    for first in range(0, bh, group):
        size = min(group, bh - first)
        for tile_m in reversed(range(tiles_m)):
            costs += [-(-min(tile_m * block_m + block_m, n_k) // block_n)] * size
    return costs


def stride_imbalance(costs: list[int], programs: int, overhead: float = TILE_OVERHEAD) -> float:
    """The busiest program's work over the mean when program p takes tiles p, p + programs, ... (1.0: even)."""
    loads = [0.0] * programs
    for index, cost in enumerate(costs):
        loads[index % programs] += cost + overhead
    busy = [load for load in loads if load]
    return max(busy) / (sum(busy) / len(busy)) if busy else 1.0


def balanced_budget(n_q: int, n_k: int, bh: int, head_dim: int, block_m: int, block_n: int, programs: int) -> int:
    """Of :data:`BALANCE_BUDGETS`, the one whose causal forward order a persistent grid of ``programs`` deals out
    most evenly (:func:`stride_imbalance`); within 0.5% of the best, the largest (the order as it was)."""
    row_bytes = head_dim * FWD_BYTES
    spread = {budget: stride_imbalance(forward_tile_costs(n_q, n_k, bh, block_m, block_n,
                                                          group_for(n_k, bh, budget, row_bytes)), programs)
              for budget in BALANCE_BUDGETS}
    best = min(spread.values())
    return next(budget for budget in BALANCE_BUDGETS if spread[budget] <= best * 1.005)
