"""The Triton forward (:mod:`kernel.triton.fwd`) as a tunable kernel: everything the tuner knows of it.

Read top to bottom: its config (tiles, launch options and knobs, each axis with its values,
its off value and its Optuna encoding), the restrictions no compiler beats, the budget
rules of the knobs, the shared-memory model, the compile unit (one JIT kernel), the launch,
the emitted ``triton.Config`` form and its inverse, and the names Nsight Compute sees. The
check, the SDPA baseline and the FLOPs are every attention forward's
(:class:`~tuner.kernels._attention.AttentionForward`). Adding a knob touches this file,
``kernel/triton/fwd.py`` and a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kernel.arch import has_tma, has_warp_specialization, has_wgmma
from kernel.forward import flash_attn_fwd
from kernel.triton.fwd import (
    AUTOTUNE_KEY,
    COMPILE_OPTIONS,
    JIT_FUNCTIONS,
    JIT_KERNEL,
    KNOBS,
    UNSPECIALISED,
    kernel_arguments,
)
from kernel.triton.launch import LaunchShape
from tuner.gpus import GpuSpec
from tuner.kernels._attention import AttentionForward
from tuner.kernels._base import CompileUnit
from tuner.kernels._triton import device_source, specialise, triton_config_source, triton_features
from tuner.problem import DTYPE_BYTES, Problem
from tuner.space import LOG2, ORDINAL, KernelConfig, axis

__all__ = ["KERNEL", "FwdConfig", "TritonForward"]

POWERS = (16, 32, 64, 128, 256)


@dataclass(frozen=True, order=True)
class FwdConfig(KernelConfig):
    """One point of the forward's space: tiles, launch options and knobs (``kernel.flash_attn_fwd``'s keywords).

    The knobs: ``tma`` loads keys and values through TMA descriptors; ``warp_specialize``
    splits the key loop into producer and consumer warps; ``maxnreg`` caps registers per
    thread (0: the compiler's choice); ``persistent`` is the programs per SM of a persistent
    grid (0: a program per query tile). The default space searches ``tma``, which won at every
    shape on the H200 (2-13%, docs/results/2026-11-30-h200-knobs.md) and costs nothing where
    the target lacks it (an "unsupported" verdict, no compile). The others are a study's to
    widen (as ``hopper_knobs`` does): a persistent grid added 3-4% on top of TMA at D=128 but
    lost without it; register caps won only within the noise; warp specialization compiles
    to the very binary without it (Triton 3.6, 8 warps) or not at all (4 warps).

    TPE sees tile sizes and warps as ordered exponents (16 -> 4, ..., 256 -> 8), so that it
    knows 256 lies next to 128: as categoricals, a value it has not tried yet is no more
    likely than any other, and narrow optima (256x64 with 16 warps at D=128) go unfound.
    """

    KEY_FORMAT: ClassVar[str] = "{block_m}x{block_n}_w{num_warps}_s{num_stages}"
    KEY_HELP: ClassVar[str] = "BM,BN,WARPS,STAGES, e.g. 128,64,8,3 (or 128x64_w8_s3_tma_p1)"

    block_m: int = axis(POWERS, tpe=LOG2, param="log2_block_m")
    block_n: int = axis(POWERS, tpe=LOG2, param="log2_block_n")
    num_warps: int = axis((1, 2, 4, 8, 16), tpe=LOG2, param="log2_num_warps")
    num_stages: int = axis((1, 2, 3, 4, 5, 6), tuple(range(1, 9)), tpe=ORDINAL, param="stages")
    # (always asked of Optuna: its stored studies have had these four parameters since the knobs came)
    tma: bool = axis((False, True), plain=False, tag="tma", always_asked=True)
    warp_specialize: bool = axis((False,), (False, True), plain=False, tag="ws", always_asked=True)
    maxnreg: int = axis((0,), (0, *range(24, 256, 8)), plain=0, tag="r", always_asked=True)
    persistent: int = axis((0,), tuple(range(0, 9)), plain=0, tag="p", always_asked=True)


REGISTER_LIMIT = 255      # per thread, on every target in tuner.gpus
THREADS_PER_BLOCK = 1024  # on every target in tuner.gpus
MMA_TILE = (16, 8)        # the smallest mma.sync tile one warp owns (M x N)
# Below this many warps Triton's warp-specialization pass fails on this kernel whenever the
# loop is pipelined: 39 of 39 such configs on the H200 (Triton 3.6), 36 of 36 cross-compiled
# under 3.9 ("PassManager::run failed" in NVGPUWarpSpecialization).
WS_MIN_WARPS = 8
# TMA loads add one 8-byte mbarrier per stage; where the allocator puts them depends on the
# 1024-byte alignment of the copy engine's swizzled buffers: in a gap (+8 per stage) or in a new
# 1024-byte block. The model takes the block, so for TMA it is an upper bound at most 1 KB over.
TMA_BARRIERS = 1024


def restriction(config: FwdConfig, head_dim: int) -> str | None:
    """Why the kernel cannot use this config at this head dim, or None.

    Rules, each a limit no compiler can beat:
      * threads: a block holds at most 1024 threads (32 warps);
      * registers: the fp32 score tile S [BLOCK_M, BLOCK_N] and output accumulator
        O [BLOCK_M, D] live in registers, spread over 32 * num_warps threads, and
        must fit under the 255-register limit and under ``maxnreg`` when one is set;
      * warps: each warp needs at least one 16x8 mma tile of S, or it idles.
    """
    threads = 32 * config.num_warps
    if threads > THREADS_PER_BLOCK:
        return (f"threads: {config.num_warps} warps are {threads} threads per block "
                f"> {THREADS_PER_BLOCK}; use at most {THREADS_PER_BLOCK // 32} warps")
    accumulator_regs = (config.block_m * config.block_n + config.block_m * head_dim) // threads
    if accumulator_regs > REGISTER_LIMIT:
        return (f"registers: S and O accumulators alone need {accumulator_regs} per thread "
                f"> {REGISTER_LIMIT}; use more warps or smaller tiles")
    if config.maxnreg and accumulator_regs > config.maxnreg:
        return (f"registers: S and O accumulators alone need {accumulator_regs} per thread > maxnreg "
                f"{config.maxnreg}; raise the cap or use more warps")
    mma_tiles = (config.block_m // MMA_TILE[0]) * (config.block_n // MMA_TILE[1])
    if config.num_warps > mma_tiles:
        return f"warps: {config.num_warps} warps for {mma_tiles} mma tiles of 16x8; use fewer warps"
    return None


def knob_restriction(config: FwdConfig, gpu: GpuSpec, features=None) -> str | None:
    """Why ``gpu`` (or the installed Triton, ``features``) cannot run this config's knobs, or None.

    A knob the target lacks (TMA and warp specialization below sm_90) or the Triton version
    lacks gets an ``unsupported`` verdict before anything is compiled; so Ada's sweep never
    compiles a TMA config.
    """
    features = features or triton_features()
    arch = f"sm_{gpu.capability}"
    if config.tma:
        if not has_tma(gpu.capability):
            return f"unsupported: TMA needs sm_90 or later; {arch} has none"
        if not features.tensor_descriptors:
            return (f"unsupported: TMA needs tl.make_tensor_descriptor, which Triton {features.version} lacks; "
                    f"drop tma from the space or upgrade Triton")
    if config.warp_specialize:
        if not has_warp_specialization(gpu.capability):
            return f"unsupported: warp specialization needs sm_90 or later; {arch} has none"
        if not features.warp_specialize:
            return (f"unsupported: warp specialization needs tl.range(warp_specialize=...), which Triton "
                    f"{features.version} lacks")
        if config.num_warps < WS_MIN_WARPS and config.num_stages > 1:
            return (f"unsupported: warp specialization of a pipelined loop needs {WS_MIN_WARPS} or more warps; "
                    f"with {config.num_warps}, Triton's warp-specialization pass fails (3.6 and 3.9)")
    if config.maxnreg and not features.maxnreg:
        return f"unsupported: Triton {features.version} has no maxnreg option"
    return None


def uses_wgmma(config: FwdConfig, gpu: GpuSpec) -> bool:
    """Whether Triton lowers this config's dots to Hopper's wgmma."""
    return has_wgmma(gpu.capability) and config.num_warps % 4 == 0 and config.block_m >= 64


def model_smem_bytes(config: FwdConfig, head_dim: int, dtype: str, gpu: GpuSpec) -> int:
    """Predicted dynamic shared memory, bytes: e = element bytes, Q = BLOCK_M*D*e,
    K = V = BLOCK_N*D*e, s = num_stages; only K and V are multi-buffered, Q is loaded once
    and kept in shared memory as a dot operand.

    ================================  ==========================  ================
    path                              s >= 2                      s = 1
    ================================  ==========================  ================
    mma.sync + cp.async (sm_8x, 120)  (s-1)*(K+V) + Q + C         Q + K + C
    wgmma (sm_90, sm_100)             s*(K+V) + Q                 Q + K + V
    ================================  ==========================  ================

    C = BLOCK_M*BLOCK_N*e, the P tile passed through shared memory on its way to being a dot
    operand, when num_warps >= 2 and BLOCK_M < D; else 0. Hopper takes the wgmma path only
    with num_warps a multiple of 4 and BLOCK_M >= 64; otherwise the mma.sync row. The sm_100
    row is unchecked. TMA adds :data:`TMA_BARRIERS` (sm_90 and later); everywhere else the
    tests hold the model to the compiler byte for byte.
    """
    elem = DTYPE_BYTES[dtype]
    q_bytes, kv_bytes = config.block_m * head_dim * elem, config.block_n * head_dim * elem
    barriers = TMA_BARRIERS if config.tma and has_tma(gpu.capability) else 0
    if uses_wgmma(config, gpu):
        if config.num_stages == 1:
            return q_bytes + 2 * kv_bytes + barriers
        return config.num_stages * 2 * kv_bytes + q_bytes + barriers
    scratch = 0 if config.num_warps == 1 or config.block_m >= head_dim else config.block_m * config.block_n * elem
    if config.num_stages == 1:
        return q_bytes + kv_bytes + scratch + barriers
    return (config.num_stages - 1) * 2 * kv_bytes + q_bytes + scratch + barriers


def knob_constexprs(config: FwdConfig) -> list[tuple[str, object]]:
    """The kernel's knob constexprs for ``config``, by their kernel names, in signature order."""
    return [(knob.constexpr, getattr(config, knob.name)) for knob in KNOBS if knob.constexpr]


def compile_options(config: FwdConfig) -> dict:
    """``triton.compile`` options of a config: warps, stages, the knobs that are options (maxnreg), and ours."""
    options = dict(num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS)
    plain = {a.name: a.plain for a in FwdConfig.knobs()}
    return options | {k.name: getattr(config, k.name) for k in KNOBS
                      if not k.constexpr and getattr(config, k.name) != plain[k.name]}


class TritonForward(AttentionForward):
    """``kernel.flash_attn_fwd``: FlashAttention-2's forward in Triton, with TMA, warp
    specialization, a register cap and a persistent grid as knobs."""

    name = "triton"
    config_type = FwdConfig
    autotune_key = AUTOTUNE_KEY
    description = "FA2 forward"

    def restriction(self, config: FwdConfig, head_dim: int) -> str | None:
        return restriction(config, head_dim)

    def budget_rule(self, config: FwdConfig, gpu: GpuSpec) -> str | None:
        return knob_restriction(config, gpu)

    def model_smem_bytes(self, config: FwdConfig, problem: Problem, gpu: GpuSpec) -> int:
        return model_smem_bytes(config, problem.head_dim, problem.dtype, gpu)

    def compile_units(self, config: FwdConfig, problem: Problem) -> list[CompileUnit]:
        """One unit, ``_flash_fwd_kernel``, built through the kernel's own ``kernel_arguments``
        (so ``num_stages`` multi-buffers as it will at run time); its knobs are constexprs."""
        import torch

        shape = LaunchShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
        pointers = ["*" + problem.dtype] * 4 + ["*fp32"]
        constexprs = [("HEAD_DIM", problem.head_dim), ("BLOCK_M", config.block_m), ("BLOCK_N", config.block_n),
                      ("CAUSAL", bool(problem.causal))] + knob_constexprs(config)
        signature, fixed, attrs = specialise(kernel_arguments(pointers, shape, problem.causal), constexprs,
                                             UNSPECIALISED)
        options = compile_options(config)
        dtype = problem.torch_dtype       # warmup takes dtypes for tensors
        warmup = [value for _, value in kernel_arguments((dtype,) * 4 + (torch.float32,), shape, problem.causal)]
        # "Same binary" means same timings only with the same launch: the warps, and the persistent
        # grid's programs per SM (1 and 2 compile to one cubin and launch different grids).
        return [CompileUnit(JIT_KERNEL.fn.__name__, JIT_KERNEL, signature, fixed, attrs, options, tuple(warmup),
                            dict(constexprs) | options, launch=(config.num_warps, config.persistent))]

    def device_source(self) -> str:
        return device_source(JIT_FUNCTIONS)

    def call(self, config: FwdConfig, tensors: dict, problem: Problem, allocate: bool = False):
        kwargs, t = config.as_kwargs(), tensors
        if allocate:
            return lambda: flash_attn_fwd(t["q"], t["k"], t["v"], problem.causal, **kwargs)
        return lambda: flash_attn_fwd(t["q"], t["k"], t["v"], problem.causal, **kwargs, out=t["out"], lse=t["lse"])

    def triton_config(self, config: FwdConfig) -> str:
        """Tiles and the knob constexprs set (TMA, WARP_SPEC, PERSISTENT) as kwargs, the launch
        options and the option knobs (maxnreg) after."""
        kwargs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n}
        kwargs |= {name: value for name, value in knob_constexprs(config) if value}
        options = {k.name: getattr(config, k.name) for k in KNOBS if not k.constexpr}
        return triton_config_source(kwargs, config.num_warps, config.num_stages, **options)

    def from_triton(self, triton_config) -> FwdConfig:
        kwargs = triton_config.kwargs
        knobs = {k.name: kwargs[k.constexpr] for k in KNOBS if k.constexpr and k.constexpr in kwargs}
        plain = {a.name: a.plain for a in FwdConfig.knobs()}
        knobs |= {k.name: getattr(triton_config, k.name, None) or plain[k.name] for k in KNOBS if not k.constexpr}
        return FwdConfig(kwargs["BLOCK_M"], kwargs["BLOCK_N"], triton_config.num_warps, triton_config.num_stages,
                         **knobs)

    def autotuned(self, configs: Sequence, key: Sequence[str]):
        from kernel.triton.autotune import AutotunedFlashAttention

        entry = AutotunedFlashAttention(configs, key)

        def tune(tensors: dict, problem: Problem) -> FwdConfig:
            t = tensors
            entry(t["q"], t["k"], t["v"], problem.causal, out=t["out"], lse=t["lse"])
            return self.from_triton(entry.kernel.best_config)
        return tune

    def ncu_kernels(self) -> dict[str, str]:
        return {"ours": rf"^{JIT_KERNEL.fn.__name__}\b", **self.baseline_ncu_kernels()}


KERNEL = TritonForward()
