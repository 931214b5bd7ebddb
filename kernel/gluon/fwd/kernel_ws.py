"""The warp-specialized Gluon forward: a TMA producer warp and one to three consumer warpgroups.

A program takes query tiles of ``64 * CONSUMERS`` rows (tile pid, pid + programs, ...). Its
partitions (``gl.warp_specialize``):

* the default partition is consumer 0 (4 warps), the first worker is the producer (1 warp,
  few registers), the next workers are consumers 1 and 2 where there are (4 warps each);
* consumer c owns query rows [64 c, 64 c + 64) of each tile, its own Q buffer and output
  buffer; all consumers read the same key ring, so each stage's empty barriers count one
  arrival per consumer;
* the producer loads, per query tile, each consumer's Q (once that consumer has released
  its Q buffer), then the tile's key and value tiles as stages come free;
* with ``PINGPONG`` the consumers issue their wgmma in turns (a turnstile of two mbarriers:
  Hopper has no named barriers in Triton 3.6's Gluon), so one warpgroup's softmax runs while
  the other's matmuls occupy the tensor cores.

Both consumers walk the same key tiles (those of the whole query tile; on the causal diagonal
consumer 0 sees some tiles wholly masked, which the mask handles), so both take the same
number of turns and every stage gets both releases.
"""

from __future__ import annotations

from kernel.gluon.api import fence_async_shared, gl, jit, mbarrier, tma, tma_load, tma_store
from kernel.gluon.attention import (
    UNSPECIALISED,
    attend_overlapped,
    attend_simple,
    finish_rows,
    key_tiles,
    load_k,
    load_v,
    rows_of,
    step_simple,
)
from kernel.gluon.schedule import FWD_BYTES_PER_ELEMENT, heads_per_group, query_tile_coords

# TAIL and SPLITS are counts of the launch's work (a 1 would otherwise compile a second binary).
WS_UNSPECIALISED = UNSPECIALISED + ("TAIL", "SPLITS")


