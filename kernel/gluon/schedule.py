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

__all__ = ["BWD_BYTES_PER_ELEMENT", "FWD_BYTES_PER_ELEMENT", "L2_BYTES", "heads_per_group", "key_tile_coords",
           "query_tile_coords", "tile_coords"]

# What a group of heads may read: about half the H100's (50 MB) and H200's (60 MB) L2, as FlashAttention-3
# takes, leaving the other half to the outputs streaming through and to the far half of the L2.
L2_BYTES = 32 * 1024 * 1024
# Bytes a head's inputs take per row and head-dim column: the forward reads K and V (2 bytes each); the
# backward's key tiles read Q and dO (2 bytes each) and add into the fp32 dQ accumulator (4). (Constants
# the kernels read: gl.constexpr where Gluon is there.)
FWD_BYTES_PER_ELEMENT = gl.constexpr(4) if gl is not None else 4
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
