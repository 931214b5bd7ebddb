"""Device code shared by the Gluon forwards: the online softmax, the key-tile ring, the schedules.

Read with :mod:`kernel.gluon.fwd.launch` (the single-partition kernel and the launcher) and
:mod:`kernel.gluon.fwd.kernel_ws` (the warp-specialized kernel). Triton's Gluon names come from
:mod:`kernel.gluon.api`, which knows how releases differ; this module imports on any Triton.

Conventions (as ``kernel.triton.fwd``): the softmax runs in log2 units, scores times
``qk_scale = scale * log2(e)``; causal keeps key j for query i when ``j <= i``.

Tensor descriptors are rank 4, ``[B, H, N, D]`` with blocks ``[1, 1, rows, D]``, so the copy
engine bounds every tile by its own head: rows past N come back as zeros and are never written
by a store. Keys past N_k (zeros, so scores of 0) are masked with -inf in the last key tile;
their V rows are zeros and meet p == 0.

The key-tile ring: ``ring = (k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty)`` with
``NUM_STAGES`` buffers of ``[1, 1, BLOCK_N, D]``. Key tile ``t`` of a program (counted over all
its query tiles) lives in stage ``t % NUM_STAGES``, and its ready barriers complete phase
``t // NUM_STAGES``. A consumer *releases* a stage when the wgmma reading it has completed: with
``INLINE_LOADS`` (one partition does everything) releasing issues the load of the key tile
``NUM_STAGES`` further on into it; otherwise it arrives on the stage's empty barrier for the
producer warp.
"""

from __future__ import annotations

