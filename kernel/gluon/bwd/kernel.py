"""The warp-specialized Gluon backward for Hopper: device code (launcher: ``launch.py``).

A program owns key tiles (tile pid, pid + programs, ...; one per program unless persistent) of
``BLOCK_N = 64 * CONSUMERS`` keys and walks the query tiles of ``BLOCK_M`` rows that see them.
Partitions (``gl.warp_specialize``):

* consumer warpgroups (4 warps each, ``setmaxnreg`` up; consumer 0 is the default partition,
  consumer 1 the second worker): consumer c owns keys [64 c, 64 c + 64) of the key tile, holds
  their dK and dV in registers (fp32 wgmma accumulators) and, per query tile, computes

      S = Q K_c^T      P = exp2(S * qk_scale - lse * log2 e)  (masked tiles only: 0 where cut)
      dP = dO V_c^T    dS = P * (dP - delta)
      dV_c += P^T dO   dK_c += dS^T Q   (P and dS through shared memory, transposed views)

  and its columns of ``dQ_tile = dS K`` (with two consumers, the dS of both, [BLOCK_M, 128],
  each consumer's half of dQ's columns; with one, all of them), in chunks of 64 columns written
  fp32 to shared buffers that the copy engine adds into the global fp32 dQ accumulator
  (``cp.reduce.async.bulk.tensor ... .add``), issued asynchronously: a buffer is waited on
  (``store_wait``) only when it comes round again;
* the first worker is the producer warp (TMA, few registers): per key tile it loads K and V
  once, then Q and dO of each query tile (shared by the consumers) into a ring of stages.

Queries run down the rows of S (a thread holds two rows: lse and delta cost two registers).

Barriers (mbarriers; a fresh barrier counts as having completed the phase before 0):
``kv_ready`` / ``kv_empty`` for the K and V buffers (phase: key tiles done by this program),
``q_ready[s]`` / ``q_empty[s]`` for ring stage s (query tile ``t`` of the program, counted
over all its key tiles, lives in stage ``t % NUM_STAGES`` and completes phase
``t // NUM_STAGES``); with two consumers, ``ds_ready`` (both halves of dS are written: tile
t completes phase t & 1) and ``ds_free`` (both consumers' dQ wgmma of tile t have retired).
Each empty barrier counts one arrival per consumer. A consumer releases a stage once the wgmma
that read it have completed, and the K/V buffers once its dK and dV have left them: the
epilogue stages dK (times the softmax scale) and dV through its rows of the K and V buffers
(after ``ds_free``: the other consumer's dQ reads every row of K) and stores them by TMA.

Masks: only tiles on the causal diagonal and every tile of a ragged last key tile mask P.
A ragged last query tile needs none: its rows past N_q are zeros (TMA), with lse = delta = 0,
so they add nothing to dV, dK, and their dQ rows are clipped by the reduce; key rows past N_k
are masked, and their dK and dV rows clipped by the store. Conventions are
``kernel.triton.bwd``'s: natural-log lse from the forward, ``qk_scale = scale * log2(e)``,
dK and dQ take the final ``scale`` (dQ in the conversion kernel), causal keeps key j for
query i when j <= i.
"""

from __future__ import annotations

