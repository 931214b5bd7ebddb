"""The warp-specialized Gluon backward for Hopper: device code (launcher: ``flash_bwd_gluon.py``).

A program owns key tiles (tile pid, pid + programs, ...; one per program unless persistent) of
``BLOCK_N = 64`` keys and walks the query tiles of ``BLOCK_M`` rows that see them. Partitions
(``gl.warp_specialize``):

* the default partition is the consumer warpgroup (4 warps, ``setmaxnreg`` up): it holds dK and
  dV of its key tile in registers (fp32, wgmma accumulators) and, per query tile, computes

      S^T = K Q^T      P^T = exp2(S^T * qk_scale - lse * log2 e)  (masked tiles only: 0 where cut)
      dP^T = V dO^T    dS^T = P^T * (dP^T - delta)
      dV += P^T dO     dK += dS^T Q     dQ_tile = dS K

  with P^T as a register operand, dS^T through shared memory (the A operand of dK, and of dQ
  as the transposed view), and dQ_tile written fp32 to a shared buffer that the copy engine
  adds into the global fp32 dQ accumulator (``cp.reduce.async.bulk.tensor ... .add``), issued
  asynchronously: the buffer is waited on (``store_wait``) only when it comes round again;
* the worker is the producer warp (TMA, few registers): per key tile it loads K and V once,
  then Q and dO of each query tile into a ring of ``NUM_STAGES`` stages.

Barriers (mbarriers; a fresh barrier counts as having completed the phase before 0):
``kv_ready`` / ``kv_empty`` for the K and V buffers (phase: key tiles done by this program),
``q_ready[s]`` / ``q_empty[s]`` for ring stage s (query tile ``t`` of the program, counted
over all its key tiles, lives in stage ``t % NUM_STAGES`` and completes phase
``t // NUM_STAGES``). The consumer releases a stage once the wgmma that read it have completed,
and the K/V buffers once dK and dV have left them: the epilogue stages dK (times the softmax
scale) and dV through the K and V buffers and stores them by TMA (rows past N_k are clipped).

Masks: only tiles on the causal diagonal and every tile of a ragged last key tile mask P^T.
A ragged last query tile needs none: its rows past N_q are zeros (TMA), with lse = delta = 0,
so they add nothing to dV, dK, and their dQ rows are clipped by the reduce. Conventions are
``kernel.flash_bwd``'s: natural-log lse from the forward, ``qk_scale = scale * log2(e)``,
dK and dQ take the final ``scale`` (dQ in the conversion kernel), causal keeps key j for
query i when j <= i.
"""

from __future__ import annotations

from kernel.gluon_attention import (
    GLUON_IMPORT_ERROR,
    fence_async_shared,
    gl,
    jit,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LOG2E_F = gl.constexpr(1.4426950408889634) if GLUON_IMPORT_ERROR is None else 1.4426950408889634

if GLUON_IMPORT_ERROR is None:
    try:
        from triton._C.libtriton import ir as _ir
        from triton.experimental.gluon.language._core import builtin as _builtin

        @_builtin
        def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
            """Add shared buffer ``src`` into the global tile at ``coord`` of ``tensor_desc`` (TMA
            reduce, ``cp.reduce.async.bulk.tensor``; rows out of bounds are clipped). It joins the
            bulk group that ``tma.store_wait`` waits on, as a TMA store does."""
            coord = _semantic._convert_to_ir_values(coord, require_i64=False)
            _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                      src.handle)
    except (ImportError, AttributeError):  # a Triton without the op: gluon_api_support says so first
        tma_reduce_add = None
else:
    tma_reduce_add = None

# H and BH only split a tile's index into batch and head: specialising on them buys nothing.
UNSPECIALISED = ("H", "BH")


# ------------------------------------------------------------------------- tile bookkeeping


