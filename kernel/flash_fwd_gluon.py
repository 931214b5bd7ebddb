"""FlashAttention forward for Hopper (sm_90) in Gluon: TMA, mbarriers and async wgmma, by hand.

Read top to bottom: the version gate, the single-partition kernel, the arguments of a launch
(:func:`launch_arguments`), the checks of a first call (:func:`checked_plan`), the plan cache
(:func:`plan_for`) and the launcher :func:`flash_attn_fwd_gluon`. Elsewhere: the launch plan,
which launches the compiled kernel without the JIT, in ``gluon_launch.py``; the
warp-specialized kernel in ``flash_fwd_gluon_ws.py``, the device code both
kernels share in ``gluon_attention.py``, the knobs (:class:`GluonConfig`), defaults and the
shared-memory model in ``gluon_config.py``, the cross-compiler in ``gluon_compile.py``.

The contract is ``kernel.flash_fwd.flash_attn_fwd``'s: ``q`` [B, H, N_q, D] or [B, N_q, D],
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

import functools
import inspect
import math
import re
from dataclasses import replace

import torch
import triton

from kernel.gluon_attention import (
    GLUON_IMPORT_ERROR,
    UNSPECIALISED,
    attend_overlapped,
    attend_simple,
    fence_async_shared,
    finish_rows,
    gl,
    jit,
    key_tiles,
    mbarrier,
    prefetch,
    tile_coords,
    tma,
)
from kernel.gluon_checks import DTYPES, check_inputs, check_outputs, tma_strides
from kernel.gluon_config import (  # noqa: F401 (the public API: the launch's description)
    GLUON_DEFAULTS,
    HEAD_DIMS,
    SMEM_LIMIT,
    STATIC_SMEM,
    VARIANTS,
    GluonConfig,
    default_gluon_config,
    gluon_configs,
    smem_bytes,
    tile_defaults,
)
from kernel.gluon_launch import GluonLaunchPlan
from kernel.launch import PLANS, cached_plan, plan_key

LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------- version gate


class GluonUnavailable(RuntimeError):
    """This Triton, or this device, cannot run the Gluon forward; the message says what is missing."""


SUPPORTED_TRITON = (3, 6)        # the one Triton release whose Gluon API the kernels are written in


def triton_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a Triton version string ("3.6.0" -> (3, 6)); default the installed Triton's."""
    found = re.match(r"(\d+)\.(\d+)", version or triton.__version__)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


@functools.cache
def gluon_api_support() -> str | None:
    """None when this Triton's Gluon has the API the kernels are written in (Triton 3.6's), else why not.

    Detected by what the modules hold, not by the version string: 3.6 names the TMA copies
    ``async_copy_global_to_shared`` / ``async_copy_shared_to_global``; later releases renamed them
    ``async_load`` / ``async_store`` (the old names raise), count ``mbarrier.expect`` per CTA and
    renamed ``thread_barrier``, which this code does not follow yet.
    """
    version = f"Triton {triton.__version__}"
    if GLUON_IMPORT_ERROR is not None:
        return f"{version} has no Gluon for Hopper ({GLUON_IMPORT_ERROR}); the kernel needs Triton 3.6"
    if triton_release() != SUPPORTED_TRITON:
        return (f"{version} is not Triton 3.6: the Gluon forward is written and checked for Triton 3.6's Gluon "
                "API only (3.9 renamed the TMA copies to tma.async_load / async_store and changed mbarrier.expect)")
    from kernel.gluon_attention import gl as language, tma as tma_module

    if hasattr(tma_module, "async_load") or not hasattr(tma_module, "async_copy_global_to_shared"):
        return (f"{version}'s Gluon API is newer than the kernel's (tma.async_load replaced "
                "tma.async_copy_global_to_shared); the kernel is written for Triton 3.6")
    warp_specialize = getattr(language, "warp_specialize", None)
    params = list(inspect.signature(warp_specialize).parameters) if warp_specialize else []
    if params[:3] != ["functions_and_args", "worker_num_warps", "worker_num_regs"]:
        return f"{version}'s gl.warp_specialize is not Triton 3.6's ({params}); the kernel is written for Triton 3.6"
    return None


def gluon_support(capability: int | None = None) -> str | None:
    """None when the Gluon forward can run, else the reason (for the tuner's ``unsupported`` verdicts).

    Args:
        capability: compute capability as an int (90 for sm_90); default the current CUDA device.
    """
    reason = gluon_api_support()
    if reason is not None:
        return reason
    if capability is None:
        if not torch.cuda.is_available():
            return "no CUDA device: the Gluon forward needs an sm_90 GPU (H100, H200)"
        major, minor = torch.cuda.get_device_capability()
        capability = 10 * major + minor
    if capability // 10 != 9:
        return f"sm_{capability} has no wgmma: the Gluon forward is for sm_90 (Hopper) only"
    return None