@jit
def _producer(q_desc, k_desc, v_desc, q_bufs, q_ready, q_empty, ring, H, BH, N_Q, N_K, TAIL, SPLITS,
              CAUSAL: gl.constexpr, CONSUMERS: gl.constexpr, SPLIT: gl.constexpr, L2_BYTES: gl.constexpr):
    """Loads Q for each consumer, then the work item's keys and values into the ring."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    stages: gl.constexpr = k_bufs.shape[0]
    ROWS: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_M: gl.constexpr = ROWS * CONSUMERS
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    tiles_m = gl.cdiv(N_Q, BLOCK_M)
    group = heads_per_group(N_K, BH, L2_BYTES, k_desc.block_type.shape[3] * FWD_BYTES_PER_ELEMENT)
    count = 0
    done = 0
    for item in range(gl.program_id(0), work_items(tiles_m, BH, TAIL, SPLITS, SPLIT), gl.num_programs(0)):
        tile_m, bh, tile, part, parts = work_item(item, tiles_m, BH, group, TAIL, SPLITS, CAUSAL, SPLIT)
        batch = bh // H
        head = bh % H
        start_m = tile_m * BLOCK_M
        n_full, n_tiles = key_tiles(start_m, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        lo, hi = key_range(n_tiles, part, parts)
        for c in gl.static_range(CONSUMERS):
            # A fresh barrier counts as having completed the phase before 0: the first wait passes.
            mbarrier.wait(q_empty.index(c), (done & 1) ^ 1)
            # The second consumer's rows can lie wholly past N_q (the last tile of a head): no copy
            # of a box that is all out of bounds is issued, a plain arrival completes the phase, and
            # that consumer works on stale rows it never stores.
            rows_in = start_m + c * ROWS < N_Q
            mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes, pred=rows_in)
            tma_load(q_desc, [batch, head, start_m + c * ROWS, 0], q_ready.index(c),
                                            q_bufs.index(c), pred=rows_in)
            mbarrier.arrive(q_ready.index(c), pred=start_m + c * ROWS >= N_Q)
        loader = (k_desc, v_desc, batch, head)
        for j in range(lo, hi):
            index = count + j - lo
            phase = (index // stages) & 1
            mbarrier.wait(k_empty.index(index % stages), phase ^ 1)
            load_k(ring, loader, index, j, True)
            mbarrier.wait(v_empty.index(index % stages), phase ^ 1)
            load_v(ring, loader, index, j, True)
        count += hi - lo
        done += 1  # noqa: SIM113 (device code: no enumerate)


@jit
def _consumer(q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH, N_Q, N_K,
              qk_scale, TAIL, SPLITS, C: gl.constexpr, CAUSAL: gl.constexpr, CONSUMERS: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, SPLIT: gl.constexpr, L2_BYTES: gl.constexpr):
    """Consumer warpgroup C: attention for rows [64 C, 64 C + 64) of every work item's query tile."""
    ROWS: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_M: gl.constexpr = ROWS * CONSUMERS
    BLOCK_N: gl.constexpr = ring[0].shape[3]
    # wgmma accumulators of S [rows, BLOCK_N] and O [rows, D]: a warp per 16 rows.
    NUM_WARPS: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    q = q_bufs.index(C).reshape([ROWS, HEAD_DIM])
    o_buf = o_bufs.index(C)
    # Consumer 0 takes the first turn (it waits on a phase a fresh barrier counts as complete).
    if PINGPONG:
        turns = (turn_bars.index(C), turn_bars.index(1 - C), 1 - C)
    else:           # no turns (three consumers have none): a placeholder that is never waited on
        turns = (turn_bars.index(0), turn_bars.index(0), 0)
    tiles_m = gl.cdiv(N_Q, BLOCK_M)
    group = heads_per_group(N_K, BH, L2_BYTES, HEAD_DIM * FWD_BYTES_PER_ELEMENT)
    count = 0
    done = 0
    turn = 0
    for item in range(gl.program_id(0), work_items(tiles_m, BH, TAIL, SPLITS, SPLIT), gl.num_programs(0)):
        tile_m, bh, tile, part, parts = work_item(item, tiles_m, BH, group, TAIL, SPLITS, CAUSAL, SPLIT)
        batch = bh // H
        head = bh % H
        start_m = tile_m * BLOCK_M
        n_full, n_tiles = key_tiles(start_m, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        lo, hi = key_range(n_tiles, part, parts)
        offs_m = start_m + C * ROWS + gl.arange(0, ROWS, layout=rows)
        m_i = gl.full([ROWS], float("-inf"), gl.float32, rows)
        l_i = gl.zeros([ROWS], gl.float32, rows)
        acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
        mbarrier.wait(q_ready.index(C), done & 1)
        if OVERLAP:
            acc, m_i, l_i, turn = attend_overlapped(q, acc, m_i, l_i, ring, ring, count, n_full, n_tiles, offs_m,
                                                    N_K, qk_scale, turns, turn, CAUSAL, False, PINGPONG)
        elif SPLIT:                                # the launcher splits only in-order tiles
            acc, m_i, l_i = attend_range(q, acc, m_i, l_i, ring, count, lo, hi, n_full, offs_m, N_K, qk_scale,
                                         CAUSAL)
        else:
            acc, m_i, l_i = attend_simple(q, acc, m_i, l_i, ring, ring, count, n_full, n_tiles, offs_m, N_K,
                                          qk_scale, CAUSAL, False)
        mbarrier.arrive(q_empty.index(C))          # every wgmma reading Q has completed
        count += hi - lo
        done += 1  # noqa: SIM113 (device code: no enumerate)

        if SPLIT:
            if parts > 1:                          # a part of a split tile: the merge finishes it
                store_part(acc, m_i, l_i, WS_O, WS_L, ((tile - TAIL) * SPLITS + part) * BLOCK_M + C * ROWS)
            else:
                _store_tile(acc, m_i, l_i, o_desc, o_buf, LSE, bh, batch, head, start_m + C * ROWS, offs_m, N_Q)
        else:
            _store_tile(acc, m_i, l_i, o_desc, o_buf, LSE, bh, batch, head, start_m + C * ROWS, offs_m, N_Q)
    tma.store_wait(0)


@jit
def _store_tile(acc, m_i, l_i, o_desc, o_buf, LSE, bh, batch, head, row0, offs_m, N_Q):
    """A consumer's rows of a whole tile: out through its output buffer by TMA, lse to memory."""
    ROWS: gl.constexpr = acc.shape[0]
    HEAD_DIM: gl.constexpr = acc.shape[1]
    tma.store_wait(0)                              # the previous tile's output has left o_buf
    finish_rows(acc, m_i, l_i, o_buf.reshape([ROWS, HEAD_DIM]), LSE + bh.to(gl.int64) * N_Q + offs_m, offs_m < N_Q)
    fence_async_shared()
    if row0 < N_Q:                                 # no store of a box wholly past N_q
        tma_store(o_desc, [batch, head, row0, 0], o_buf)


@jit(do_not_specialize=WS_UNSPECIALISED)
def _fwd_ws_kernel(q_desc, k_desc, v_desc, o_desc, LSE, WS_O, WS_L, H, BH, N_Q, N_K, qk_scale, TAIL, SPLITS,
                   CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, NUM_STAGES: gl.constexpr,
                   CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr, SPLIT: gl.constexpr,
                   L2_BYTES: gl.constexpr):
    """Allocates the buffers and barriers, then forks the partitions (module docstring)."""
    dtype: gl.constexpr = q_desc.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
    o_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS] + o_desc.block_type.shape, o_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(CONSUMERS):
        mbarrier.init(q_ready.index(c), count=1)
        mbarrier.init(q_empty.index(c), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    for i in gl.static_range(2):
        mbarrier.init(turn_bars.index(i), count=1)
    ring = (k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty)

    if CONSUMERS == 3:         # 192-row tiles: no turns (the turnstile is for two)
        gl.warp_specialize([
            (_consumer, (q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH,
                         N_Q, N_K, qk_scale, TAIL, SPLITS, 0, CAUSAL, CONSUMERS, OVERLAP, False, SPLIT, L2_BYTES)),
            (_producer, (q_desc, k_desc, v_desc, q_bufs, q_ready, q_empty, ring, H, BH, N_Q, N_K, TAIL, SPLITS, CAUSAL,
                         CONSUMERS, SPLIT, L2_BYTES)),
            (_consumer, (q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH,
                         N_Q, N_K, qk_scale, TAIL, SPLITS, 1, CAUSAL, CONSUMERS, OVERLAP, False, SPLIT, L2_BYTES)),
            (_consumer, (q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH,
                         N_Q, N_K, qk_scale, TAIL, SPLITS, 2, CAUSAL, CONSUMERS, OVERLAP, False, SPLIT, L2_BYTES)),
        ], [1, 4, 4], [PRODUCER_REGS, CONSUMER_REGS, CONSUMER_REGS])
    elif CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH,
                         N_Q, N_K, qk_scale, TAIL, SPLITS, 0, CAUSAL, CONSUMERS, OVERLAP, PINGPONG, SPLIT, L2_BYTES)),
            (_producer, (q_desc, k_desc, v_desc, q_bufs, q_ready, q_empty, ring, H, BH, N_Q, N_K, TAIL, SPLITS, CAUSAL,
                         CONSUMERS, SPLIT, L2_BYTES)),
            (_consumer, (q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH,
                         N_Q, N_K, qk_scale, TAIL, SPLITS, 1, CAUSAL, CONSUMERS, OVERLAP, PINGPONG, SPLIT, L2_BYTES)),
        ], [1, 4], [PRODUCER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_desc, o_desc, q_bufs, o_bufs, q_ready, q_empty, ring, turn_bars, LSE, WS_O, WS_L, H, BH,
                         N_Q, N_K, qk_scale, TAIL, SPLITS, 0, CAUSAL, CONSUMERS, OVERLAP, False, SPLIT, L2_BYTES)),
            (_producer, (q_desc, k_desc, v_desc, q_bufs, q_ready, q_empty, ring, H, BH, N_Q, N_K, TAIL, SPLITS, CAUSAL,
                         CONSUMERS, SPLIT, L2_BYTES)),
        ], [1], [PRODUCER_REGS])


# ------------------------------------------------------------------ work items (a persistent program's tiles,
# and the parts of a split last wave: kernel.gluon.fwd.split decides the split and merges the parts)


@jit
def work_items(tiles_m, BH, TAIL, SPLITS, SPLIT: gl.constexpr):
    """How many work items a launch has: a tile each, and with ``SPLIT`` ``SPLITS`` per tile from
    ``TAIL`` on (:func:`work_item`)."""
    if SPLIT:
        return TAIL + (tiles_m * BH - TAIL) * SPLITS
    else:
        return tiles_m * BH


@jit
def work_item(item, tiles_m, BH, GROUP, TAIL, SPLITS, CAUSAL: gl.constexpr, SPLIT: gl.constexpr):
    """(query tile, batch x head, linear tile, part, parts) of a persistent program's work item
    (tiles in :func:`kernel.gluon.schedule.query_tile_coords`' order, causal in groups of ``GROUP`` heads).

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
    tile_m, bh = query_tile_coords(tile, tiles_m, BH, GROUP, CAUSAL)
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