from kernel.gluon.api import (
    GLUON_IMPORT_ERROR,
    cta_barrier,
    fence_async_shared,
    gl,
    jit,
    mbarrier,
    tma,
    tma_reduce_add,
    tma_store,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from kernel.gluon.bwd.producer import _producer, query_tiles
from kernel.gluon.schedule import BWD_BYTES_PER_ELEMENT, heads_per_group, key_tile_coords

LOG2E_F = gl.constexpr(1.4426950408889634) if GLUON_IMPORT_ERROR is None else 1.4426950408889634
# H and BH only split a tile's index into batch and head: specialising on them buys nothing.
UNSPECIALISED = ("H", "BH")


# ---------------------------------------------------------------------------------- consumer


@jit
def _scores(q, k):
    """S = Q K^T (or dP = dO V^T), issued async: q [BLOCK_M, D], k [BLOCK_N, D] in shared memory."""
    BLOCK_M: gl.constexpr = q.shape[0]
    BLOCK_N: gl.constexpr = k.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    return warpgroup_mma(q, k.permute((1, 0)), zero, use_acc=False, is_async=True)


@jit
def _p_ds(q, k, v, do, lse_ptr, delta_ptr, start_m, offs_n, N_Q, N_K, qk_scale, MASKED: gl.constexpr,
          CAUSAL: gl.constexpr):
    """(P, dS) of one query tile, fp32 [BLOCK_M, BLOCK_N] in S's wgmma layout (queries down: a
    thread holds two rows, so lse and delta cost two registers each)."""
    BLOCK_M: gl.constexpr = q.shape[0]
    BLOCK_N: gl.constexpr = k.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    offs_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    row_ok = offs_m < N_Q
    lse = gl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E_F       # log2 units
    delta = gl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
    s_token = _scores(q, k)
    dp_token = _scores(do, v)
    s = warpgroup_mma_wait(1, deps=[s_token])                  # groups retire in order: S is done
    p = gl.exp2(s * qk_scale - lse[:, None])
    if MASKED:
        keep = offs_n[None, :] < N_K
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        p = gl.where(keep, p, 0.0)
    dp = warpgroup_mma_wait(0, deps=[dp_token])
    return p, p * (dp - delta[:, None])


@jit
def _dq_chunks(ds_full, k_full, dq_bufs, dq_desc, index, batch, head, start_m, dv_token, dk_token, q_empty, stage,
               ds_free, C: gl.constexpr, CONSUMERS: gl.constexpr):
    """Consumer C's columns of dQ = dS K (dS of the whole key tile), in chunks of ``dq_desc``'s
    64 columns, each staged in shared memory and added into the global accumulator by a TMA
    reduce; retires dV and dK with the first chunk and then releases the ring stage, and with
    two consumers tells the other one (``ds_free``) when its last wgmma reading dS is done.
    Returns (dv, dk)."""
    BLOCK_M: gl.constexpr = ds_full.shape[0]
    CHUNK: gl.constexpr = dq_desc.block_type.shape[3]
    CHUNKS: gl.constexpr = k_full.shape[1] // CHUNK // CONSUMERS          # this consumer's chunks
    buffers: gl.constexpr = dq_bufs.shape[0] // CONSUMERS
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, CHUNK, 16])
    dv = dv_token
    dk = dk_token
    for j in gl.static_range(CHUNKS):
        dq_zero = gl.zeros([BLOCK_M, CHUNK], gl.float32, dq_layout)
        dq_token = warpgroup_mma(ds_full, k_full.slice((C * CHUNKS + j) * CHUNK, CHUNK, dim=1), dq_zero,
                                 use_acc=False, is_async=True)
        if j == 0:
            dv, dk, dq = warpgroup_mma_wait(0, deps=[dv_token, dk_token, dq_token])
            mbarrier.arrive(q_empty.index(stage))              # Q and dO are read
        else:
            dq = warpgroup_mma_wait(0, deps=[dq_token])
        if CONSUMERS > 1 and j == CHUNKS - 1:
            mbarrier.arrive(ds_free)                           # this consumer no longer reads dS or K
        # Each reduce is its own bulk group (of this consumer's issuing threads), and a buffer
        # comes round every ``buffers`` reduces.
        dq_buf = dq_bufs.index(C * buffers + (index * CHUNKS + j) % buffers)
        tma.store_wait(buffers - 1)                            # the reduce that read this buffer is done
        cta_barrier()                                    # (the issuing thread waited; all know)
        dq_buf.reshape([BLOCK_M, CHUNK]).store(dq)
        fence_async_shared()
        cta_barrier()
        tma_reduce_add(dq_desc, [batch, head, start_m, (C * CHUNKS + j) * CHUNK], dq_buf)
    return dv, dk