def supported() -> dict:
    """What the Gluon forward takes: dtypes, head dims, variants, knob values, and whether it runs here."""
    return dict(dtypes=tuple(DTYPES.values()), head_dims=HEAD_DIMS, variants=VARIANTS,
                block_m="64 or 128 (ws: also 192)", block_n=(64, 128), num_stages=(1, 2, 3, 4),
                persistent="0 or programs per SM (1-8)",
                regs="multiples of 8 in [24, 256]", unsupported_here=gluon_support())


# ---------------------------------------------------------------------------------- kernel


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
                          CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, NUM_STAGES: gl.constexpr):
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
    count = 0                                     # key tiles this program has consumed
    done = 0                                      # query tiles this program has finished
    for tile in range(gl.program_id(0), tiles_m * BH, gl.num_programs(0)):
        tile_m, bh = tile_coords(tile, tiles_m, BH, CAUSAL)
        batch = bh // H
        head = bh % H
        start_m = tile_m * BLOCK_M
        n_full, n_tiles = key_tiles(start_m, N_K, BLOCK_M, BLOCK_N, CAUSAL)
        loader = (k_desc, v_desc, batch, head)
        tma.store_wait(0)                         # the previous tile's output has left qo_buf
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [batch, head, start_m, 0], q_bar, qo_buf)
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
        tma.async_copy_shared_to_global(o_desc, [batch, head, start_m, 0], qo_buf)
    tma.store_wait(0)


# ---------------------------------------------------------------------------- launcher

_GL_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _descriptor(name: str, t4: torch.Tensor, rows: int):
    """A TMA descriptor of [B, H, N, D] tensor ``t4`` with blocks of [1, 1, rows, D]."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = [1, 1, rows, t4.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _GL_DTYPES[t4.dtype]))
    return TensorDescriptor(t4, list(t4.shape), tma_strides(name, t4), block, layout)


def launch_arguments(q4, k4, v4, o4, lse, config: GluonConfig, causal: bool, split: tuple | None = None):
    """(kernel, positional arguments, constexprs, options) of a launch on [B, H, N, D] views.

    The launcher and the cross-compiler (``gluon_compile``, with stand-in tensors) both use this.
    ``split``: the ws kernel's ``(TAIL, SPLITS, WS_O, WS_L)`` (:mod:`kernel.gluon_split`); None
    splits nothing (``TAIL`` = every tile, the workspaces stand-ins never written).
    """
    from kernel.flash_fwd_gluon_ws import _fwd_ws_kernel

    batch, heads, n_q, head_dim = q4.shape
    rows = 64 if config.variant == "ws" else config.block_m
    descriptors = (_descriptor("q", q4, rows), _descriptor("k", k4, config.block_n),
                   _descriptor("v", v4, config.block_n), _descriptor("out", o4, rows))
    scalars = (heads, batch * heads, n_q, k4.shape[2], LOG2E / math.sqrt(head_dim))
    constexprs = dict(CAUSAL=causal, OVERLAP=config.overlap, NUM_STAGES=config.num_stages)
    options = dict(num_warps=config.num_warps)
    if config.variant == "ws":
        tail, splits, ws_o, ws_l = split or (triton.cdiv(n_q, config.block_m) * batch * heads, 1, lse, lse)
        args = (*descriptors, lse, ws_o, ws_l, *scalars, tail, splits)
        constexprs.update(CONSUMERS=config.consumers, PINGPONG=config.pingpong,
                          PRODUCER_REGS=config.producer_regs, CONSUMER_REGS=config.consumer_regs,
                          SPLIT=split is not None)
        options["maxnreg"] = config.maxnreg
        return _fwd_ws_kernel, args, constexprs, options
    return _fwd_pipelined_kernel, (*descriptors, lse, *scalars), constexprs, options


def _config_from(variant, head_dim, causal, knobs: dict) -> GluonConfig:
    """The default config with the knobs a call sets; a ws query tile other than the default's
    brings that tile's own schedule and registers (:func:`tile_defaults`) under the knobs set."""
    given = {name: value for name, value in knobs.items() if value is not None}
    config = default_gluon_config(head_dim, causal, variant)
    if variant == "ws" and given.get("block_m", config.block_m) != config.block_m:
        given = tile_defaults(given["block_m"]) | given
    config = replace(config, **given)
    problems = config.problems(head_dim)
    if problems:
        raise ValueError(f"Gluon config {config}: " + "; ".join(problems))
    return config