@jit
def key_tile_coords(tile, tiles_n, BH, CAUSAL: gl.constexpr):
    """(key tile, batch x head) of linear tile ``tile``. Causal: key tile 0 (seen by the most
    queries) of every head first, so the last wave is short; else a head's tiles together."""
    if CAUSAL:
        tile_n = tile // BH
        bh = tile % BH
    else:
        tile_n = tile % tiles_n
        bh = tile // tiles_n
    return tile_n, bh


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
def _producer(k_desc, v_desc, q_desc, do_desc, kv_bufs, kv_bars, ring, H, BH, N_Q, N_K, CAUSAL: gl.constexpr):
    """K and V of each key tile once, then Q and dO of its query tiles through the ring."""
    k_buf, v_buf = kv_bufs
    kv_ready, kv_empty = kv_bars
    q_bufs, do_bufs, q_ready, q_empty = ring
    stages: gl.constexpr = q_bufs.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    tiles_n = gl.cdiv(N_K, BLOCK_N)
    count = 0
    done = 0
    for tile in range(gl.program_id(0), tiles_n * BH, gl.num_programs(0)):
        tile_n, bh = key_tile_coords(tile, tiles_n, BH, CAUSAL)
        batch = bh // H
        head = bh % H
        start_n = tile_n * BLOCK_N
        first, n_tiles, _ = query_tiles(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        mbarrier.wait(kv_empty, (done & 1) ^ 1)
        mbarrier.expect(kv_ready, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [batch, head, start_n, 0], kv_ready, k_buf.index(0))
        tma.async_copy_global_to_shared(v_desc, [batch, head, start_n, 0], kv_ready, v_buf.index(0))
        for i in range(n_tiles):
            index = count + i
            stage = index % stages
            mbarrier.wait(q_empty.index(stage), ((index // stages) & 1) ^ 1)
            bar = q_ready.index(stage)
            mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
            start_m = (first + i) * BLOCK_M
            tma.async_copy_global_to_shared(q_desc, [batch, head, start_m, 0], bar, q_bufs.index(stage))
            tma.async_copy_global_to_shared(do_desc, [batch, head, start_m, 0], bar, do_bufs.index(stage))
        count += n_tiles
        done += 1  # noqa: SIM113 (device code: no enumerate)


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
def _dq_chunks(ds_buf, k, dq_bufs, dq_desc, index, batch, head, start_m, dv_token, dk_token, q_empty, stage):
    """dQ = dS K in chunks of ``dq_desc``'s columns, each staged in shared memory and added into
    the global accumulator by a TMA reduce; retires dV and dK with the first chunk and then
    releases the ring stage. Returns (dv, dk)."""
    BLOCK_M: gl.constexpr = ds_buf.shape[0]
    CHUNK: gl.constexpr = dq_desc.block_type.shape[3]
    CHUNKS: gl.constexpr = k.shape[1] // CHUNK
    buffers: gl.constexpr = dq_bufs.shape[0]
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, CHUNK, 16])
    dv = dv_token
    dk = dk_token
    for c in gl.static_range(CHUNKS):
        dq_zero = gl.zeros([BLOCK_M, CHUNK], gl.float32, dq_layout)
        dq_token = warpgroup_mma(ds_buf, k.slice(c * CHUNK, CHUNK, dim=1), dq_zero, use_acc=False, is_async=True)
        if c == 0:
            dv, dk, dq = warpgroup_mma_wait(0, deps=[dv_token, dk_token, dq_token])
            mbarrier.arrive(q_empty.index(stage))              # Q and dO are read
        else:
            dq = warpgroup_mma_wait(0, deps=[dq_token])
        # Each reduce is its own bulk group, and a buffer comes round every ``buffers`` reduces.
        dq_buf = dq_bufs.index((index * CHUNKS + c) % buffers)
        tma.store_wait(buffers - 1)                            # the reduce that read this buffer is done
        gl.thread_barrier()                                    # (the issuing thread waited; all know)
        dq_buf.reshape([BLOCK_M, CHUNK]).store(dq)
        fence_async_shared()
        gl.thread_barrier()
        tma_reduce_add(dq_desc, [batch, head, start_m, c * CHUNK], dq_buf)
    return dv, dk


@jit
def _step(dk, dv, kv_bufs, index, start_m, ring, ps_bufs, dq_bufs, dq_desc, lse_ptr, delta_ptr, batch, head, offs_n,
          N_Q, N_K, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """One query tile (ring index ``index``) folded into dK and dV; its dS K added into dQ.

    P and dS go through shared memory ([BLOCK_M, BLOCK_N], ``ps_bufs``): their transposed views
    are the A operands of dV += P^T dO and dK += dS^T Q, dS itself that of dQ = dS K."""
    q_bufs, do_bufs, q_ready, q_empty = ring
    stages: gl.constexpr = q_bufs.shape[0]
    BLOCK_M: gl.constexpr = q_bufs.shape[3]
    HEAD_DIM: gl.constexpr = q_bufs.shape[4]
    BLOCK_N: gl.constexpr = ps_bufs.shape[2]
    dtype: gl.constexpr = q_bufs.dtype
    stage = index % stages
    # Buffers addressed through a zero that the compiler cannot see as one, nor hoist: the
    # wgmma descriptors of fixed buffers (K, V, P, dS) are then made per tile from a base
    # instead of being hoisted out of the loop, 2 registers each, all the way through.
    zero = index >> 30
    k = kv_bufs[0].index(zero).reshape([BLOCK_N, HEAD_DIM])
    v = kv_bufs[1].index(zero).reshape([BLOCK_N, HEAD_DIM])
    p_buf = ps_bufs.index(2 * zero)
    ds_buf = ps_bufs.index(2 * zero + 1)
    mbarrier.wait(q_ready.index(stage), (index // stages) & 1)
    q = q_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM])
    do = do_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM])
    p, ds = _p_ds(q, k, v, do, lse_ptr, delta_ptr, start_m, offs_n + zero, N_Q, N_K, qk_scale, MASKED, CAUSAL)
    # The previous tile's readers of p_buf and ds_buf (its wgmma) retired before it returned.
    p_buf.store(p.to(dtype))
    ds_buf.store(ds.to(dtype))
    fence_async_shared()
    gl.thread_barrier()                                        # every warp's rows of P and dS are written
    dv_token = warpgroup_mma(p_buf.permute((1, 0)), do, dv, is_async=True)
    dk_token = warpgroup_mma(ds_buf.permute((1, 0)), q, dk, is_async=True)
    dv, dk = _dq_chunks(ds_buf, k, dq_bufs, dq_desc, index, batch, head, start_m, dv_token, dk_token, q_empty,
                        stage)
    return dk, dv


@jit
def _consumer(kv_bufs, kv_bars, ring, ps_bufs, dq_bufs, k_desc, dq_desc, dk_desc, dv_desc, LSE, DELTA, H, BH, N_Q, N_K,
              qk_scale, sm_scale, CAUSAL: gl.constexpr):
    """dK and dV of each key tile of this program, and its share of dQ (module docstring)."""
    k_buf, v_buf = kv_bufs
    kv_ready, kv_empty = kv_bars
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    BLOCK_M: gl.constexpr = ring[0].shape[3]
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    tiles_n = gl.cdiv(N_K, BLOCK_N)
    count = 0
    done = 0
    for tile in range(gl.program_id(0), tiles_n * BH, gl.num_programs(0)):
        tile_n, bh = key_tile_coords(tile, tiles_n, BH, CAUSAL)
        batch = bh // H
        head = bh % H
        start_n = tile_n * BLOCK_N
        first, n_tiles, n_masked = query_tiles(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        rows = bh.to(gl.int64) * N_Q
        dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
        dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
        mbarrier.wait(kv_ready, done & 1)
        for i in range(0, n_masked):
            dk, dv = _step(dk, dv, kv_bufs, count + i, (first + i) * BLOCK_M, ring, ps_bufs, dq_bufs, dq_desc,
                           LSE + rows, DELTA + rows, batch, head, offs_n, N_Q, N_K, qk_scale, True, CAUSAL)
        for i in range(n_masked, n_tiles):
            dk, dv = _step(dk, dv, kv_bufs, count + i, (first + i) * BLOCK_M, ring, ps_bufs, dq_bufs, dq_desc,
                           LSE + rows, DELTA + rows, batch, head, offs_n, N_Q, N_K, qk_scale, False, CAUSAL)
        count += n_tiles
        done += 1  # noqa: SIM113 (device code: no enumerate)
        # dK and dV leave through the K and V buffers (every wgmma reading them has retired).
        k_buf.index(0).reshape([BLOCK_N, HEAD_DIM]).store((dk * sm_scale).to(k_buf.dtype))
        v_buf.index(0).reshape([BLOCK_N, HEAD_DIM]).store(dv.to(v_buf.dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(dk_desc, [batch, head, start_n, 0], k_buf.index(0))
        tma.async_copy_shared_to_global(dv_desc, [batch, head, start_n, 0], v_buf.index(0))
        tma.store_wait(0)
        mbarrier.arrive(kv_empty)                              # the producer may load the next K and V
    tma.store_wait(0)


# ------------------------------------------------------------------------------------ kernel


@jit(do_not_specialize=UNSPECIALISED)
def bwd_gluon_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, LSE, DELTA, H, BH, N_Q, N_K,
                     qk_scale, sm_scale, CAUSAL: gl.constexpr, NUM_STAGES: gl.constexpr, DQ_BUFS: gl.constexpr,
                     PRODUCER_REGS: gl.constexpr):
    """Allocates the buffers and barriers, then forks the consumer and the producer."""
    dtype: gl.constexpr = q_desc.dtype
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    k_buf = gl.allocate_shared_memory(dtype, [1] + k_desc.block_type.shape, k_desc.layout)
    v_buf = gl.allocate_shared_memory(dtype, [1] + v_desc.block_type.shape, v_desc.layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + do_desc.block_type.shape, do_desc.layout)
    ps_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)
    ps_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N], ps_layout)      # P and dS
    CHUNKS: gl.constexpr = q_desc.block_type.shape[3] // dq_desc.block_type.shape[3]
    dq_bufs = gl.allocate_shared_memory(gl.float32, [DQ_BUFS * CHUNKS] + dq_desc.block_type.shape, dq_desc.layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(kv_empty, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
    kv_bufs = (k_buf, v_buf)
    kv_bars = (kv_ready, kv_empty)
    ring = (q_bufs, do_bufs, q_ready, q_empty)
    gl.warp_specialize([
        (_consumer, (kv_bufs, kv_bars, ring, ps_bufs, dq_bufs, k_desc, dq_desc, dk_desc, dv_desc, LSE, DELTA, H, BH,
                     N_Q, N_K, qk_scale, sm_scale, CAUSAL)),
        (_producer, (k_desc, v_desc, q_desc, do_desc, kv_bufs, kv_bars, ring, H, BH, N_Q, N_K, CAUSAL)),
    ], [1], [PRODUCER_REGS])


# Every JIT function of the kernel, in file order (their source is the device code).
JIT_FUNCTIONS = (key_tile_coords, query_tiles, _producer, _scores, _p_ds, _dq_chunks, _step, _consumer,
                 bwd_gluon_kernel)
