"""FlashAttention forward for Hopper (sm_90) in Gluon: TMA, mbarriers and async wgmma, by hand.

This file is the single-partition kernel. Beside it (:mod:`kernel.gluon.fwd`): the launcher
(``launch.py``: the arguments of a launch, the checks of a first call, the plan cache and
:func:`~kernel.gluon.fwd.launch.flash_attn_fwd_gluon`), the launch plan that launches the compiled
kernel without the JIT (``plan.py``), the warp-specialized kernel (``kernel_ws.py``), the knobs,
defaults and shared-memory model (``config.py``), the cross-compiler (``compile.py``); the device
code both kernels share is :mod:`kernel.gluon.attention`.

The contract is ``kernel.triton.fwd.flash_attn_fwd``'s: ``q`` [B, H, N_q, D] or [B, N_q, D],
``k``/``v`` [B, H, N_k, D] or [B, N_k, D]; any N_q, N_k >= 0; causal top-left aligned (key j
for query i when j <= i); ``lse`` fp32, natural log; a row with no key (N_k == 0) gets
out = 0, lse = -inf. Here: bf16 and fp16 only, D = 64 or 128, CUDA sm_90, Triton 3.6.

Variants (``variant=``):
    * ``"pipelined"``: one partition of ``block_m // 16`` warps. Q by TMA once per query
      tile, K and V by TMA into a ring of ``num_stages`` buffers (the consumer issues each
      load itself when the wgmma that read the stage has completed), S = QK^T and O += PV by
      async wgmma with P kept in registers, the softmax of tile j overlapped with the PV
      wgmma of tile j - 1 (``overlap``), masks only on the tiles that need them, causal tiles
      above the diagonal skipped, a TMA store epilogue through Q's buffer.
    * ``"ws"``: warp-specialized: a 1-warp TMA producer and ``block_m // 64`` consumer
      warpgroups of 64 query rows each, sharing the key ring; with two consumers, their
      wgmma take turns (``pingpong``, a turnstile of two mbarriers), so one warpgroup's
      softmax runs under the other's matmuls; registers split by ``setmaxnreg``.
Both walk their tiles in a loop: ``persistent=0`` launches a program per query tile (the
loop runs once), ``persistent=P`` launches P programs per SM; causal tiles go heaviest first.
"""

from __future__ import annotations

from kernel.gluon.api import fence_async_shared, gl, jit, mbarrier, tma, tma_load, tma_store
from kernel.gluon.attention import (
    UNSPECIALISED,
    attend_overlapped,
    attend_simple,
    finish_rows,
    key_tiles,
    prefetch,
)
from kernel.gluon.schedule import FWD_BYTES_PER_ELEMENT, heads_per_group, query_tile_coords

__all__ = ["_fwd_pipelined_kernel"]



@jit
def _allocate(q_desc, k_desc, v_desc, NUM_STAGES: gl.constexpr):
    """(Q buffer, its barrier, the key ring) of the single partition, barriers initialised.

    Q's buffer doubles as the output's staging buffer: Q is dead once the last S wgmma is done.
    The ring has no empty barriers: the partition issues each load after its own wgmma waits.
    """
    dtype: gl.constexpr = q_desc.dtype
    qo_buf = gl.allocate_shared_memory(dtype, q_desc.block_type.shape, q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
    return qo_buf, q_bar, (k_bufs, v_bufs, k_ready, v_ready, k_ready, v_ready)


@jit(do_not_specialize=UNSPECIALISED)
def _fwd_pipelined_kernel(q_desc, k_desc, v_desc, o_desc, LSE, H, BH, N_Q, N_K, qk_scale,
                          CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, NUM_STAGES: gl.constexpr,
                          L2_BYTES: gl.constexpr):
    """One partition: query tiles pid, pid + programs, ... of the [B*H, tiles] grid."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    # wgmma accumulators of S [rows, BLOCK_N] and O [rows, D]: a warp per 16 rows.
    NUM_WARPS: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    rows: gl.constexpr = gl.SliceLayout(1, s_layout)

    qo_buf, q_bar, ring = _allocate(q_desc, k_desc, v_desc, NUM_STAGES)
    q = qo_buf.reshape([BLOCK_M, HEAD_DIM])

    tiles_m = gl.cdiv(N_Q, BLOCK_M)
    group = heads_per_group(N_K, BH, L2_BYTES, HEAD_DIM * FWD_BYTES_PER_ELEMENT)
    count = 0                                     # key tiles this program has consumed
    done = 0                                      # query tiles this program has finished
    for tile in range(gl.program_id(0), tiles_m * BH, gl.num_programs(0)):
        tile_m, bh = query_tile_coords(tile, tiles_m, BH, group, CAUSAL)
        batch = bh // H
        head = bh % H
        start_m = tile_m * BLOCK_M
        n_full, n_tiles = key_tiles(start_m, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        loader = (k_desc, v_desc, batch, head)
        tma.store_wait(0)                         # the previous tile's output has left qo_buf
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma_load(q_desc, [batch, head, start_m, 0], q_bar, qo_buf)
        prefetch(ring, loader, count, n_tiles)

        offs_m = start_m + gl.arange(0, BLOCK_M, layout=rows)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, rows)
        l_i = gl.zeros([BLOCK_M], gl.float32, rows)
        acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
        mbarrier.wait(q_bar, done & 1)
        if OVERLAP:
            acc, m_i, l_i, _ = attend_overlapped(q, acc, m_i, l_i, ring, loader, count, n_full, n_tiles, offs_m,
                                                 N_K, qk_scale, (q_bar, q_bar, 0), 0, CAUSAL, True, False)
        else:
            acc, m_i, l_i = attend_simple(q, acc, m_i, l_i, ring, loader, count, n_full, n_tiles, offs_m, N_K,
                                          qk_scale, CAUSAL, True)
        count += n_tiles
        done += 1  # noqa: SIM113 (device code: no enumerate)

        finish_rows(acc, m_i, l_i, q, LSE + bh.to(gl.int64) * N_Q + offs_m, offs_m < N_Q)
        fence_async_shared()
        tma_store(o_desc, [batch, head, start_m, 0], qo_buf)
    tma.store_wait(0)


# ---------------------------------------------------------------------------- launcher