@jit
def _step(dk, dv, kv_bufs, index, start_m, ring, ps_bufs, ds_bars, dq_bufs, dq_desc, lse_ptr, delta_ptr, batch,
          head, offs_n, N_Q, N_K, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr, C: gl.constexpr,
          CONSUMERS: gl.constexpr):
    """One query tile (ring index ``index``) folded into consumer C's dK and dV; its dQ columns
    added into the accumulator.

    P and dS go through shared memory: P in the consumer's own [BLOCK_M, 64] buffer, dS in its
    columns of the [BLOCK_M, BLOCK_N] buffer all consumers share; their transposed views are
    the A operands of dV += P^T dO and dK += dS^T Q, the shared dS that of dQ = dS K."""
    q_bufs, do_bufs, q_ready, q_empty = ring
    p_bufs, ds_bufs = ps_bufs
    ds_ready, ds_free = ds_bars
    stages: gl.constexpr = q_bufs.shape[0]
    BLOCK_M: gl.constexpr = q_bufs.shape[3]
    HEAD_DIM: gl.constexpr = q_bufs.shape[4]
    BLOCK_N: gl.constexpr = ds_bufs.shape[2]
    ROWS: gl.constexpr = BLOCK_N // CONSUMERS                  # this consumer's keys
    dtype: gl.constexpr = q_bufs.dtype
    stage = index % stages
    # Buffers addressed through a zero that the compiler cannot see as one, nor hoist: the
    # wgmma descriptors of fixed buffers (K, V, P, dS) are then made per tile from a base
    # instead of being hoisted out of the loop, 2 registers each, all the way through.
    zero = index >> 30
    k_full = kv_bufs[0].index(zero).reshape([BLOCK_N, HEAD_DIM])
    k = k_full.slice(C * ROWS, ROWS, dim=0)
    v = kv_bufs[1].index(zero).reshape([BLOCK_N, HEAD_DIM]).slice(C * ROWS, ROWS, dim=0)
    p_buf = p_bufs.index(C + zero)
    ds_full = ds_bufs.index(zero)
    ds_mine = ds_full.slice(C * ROWS, ROWS, dim=1)
    mbarrier.wait(q_ready.index(stage), (index // stages) & 1)
    q = q_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM])
    do = do_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM])
    p, ds = _p_ds(q, k, v, do, lse_ptr, delta_ptr, start_m, offs_n + zero, N_Q, N_K, qk_scale, MASKED, CAUSAL)
    if CONSUMERS > 1:
        mbarrier.wait(ds_free, (index & 1) ^ 1)                # both consumers' dQ of the last tile are done
    # (This consumer's own readers of p_buf and ds_full retired before its last tile returned.)
    p_buf.store(p.to(dtype))
    ds_mine.store(ds.to(dtype))
    fence_async_shared()
    cta_barrier()                                        # every warp's rows of P and dS are written
    if CONSUMERS > 1:
        mbarrier.arrive(ds_ready)
    dv_token = warpgroup_mma(p_buf.permute((1, 0)), do, dv, is_async=True)
    dk_token = warpgroup_mma(ds_mine.permute((1, 0)), q, dk, is_async=True)
    if CONSUMERS > 1:
        mbarrier.wait(ds_ready, index & 1)                     # the other consumer's half of dS is written
    dv, dk = _dq_chunks(ds_full, k_full, dq_bufs, dq_desc, index, batch, head, start_m, dv_token, dk_token, q_empty,
                        stage, ds_free, C, CONSUMERS)
    return dk, dv


@jit
def _epilogue(dk, dv, kv_bufs, dk_desc, dv_desc, ds_free, count, batch, head, start_n, N_K, sm_scale,
              C: gl.constexpr, CONSUMERS: gl.constexpr):
    """dK (times the scale) and dV of consumer C's keys out through its rows of the K and V
    buffers, by TMA (rows past N_k clipped; no store of rows wholly past it)."""
    k_buf, v_buf = kv_bufs
    ROWS: gl.constexpr = dk_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = dk_desc.block_type.shape[3]
    if CONSUMERS > 1:
        # The other consumer's dQ wgmma read every row of K: wait until its last one is done.
        mbarrier.wait(ds_free, (count & 1) ^ 1)
    BLOCK_N: gl.constexpr = k_buf.shape[3]
    k_rows = k_buf.index(0).slice(C * ROWS, ROWS, dim=2)              # [1, 1, ROWS, D]: what the copies take
    v_rows = v_buf.index(0).slice(C * ROWS, ROWS, dim=2)
    k_buf.index(0).reshape([BLOCK_N, HEAD_DIM]).slice(C * ROWS, ROWS, dim=0).store((dk * sm_scale).to(k_buf.dtype))
    v_buf.index(0).reshape([BLOCK_N, HEAD_DIM]).slice(C * ROWS, ROWS, dim=0).store(dv.to(v_buf.dtype))
    fence_async_shared()
    cta_barrier()
    if start_n + C * ROWS < N_K:
        tma_store(dk_desc, [batch, head, start_n + C * ROWS, 0], k_rows)
        tma_store(dv_desc, [batch, head, start_n + C * ROWS, 0], v_rows)
    tma.store_wait(0)


@jit
def _consumer(kv_bufs, kv_bars, ring, ps_bufs, ds_bars, dq_bufs, dq_desc, dk_desc, dv_desc, LSE, DELTA, H, BH,
              N_Q, N_K, qk_scale, sm_scale, CAUSAL: gl.constexpr, C: gl.constexpr, CONSUMERS: gl.constexpr,
              L2_BYTES: gl.constexpr):
    """Consumer C: dK and dV of its keys of each key tile of this program, and its share of dQ."""
    kv_ready, kv_empty = kv_bars
    BLOCK_N: gl.constexpr = kv_bufs[0].shape[3]
    HEAD_DIM: gl.constexpr = kv_bufs[0].shape[4]
    BLOCK_M: gl.constexpr = ring[0].shape[3]
    ROWS: gl.constexpr = BLOCK_N // CONSUMERS
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ROWS, 16])
    tiles_n = gl.cdiv(N_K, BLOCK_N)
    group = heads_per_group(N_Q, BH, L2_BYTES, HEAD_DIM * BWD_BYTES_PER_ELEMENT)
    count = 0
    for tile in range(gl.program_id(0), tiles_n * BH, gl.num_programs(0)):
        # The key tiles this program has done, from the tile itself: a counter carried across the loop beside the
        # group's would be one register more than D=128's causal default has (Triton 3.6's ptxas spilled 8 bytes).
        done = (tile - gl.program_id(0)) // gl.num_programs(0)
        tile_n, bh = key_tile_coords(tile, tiles_n, BH, group, CAUSAL)
        batch = bh // H
        head = bh % H
        start_n = tile_n * BLOCK_N
        first, n_tiles, n_masked = query_tiles(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        offs_n = start_n + C * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(0, s_layout))
        rows = bh.to(gl.int64) * N_Q
        dk = gl.zeros([ROWS, HEAD_DIM], gl.float32, kv_layout)
        dv = gl.zeros([ROWS, HEAD_DIM], gl.float32, kv_layout)
        mbarrier.wait(kv_ready, done & 1)
        for i in range(0, n_masked):
            dk, dv = _step(dk, dv, kv_bufs, count + i, (first + i) * BLOCK_M, ring, ps_bufs, ds_bars, dq_bufs,
                           dq_desc, LSE + rows, DELTA + rows, batch, head, offs_n, N_Q, N_K, qk_scale, True, CAUSAL,
                           C, CONSUMERS)
        for i in range(n_masked, n_tiles):
            dk, dv = _step(dk, dv, kv_bufs, count + i, (first + i) * BLOCK_M, ring, ps_bufs, ds_bars, dq_bufs,
                           dq_desc, LSE + rows, DELTA + rows, batch, head, offs_n, N_Q, N_K, qk_scale, False, CAUSAL,
                           C, CONSUMERS)
        count += n_tiles
        _epilogue(dk, dv, kv_bufs, dk_desc, dv_desc, ds_bars[1], count, batch, head, start_n, N_K, sm_scale, C,
                  CONSUMERS)
        mbarrier.arrive(kv_empty)                              # the producer may load the next K and V
    tma.store_wait(0)


# ------------------------------------------------------------------------------------ kernel


@jit
def _allocate(q_desc, k_desc, dq_desc, NUM_STAGES: gl.constexpr, DQ_BUFS: gl.constexpr, CONSUMERS: gl.constexpr):
    """(kv_bufs, kv_bars, ring, ps_bufs, ds_bars, dq_bufs), barriers initialised (module docstring)."""
    dtype: gl.constexpr = q_desc.dtype
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    k_buf = gl.allocate_shared_memory(dtype, [1] + k_desc.block_type.shape, k_desc.layout)
    v_buf = gl.allocate_shared_memory(dtype, [1] + k_desc.block_type.shape, k_desc.layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + q_desc.block_type.shape, q_desc.layout)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N // CONSUMERS], dtype)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)
    p_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, BLOCK_M, BLOCK_N // CONSUMERS], p_layout)
    ds_bufs = gl.allocate_shared_memory(dtype, [1, BLOCK_M, BLOCK_N], ds_layout)
    CHUNKS: gl.constexpr = q_desc.block_type.shape[3] // dq_desc.block_type.shape[3]
    dq_bufs = gl.allocate_shared_memory(gl.float32, [DQ_BUFS * CHUNKS] + dq_desc.block_type.shape, dq_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())    # kv ready/empty, ds ready/free
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    for i in gl.static_range(1, 4):
        mbarrier.init(bars.index(i), count=CONSUMERS)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=CONSUMERS)
    return ((k_buf, v_buf), (bars.index(0), bars.index(1)), (q_bufs, do_bufs, q_ready, q_empty), (p_bufs, ds_bufs),
            (bars.index(2), bars.index(3)), dq_bufs)


@jit(do_not_specialize=UNSPECIALISED)
def bwd_gluon_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, LSE, DELTA, H, BH, N_Q, N_K,
                     qk_scale, sm_scale, CAUSAL: gl.constexpr, NUM_STAGES: gl.constexpr, DQ_BUFS: gl.constexpr,
                     CONSUMERS: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     L2_BYTES: gl.constexpr):
    """Allocates the buffers and barriers, then forks the consumers and the producer."""
    kv_bufs, kv_bars, ring, ps_bufs, ds_bars, dq_bufs = _allocate(q_desc, k_desc, dq_desc, NUM_STAGES, DQ_BUFS,
                                                                  CONSUMERS)
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (kv_bufs, kv_bars, ring, ps_bufs, ds_bars, dq_bufs, dq_desc, dk_desc, dv_desc, LSE, DELTA, H,
                         BH, N_Q, N_K, qk_scale, sm_scale, CAUSAL, 0, CONSUMERS, L2_BYTES)),
            (_producer, (k_desc, v_desc, q_desc, do_desc, kv_bufs, kv_bars, ring, H, BH, N_Q, N_K, CAUSAL, L2_BYTES)),
            (_consumer, (kv_bufs, kv_bars, ring, ps_bufs, ds_bars, dq_bufs, dq_desc, dk_desc, dv_desc, LSE, DELTA, H,
                         BH, N_Q, N_K, qk_scale, sm_scale, CAUSAL, 1, CONSUMERS, L2_BYTES)),
        ], [1, 4], [PRODUCER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (kv_bufs, kv_bars, ring, ps_bufs, ds_bars, dq_bufs, dq_desc, dk_desc, dv_desc, LSE, DELTA, H,
                         BH, N_Q, N_K, qk_scale, sm_scale, CAUSAL, 0, CONSUMERS, L2_BYTES)),
            (_producer, (k_desc, v_desc, q_desc, do_desc, kv_bufs, kv_bars, ring, H, BH, N_Q, N_K, CAUSAL, L2_BYTES)),
        ], [1], [PRODUCER_REGS])


# Every JIT function of the kernel: the schedule's, then this package's in file order (their source is the
# device code).
JIT_FUNCTIONS = (heads_per_group, key_tile_coords, query_tiles, _producer, _scores, _p_ds, _dq_chunks, _step,
                 _epilogue, _consumer, _allocate, bwd_gluon_kernel)
