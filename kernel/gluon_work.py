"""The ws forward's work items: a persistent program's tiles, and the parts of a split last wave.

Device side of :mod:`kernel.gluon_split` (which decides the split and merges the parts), read
with :mod:`kernel.flash_fwd_gluon_ws`: a work item is a whole query tile, or, in a binary that
splits (``SPLIT``), one of ``SPLITS`` key ranges of a tile of the grid's last wave, whose partial
output goes to a workspace. The shared device code is :mod:`kernel.gluon_attention`'s.
"""

from __future__ import annotations

from kernel.gluon_attention import gl, jit, rows_of, step_simple, tile_coords


@jit
def work_items(tiles_m, BH, TAIL, SPLITS, SPLIT: gl.constexpr):
    """How many work items a launch has: a tile each, and with ``SPLIT`` ``SPLITS`` per tile from
    ``TAIL`` on (:func:`work_item`)."""
    if SPLIT:
        return TAIL + (tiles_m * BH - TAIL) * SPLITS
    else:
        return tiles_m * BH


@jit
def work_item(item, tiles_m, BH, TAIL, SPLITS, CAUSAL: gl.constexpr, SPLIT: gl.constexpr):
    """(query tile, batch x head, linear tile, part, parts) of a persistent program's work item.

    Without ``SPLIT`` an item is a tile (one part: the binary of a kernel that never splits).
    With it, items below ``TAIL`` are whole tiles, and the tiles from ``TAIL`` on (the persistent
    grid's last, partial wave) are each ``SPLITS`` items, one per range of its key tiles
    (:func:`key_range`), whose partial outputs a merge combines afterwards."""
    tile = item
    part = 0
    parts = 1
    if SPLIT:  # noqa: SIM102 (a constexpr: the branch is compiled only for a splitting launch)
        if item >= TAIL:
            tile = TAIL + (item - TAIL) // SPLITS
            part = (item - TAIL) % SPLITS
            parts = SPLITS
    tile_m, bh = tile_coords(tile, tiles_m, BH, CAUSAL)
    return tile_m, bh, tile, part, parts


@jit
def key_range(n_tiles, part, parts):
    """Key tiles [lo, hi) of part ``part`` of ``parts``: the query tile's ``n_tiles`` shared evenly
    (the launcher splits only where every part gets at least one)."""
    return part * n_tiles // parts, (part + 1) * n_tiles // parts


@jit
def attend_range(q, acc, m_i, l_i, ring, count, lo, hi, n_full, offs_m, N_K, qk_scale, CAUSAL: gl.constexpr):
    """Key tiles [lo, hi) of one query tile, each in order, from a producer warp's ring (the key
    tile lo is at ring index ``count``); tiles from ``n_full`` on are masked."""
    base = count - lo
    for j in range(lo, gl.minimum(n_full, hi)):
        acc, m_i, l_i = step_simple(q, acc, m_i, l_i, j, ring, ring, base, hi, offs_m, N_K, qk_scale,
                                    False, CAUSAL, False)
    for j in range(gl.maximum(n_full, lo), hi):
        acc, m_i, l_i = step_simple(q, acc, m_i, l_i, j, ring, ring, base, hi, offs_m, N_K, qk_scale,
                                    True, CAUSAL, False)
    return acc, m_i, l_i


@jit
def store_part(acc, m_i, l_i, WS_O, WS_L, row0):
    """A split tile's partial result: out = O / l (fp32, [rows, D]) at rows ``row0 + r`` of the
    workspace ``WS_O`` ([parts x BLOCK_M, D], row-major), and its log2-sum-exp at ``WS_L``."""
    HEAD_DIM: gl.constexpr = acc.shape[1]
    ROWS: gl.constexpr = acc.shape[0]
    o_rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc.type.layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc.type.layout))
    gl.store(WS_O + o_rows[:, None] * HEAD_DIM + cols[None, :], acc / rows_of(l_i, acc)[:, None])
    gl.store(WS_L + row0 + gl.arange(0, ROWS, layout=m_i.type.layout), m_i + gl.log2(l_i))