from kernel.gluon.api import (
    gl,
    jit,
    mbarrier,
    tma_load,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LN2 = gl.constexpr(0.6931471805599453) if gl is not None else 0.6931471805599453


# H and BH only split a tile's index into batch and head: specialising on them (a constant 1 for
# [B, N, D] inputs, or divisible by 16) would add binaries and buy nothing.
UNSPECIALISED = ("H", "BH")


# ------------------------------------------------------------------------- tiles and layouts


@jit
def key_tiles(start_m, N_K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """(full, total) for the query rows [start_m, start_m + BLOCK_M): key tiles [0, full) are
    valid for every row and need no mask; [full, total) need one (the ragged last tile, the
    causal diagonal). Causal tiles wholly above the diagonal are not counted.

    Key 0 is valid for every row (causal: 0 <= i; N_k >= 1 is checked on the host) and lies in
    the first tile visited, so every row's running max is finite from the first tile on."""
    if CAUSAL:
        key_stop = gl.minimum(start_m + BLOCK_M, N_K)
        full = gl.minimum(start_m + 1, N_K) // BLOCK_N
    else:
        key_stop = N_K
        full = N_K // BLOCK_N
    return full, gl.cdiv(key_stop, BLOCK_N)


# --------------------------------------------------------------------------------- the ring


@jit
def load_k(ring, loader, index, key_tile, pred):
    """Copy key tile ``key_tile`` into the stage of ring index ``index`` (skipped where not pred)."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    k_desc, v_desc, batch, head = loader
    stage = index % k_bufs.shape[0]
    bar = k_ready.index(stage)
    mbarrier.expect(bar, k_desc.block_type.nbytes, pred=pred)
    tma_load(k_desc, [batch, head, key_tile * k_desc.block_type.shape[2], 0], bar,
                                    k_bufs.index(stage), pred=pred)


@jit
def load_v(ring, loader, index, key_tile, pred):
    """Copy value tile ``key_tile`` into the stage of ring index ``index`` (skipped where not pred)."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    k_desc, v_desc, batch, head = loader
    stage = index % v_bufs.shape[0]
    bar = v_ready.index(stage)
    mbarrier.expect(bar, v_desc.block_type.nbytes, pred=pred)
    tma_load(v_desc, [batch, head, key_tile * v_desc.block_type.shape[2], 0], bar,
                                    v_bufs.index(stage), pred=pred)


@jit
def wait_k(ring, index):
    """Wait for the key tile of ring index ``index``; its [BLOCK_N, D] buffer."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    stages: gl.constexpr = k_bufs.shape[0]
    stage = index % stages
    mbarrier.wait(k_ready.index(stage), (index // stages) & 1)
    return k_bufs.index(stage).reshape([k_bufs.shape[3], k_bufs.shape[4]])


@jit
def wait_v(ring, index):
    """Wait for the value tile of ring index ``index``; its [BLOCK_N, D] buffer."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    stages: gl.constexpr = v_bufs.shape[0]
    stage = index % stages
    mbarrier.wait(v_ready.index(stage), (index // stages) & 1)
    return v_bufs.index(stage).reshape([v_bufs.shape[3], v_bufs.shape[4]])


@jit
def release_k(ring, loader, count, j, n_tiles, INLINE_LOADS: gl.constexpr):
    """The wgmma that read key tile j of this query tile (ring index count + j) is done."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    stages: gl.constexpr = k_bufs.shape[0]
    if INLINE_LOADS:
        load_k(ring, loader, count + j + stages, j + stages, j + stages < n_tiles)
    else:
        mbarrier.arrive(k_empty.index((count + j) % stages))


@jit
def release_v(ring, loader, count, j, n_tiles, INLINE_LOADS: gl.constexpr):
    """The wgmma that read value tile j of this query tile (ring index count + j) is done."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    stages: gl.constexpr = v_bufs.shape[0]
    if INLINE_LOADS:
        load_v(ring, loader, count + j + stages, j + stages, j + stages < n_tiles)
    else:
        mbarrier.arrive(v_empty.index((count + j) % stages))


@jit
def prefetch(ring, loader, count, n_tiles):
    """INLINE_LOADS: fill every stage with the first key and value tiles of a query tile."""
    k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    stages: gl.constexpr = k_bufs.shape[0]
    for i in gl.static_range(stages):
        load_k(ring, loader, count + i, i, i < n_tiles)
        load_v(ring, loader, count + i, i, i < n_tiles)


# ------------------------------------------------------------------------------ the softmax


@jit
def softmax_tile(s, m_i, l_i, key_start, offs_m, N_K, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """Fold a [rows, BLOCK_N] tile of raw scores into (m_i, l_i); returns (p, alpha, m, l).

    ``p`` is exp2 of the scaled scores minus the new max (fp32, s's layout); ``alpha`` rescales
    the old state. MASKED tiles set keys >= N_k (and, causal, keys > the row) to -inf first.
    """
    if MASKED:
        cols = key_start + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
        keep = cols[None, :] < N_K
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_new


@jit
def rows_of(x, acc):
    """A per-row vector in the rows of accumulator ``acc`` (the same rows of another wgmma layout:
    no data moves)."""
    return gl.convert_layout(x, gl.SliceLayout(1, acc.type.layout))


# ---------------------------------------------------------------------------- the schedules


@jit
def qk_mma(q, k):
    """S = Q K^T, issued (async): q [rows, D] and k [BLOCK_N, D] in shared memory."""
    ROWS: gl.constexpr = q.shape[0]
    BLOCK_N: gl.constexpr = k.shape[0]
    NUM_WARPS: gl.constexpr = gl.num_warps()
    # The kernels' S layout (a warp per 16 rows); layouts are spelled out, not computed by a
    # constexpr_function, which returns raw values under TRITON_INTERPRET=1 (set by the CPU tests).
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    return warpgroup_mma(q, k.permute((1, 0)), zero, use_acc=False, is_async=True)


@jit
def p_operand(p, acc, ring):
    """P (fp32, S's layout) as the wgmma A operand of ``acc += P V``: cast to V's dtype and
    kept in registers. Done before a turn is taken, so a turn holds the wgmma issues only."""
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc.type.layout, k_width=2)
    return gl.convert_layout(p.to(ring[1].dtype), p_layout)


@jit
def pv_mma(p_op, v, acc):
    """acc += P V, issued (async), P from :func:`p_operand`. The wait that retires this wgmma
    must list ``p_op`` in its deps, so that its registers are not reused while the tensor
    cores still read them."""
    return warpgroup_mma(p_op, v, acc, is_async=True)


@jit
def step_simple(q, acc, m_i, l_i, j, ring, loader, count, n_tiles, offs_m, N_K, qk_scale,
                MASKED: gl.constexpr, CAUSAL: gl.constexpr, INLINE_LOADS: gl.constexpr):
    """One key tile, in order: S = QK^T, wait, softmax, O = alpha O + PV, wait."""
    BLOCK_N: gl.constexpr = ring[0].shape[3]
    k = wait_k(ring, count + j)
    s = warpgroup_mma_wait(0, deps=[qk_mma(q, k)])
    release_k(ring, loader, count, j, n_tiles, INLINE_LOADS)
    p, alpha, m_i, l_i = softmax_tile(s, m_i, l_i, j * BLOCK_N, offs_m, N_K, qk_scale, MASKED, CAUSAL)
    acc = acc * rows_of(alpha, acc)[:, None]
    p_op = p_operand(p, acc, ring)
    v = wait_v(ring, count + j)
    acc, _ = warpgroup_mma_wait(0, deps=[pv_mma(p_op, v, acc), p_op])
    release_v(ring, loader, count, j, n_tiles, INLINE_LOADS)
    return acc, m_i, l_i


@jit
def attend_simple(q, acc, m_i, l_i, ring, loader, count, n_full, n_tiles, offs_m, N_K, qk_scale,
                  CAUSAL: gl.constexpr, INLINE_LOADS: gl.constexpr):
    """Key tiles [0, n_tiles) of one query tile, each in order (no overlap): the fallback."""
    for j in range(0, n_full):
        acc, m_i, l_i = step_simple(q, acc, m_i, l_i, j, ring, loader, count, n_tiles, offs_m, N_K, qk_scale,
                                    False, CAUSAL, INLINE_LOADS)
    for j in range(n_full, n_tiles):
        acc, m_i, l_i = step_simple(q, acc, m_i, l_i, j, ring, loader, count, n_tiles, offs_m, N_K, qk_scale,
                                    True, CAUSAL, INLINE_LOADS)
    return acc, m_i, l_i


@jit
def take_turn(turns, turn, PINGPONG: gl.constexpr):
    """Ping-pong: wait until it is this warpgroup's turn to issue wgmma (turn number ``turn``).

    ``turns = (mine, other, first)``: two mbarriers of one arrival each, and 1 for the
    warpgroup that goes first (0 for the other). Turns alternate strictly, so both
    warpgroups must take the same number of turns in all.
    """
    if PINGPONG:
        mine, other, first = turns
        mbarrier.wait(mine, (turn & 1) ^ first)


@jit
def pass_turn(turns, PINGPONG: gl.constexpr):
    """Ping-pong: this warpgroup's wgmma are issued; the other warpgroup may issue its own."""
    if PINGPONG:
        mine, other, first = turns
        mbarrier.arrive(other)


@jit
def step_overlapped(q, acc, p, m_i, l_i, j, ring, loader, count, n_tiles, offs_m, N_K, qk_scale, turns, turn,
                    MASKED: gl.constexpr, CAUSAL: gl.constexpr, INLINE_LOADS: gl.constexpr,
                    PINGPONG: gl.constexpr):
    """Key tile j >= 1: S_j = Q K_j^T and O += P_{j-1} V_{j-1} issued together, softmax of S_j
    while the PV wgmma runs, then O *= alpha_j. Returns (acc, p_j, m, l)."""
    BLOCK_N: gl.constexpr = ring[0].shape[3]
    p_op = p_operand(p, acc, ring)
    k = wait_k(ring, count + j)
    v = wait_v(ring, count + j - 1)
    take_turn(turns, turn, PINGPONG)
    s_token = qk_mma(q, k)
    acc_token = pv_mma(p_op, v, acc)
    pass_turn(turns, PINGPONG)
    # wgmma groups complete in order: one outstanding means S_j is done, the PV may still run.
    s = warpgroup_mma_wait(1, deps=[s_token])
    release_k(ring, loader, count, j, n_tiles, INLINE_LOADS)
    p, alpha, m_i, l_i = softmax_tile(s, m_i, l_i, j * BLOCK_N, offs_m, N_K, qk_scale, MASKED, CAUSAL)
    acc, _ = warpgroup_mma_wait(0, deps=[acc_token, p_op])
    release_v(ring, loader, count, j - 1, n_tiles, INLINE_LOADS)
    acc = acc * rows_of(alpha, acc)[:, None]
    return acc, p, m_i, l_i


@jit
def attend_overlapped(q, acc, m_i, l_i, ring, loader, count, n_full, n_tiles, offs_m, N_K, qk_scale, turns,
                      turn, CAUSAL: gl.constexpr, INLINE_LOADS: gl.constexpr, PINGPONG: gl.constexpr):
    """Key tiles [0, n_tiles) of one query tile, softmax overlapped with the PV wgmma.

    Takes n_tiles + 1 turns (ping-pong). Returns (acc, m_i, l_i, turn).
    """
    # Tile 0 alone: its softmax goes through the mask (correct for any tile, and one tile only).
    k = wait_k(ring, count)
    take_turn(turns, turn, PINGPONG)
    s_token = qk_mma(q, k)
    pass_turn(turns, PINGPONG)
    s = warpgroup_mma_wait(0, deps=[s_token])
    release_k(ring, loader, count, 0, n_tiles, INLINE_LOADS)
    p, alpha, m_i, l_i = softmax_tile(s, m_i, l_i, 0, offs_m, N_K, qk_scale, True, CAUSAL)
    turn += 1
    unmasked_stop = gl.maximum(n_full, 1)
    for j in range(1, unmasked_stop):
        acc, p, m_i, l_i = step_overlapped(q, acc, p, m_i, l_i, j, ring, loader, count, n_tiles, offs_m, N_K,
                                           qk_scale, turns, turn, False, CAUSAL, INLINE_LOADS, PINGPONG)
        turn += 1
    for j in range(unmasked_stop, n_tiles):
        acc, p, m_i, l_i = step_overlapped(q, acc, p, m_i, l_i, j, ring, loader, count, n_tiles, offs_m, N_K,
                                           qk_scale, turns, turn, True, CAUSAL, INLINE_LOADS, PINGPONG)
        turn += 1
    # The last PV.
    p_op = p_operand(p, acc, ring)
    v = wait_v(ring, count + n_tiles - 1)
    take_turn(turns, turn, PINGPONG)
    acc_token = pv_mma(p_op, v, acc)
    pass_turn(turns, PINGPONG)
    acc, _ = warpgroup_mma_wait(0, deps=[acc_token, p_op])
    release_v(ring, loader, count, n_tiles - 1, n_tiles, INLINE_LOADS)
    return acc, m_i, l_i, turn + 1


@jit
def finish_rows(acc, m_i, l_i, o_buf, lse_ptrs, row_ok):
    """out = O / l into ``o_buf`` (shared, [rows, D], for a TMA store); lse (natural log) to memory.

    l > 0 in every row (each row keeps key 0), so there is no zero guard; a NaN in q or k
    reaches out and lse as NaN.
    """
    out = acc / rows_of(l_i, acc)[:, None]
    o_buf.store(out.to(o_buf.dtype))
    gl.store(lse_ptrs, (m_i + gl.log2(l_i)) * LN2, mask=row_ok)