GLUON_FORWARD = "gluon-forward"      # the kernel slot of a Gluon plan's key (kernel.launch.plan_key)
# The knobs of flash_attn_fwd_gluon after the variant, in its order (a plan's key holds their values in it).
KNOB_NAMES = ("block_m", "block_n", "num_stages", "overlap", "pingpong", "persistent", "producer_regs",
              "consumer_regs")


def checked_plan(q, k, v, causal, variant: str = "pipelined", knobs: dict | None = None, out=None, lse=None,
                 **plan_options) -> GluonLaunchPlan:
    """Every check of a first call, then its :class:`~kernel.gluon_launch.GluonLaunchPlan` (not kept:
    :func:`plan_for` keeps it). ``plan_options``: the plan's ``direct`` and ``cache_maps``."""
    reason = gluon_support(_capability_of(q))
    if reason is not None:
        raise GluonUnavailable(reason)
    check_inputs(q, k, v, causal)
    check_outputs(out, lse, q)
    config = _config_from(variant, q.shape[-1], causal, knobs or {})
    return GluonLaunchPlan(q, k, v, causal, config, out, lse, launch_arguments, **plan_options)


def plan_for(q, k, v, causal, variant: str, knobs: dict, out=None, lse=None) -> GluonLaunchPlan:
    """The plan kept for this call signature, made (and every input checked) on first sight.

    The key is :func:`kernel.launch.plan_key`'s (shapes, strides, dtypes, devices, pointer
    alignment, causal, the outputs given) with the variant and the knobs as given, their types
    too, so a call is taken or refused as it would be on first sight: ``persistent=1.0``, which the
    config check refuses, never finds the plan of ``persistent=1``.
    """
    given = (variant, *knobs.values())
    try:
        key = plan_key(GLUON_FORWARD, q, k, v, causal, (given, tuple(map(type, given))), out, lse)
        plan = PLANS.get(key)
    except (AttributeError, TypeError):       # not tensors, or an unhashable knob: the checks say what is wrong
        key = plan = None
    return plan if plan is not None else cached_plan(key, lambda: checked_plan(q, k, v, causal, variant, knobs,
                                                                                 out, lse))


def flash_attn_fwd_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, *,
                         variant: str = "pipelined", block_m: int | None = None, block_n: int | None = None,
                         num_stages: int | None = None, overlap: bool | None = None, pingpong: bool | None = None,
                         persistent: int | None = None, producer_regs: int | None = None,
                         consumer_regs: int | None = None, out: torch.Tensor | None = None,
                         lse: torch.Tensor | None = None):
    """FlashAttention forward in Gluon for Hopper: ``kernel.flash_fwd.flash_attn_fwd``'s contract.

    A launch plan per call signature (:func:`plan_for`): the first call checks everything and
    compiles through the JIT, later ones launch the compiled kernel directly.

    Args:
        q: [B, H, N_q, D] or [B, N_q, D], float16 or bfloat16, D = 64 or 128, on an sm_90 GPU.
        k, v: [B, H, N_k, D] or [B, N_k, D], like ``q``. Tensors with a non-unit last stride
            are copied; others need 16-byte aligned starts and strides (TMA).
        causal: key j is kept for query i when j <= i (top-left aligned).
        variant, block_m, block_n, num_stages, overlap, pingpong, persistent, producer_regs,
            consumer_regs: the knobs of :class:`GluonConfig`; unset ones take
            :func:`default_gluon_config` of the variant.
        out, lse: optional preallocated outputs (``out`` like ``q``, 16-byte aligned; ``lse``
            contiguous fp32 [B, H, N_q] or [B, N_q]), sharing no memory with q, k, v (``out``
            may be ``q`` itself).

    Returns:
        ``(out, lse)``, ``lse`` the natural-log logsumexp of each row of scaled scores.

    Raises:
        GluonUnavailable: this Triton or device cannot run it (see :func:`gluon_support`).
        TypeError, ValueError: a bad input or config; the message names it.
    """
    knobs = dict(zip(KNOB_NAMES, (block_m, block_n, num_stages, overlap, pingpong, persistent, producer_regs,
                                  consumer_regs)))
    return plan_for(q, k, v, causal, variant, knobs, out, lse)(q, k, v, out, lse)


def flash_attn_fwd_gluon_jit(q, k, v, causal: bool = False, *, variant: str = "pipelined", out=None, lse=None,
                             **knobs):
    """:func:`flash_attn_fwd_gluon` as it was before launch plans: every call checks everything and
    launches through the Gluon JIT. The reference of the plan's tests, and the benchmark's baseline."""
    return checked_plan(q, k, v, causal, variant, knobs, out, lse, direct=False)(q, k, v, out, lse)


def _capability_of(t) -> int | None:
    if isinstance(t, torch.Tensor) and t.device.type == "cuda":
        return _capability(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return None


@functools.cache
def _capability(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor
