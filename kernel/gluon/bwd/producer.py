"""The Gluon backward's producer warp and the tile bookkeeping its partitions share. Read with
``kernel.py`` (its module docstring); the TMA reduce is :data:`kernel.gluon.api.tma_reduce_add`."""

from __future__ import annotations

from kernel.gluon.api import gl, jit, mbarrier, tma_load
from kernel.gluon.schedule import BWD_BYTES_PER_ELEMENT, heads_per_group, key_tile_coords

# ------------------------------------------------------------------------- tile bookkeeping


@jit
def query_tiles(start_n, N_Q, N_K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """(first, count, masked) for the key tile at ``start_n``: query tiles [first, first + count)
    see it; the first ``masked`` of them need a mask (the causal diagonal; all of them when the
    key tile is the ragged last one). Causal query tiles wholly before the key tile are skipped."""
    tiles_m = gl.cdiv(N_Q, BLOCK_M)
    if CAUSAL:
        first = start_n // BLOCK_M
        diagonal_end = gl.cdiv(start_n + BLOCK_N - 1, BLOCK_M)    # tiles with a row below a key
    else:
        first = start_n * 0
        diagonal_end = first
    count = gl.maximum(tiles_m - first, 0)
    masked = gl.minimum(gl.maximum(diagonal_end - first, 0), count)
    if start_n + BLOCK_N > N_K:
        masked = count
    return first, count, masked


# ---------------------------------------------------------------------------------- producer


@jit
def _producer(k_desc, v_desc, q_desc, do_desc, kv_bufs, kv_bars, ring, H, BH, N_Q, N_K, CAUSAL: gl.constexpr,
              L2_BYTES: gl.constexpr):
    """K and V of each key tile once, then Q and dO of its query tiles through the ring."""
    k_buf, v_buf = kv_bufs
    kv_ready, kv_empty = kv_bars
    q_bufs, do_bufs, q_ready, q_empty = ring
    stages: gl.constexpr = q_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    tiles_n = gl.cdiv(N_K, BLOCK_N)
    group = heads_per_group(N_Q, BH, L2_BYTES, q_desc.block_type.shape[3] * BWD_BYTES_PER_ELEMENT)
    count = 0
    done = 0
    for tile in range(gl.program_id(0), tiles_n * BH, gl.num_programs(0)):
        tile_n, bh = key_tile_coords(tile, tiles_n, BH, group, CAUSAL)
        batch = bh // H
        head = bh % H
        start_n = tile_n * BLOCK_N
        first, n_tiles, _ = query_tiles(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        mbarrier.wait(kv_empty, (done & 1) ^ 1)
        mbarrier.expect(kv_ready, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma_load(k_desc, [batch, head, start_n, 0], kv_ready, k_buf.index(0))
        tma_load(v_desc, [batch, head, start_n, 0], kv_ready, v_buf.index(0))
        for i in range(n_tiles):
            index = count + i
            stage = index % stages
            mbarrier.wait(q_empty.index(stage), ((index // stages) & 1) ^ 1)
            bar = q_ready.index(stage)
            mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
            start_m = (first + i) * BLOCK_M
            tma_load(q_desc, [batch, head, start_m, 0], bar, q_bufs.index(stage))
            tma_load(do_desc, [batch, head, start_m, 0], bar, do_bufs.index(stage))
        count += n_tiles
        done += 1  # noqa: SIM113 (device code: no enumerate)
