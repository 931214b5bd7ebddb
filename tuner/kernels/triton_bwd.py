"""The Triton backward (:mod:`kernel.triton.bwd`) as a tunable kernel: everything the tuner knows of it.

Read top to bottom: its config (the dK/dV kernel's tiles, warps and stages, the dQ pass's own,
and the knobs: how dQ is made, TMA loads, a register cap, a persistent grid), the
restrictions no compiler beats, the budget rules of the knobs, the shared-memory model, the
compile units (a preprocess kernel, the dK/dV kernel, and the dQ pass or the dQ finish), the
launch, and the emitted form. The gate, the SDPA baseline and the FLOPs are every attention
backward's (:class:`~tuner.kernels._attention_bwd.AttentionBackward`); the ``fwd+bwd`` pass
tunes the same config inside a training step (the forward at its default config).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kernel.arch import has_tma, has_wgmma
from kernel.triton.bwd import DQ_MODES, JIT_FUNCTIONS, UNSPECIALISED, BwdConfig, BwdShape
from kernel.triton.bwd_launch import FP32_TENSORS, UNIT_ARGUMENTS, unit_constexprs
from tuner.gpus import GpuSpec
from tuner.kernels._attention_bwd import AttentionBackward, AttentionStep
from tuner.kernels._base import CompileUnit
from tuner.kernels._triton import device_source, specialise, triton_features
from tuner.problem import DTYPE_BYTES, Problem
from tuner.space import LOG2, ORDINAL, KernelConfig, axis

__all__ = ["KERNEL", "STEP", "TritonBackward", "TritonBwdConfig", "to_kernel"]

REGISTER_LIMIT, THREADS_PER_BLOCK, MMA_TILE = 255, 1024, (16, 8)


@dataclass(frozen=True, order=True)
class TritonBwdConfig(KernelConfig):
    """One point of the backward's space (:class:`kernel.BwdConfig`'s fields, ``dq_mode`` by index).

    The default space is where the H200 explorations found every winner
    (docs/results/2026-12-01-h200-backward.md): dK/dV tiles of 16-128 queries by 32-128 keys,
    dQ pass tiles of 32-128, 4 or 8 warps, 1-3 stages each, dQ by a second pass or by TMA
    reduce-add (atomics into fp32 lost everywhere there), TMA loads on and off. The register
    cap, the persistent grid and the overlapped dQ pass are a study's to widen.
    """

    KEY_FORMAT: ClassVar[str] = ("{block_m}x{block_n}_w{num_warps}_s{num_stages}"
                                 "_q{block_m_q}x{block_n_q}_w{num_warps_q}_s{num_stages_q}")
    KEY_HELP: ClassVar[str] = ("BM,BN,WARPS,STAGES,BM_Q,BN_Q,WARPS_Q,STAGES_Q, e.g. 64,64,4,2,128,64,8,3 "
                               "(or 64x64_w4_s2_q128x64_w8_s3_dq2_tma)")

    block_m: int = axis((16, 32, 64, 128), (16, 32, 64, 128, 256), tpe=LOG2, param="log2_block_m")
    block_n: int = axis((32, 64, 128), (16, 32, 64, 128, 256), tpe=LOG2, param="log2_block_n")
    num_warps: int = axis((4, 8), (1, 2, 4, 8, 16), tpe=LOG2, param="log2_num_warps")
    num_stages: int = axis((1, 2, 3), tuple(range(1, 9)), tpe=ORDINAL, param="stages")
    block_m_q: int = axis((32, 64, 128), (16, 32, 64, 128, 256), tpe=LOG2, param="log2_block_m_q")
    block_n_q: int = axis((32, 64, 128), (16, 32, 64, 128, 256), tpe=LOG2, param="log2_block_n_q")
    num_warps_q: int = axis((4, 8), (1, 2, 4, 8, 16), tpe=LOG2, param="log2_num_warps_q")
    num_stages_q: int = axis((1, 2, 3), tuple(range(1, 9)), tpe=ORDINAL, param="stages_q")
    dq_mode: int = axis((0, 2), (0, 1, 2), plain=0, tag="dq")      # index into kernel.triton.bwd.DQ_MODES
    tma: bool = axis((False, True), plain=False, tag="tma")
    maxnreg: int = axis((0,), (0, *range(24, 256, 8)), plain=0, tag="r")
    persistent: int = axis((0,), tuple(range(0, 9)), plain=0, tag="p")
    overlap: bool = axis((False,), (False, True), plain=False, tag="ov")


@dataclass(frozen=True)
class EdgeTiles:
    """The tiles the gate's edge shapes are made of: the largest of the two passes' (see
    :meth:`tuner.kernels.TunableKernel.edge_tiles`)."""

    block_m: int
    block_n: int


def to_kernel(config: TritonBwdConfig) -> BwdConfig:
    """The :class:`kernel.BwdConfig` a point of the space stands for."""
    fields = config.params()
    return BwdConfig(**fields | dict(dq_mode=DQ_MODES[config.dq_mode], maxnreg=config.maxnreg or None))


def from_kernel(config: BwdConfig) -> TritonBwdConfig:
    """:func:`to_kernel`'s inverse."""
    fields = dict(config.__dict__)
    return TritonBwdConfig(**fields | dict(dq_mode=DQ_MODES.index(config.dq_mode), maxnreg=config.maxnreg or 0))


def _register_rule(what: str, rows: int, cols: int, head_dim: int, accumulators: int, warps: int,
                   cap: int) -> str | None:
    """fp32 accumulators [rows, D] and the score tile and its gradient [rows, cols], spread over the warps."""
    threads = 32 * warps
    if threads > THREADS_PER_BLOCK:
        return f"threads: {what} {warps} warps are {threads} threads per block > {THREADS_PER_BLOCK}"
    regs = (accumulators * rows * head_dim + 2 * rows * cols) // threads
    if regs > min(REGISTER_LIMIT, cap or REGISTER_LIMIT):
        limit = f"maxnreg {cap}" if cap and cap < REGISTER_LIMIT else str(REGISTER_LIMIT)
        return (f"registers: the {what}'s accumulators and score tiles alone need {regs} per thread > {limit}; "
                f"use more warps or smaller tiles")
    tiles = (rows // MMA_TILE[0]) * (cols // MMA_TILE[1])
    if warps > tiles:
        return f"warps: the {what}'s {warps} warps for {tiles} mma tiles of 16x8; use fewer warps"
    return None


def restriction(config: TritonBwdConfig, head_dim: int) -> str | None:
    """Why the kernels cannot use this config at this head dim, or None: the dK/dV kernel holds dK
    and dV [BLOCK_N, D] and P^T, dP^T [BLOCK_N, BLOCK_M] in fp32 registers; the dQ pass (dq_mode
    "pass") dQ [BLOCK_M_Q, D] and P, dP [BLOCK_M_Q, BLOCK_N_Q]."""
    why = _register_rule("dK/dV kernel", config.block_n, config.block_m, head_dim, 2, config.num_warps,
                         config.maxnreg)
    if why is None and config.overlap and DQ_MODES[config.dq_mode] != "pass":
        why = "overlap: only the dQ pass (dq_mode 0) runs beside the dK/dV kernel; the atomic modes have none"
    if why is None and DQ_MODES[config.dq_mode] == "pass":
        why = _register_rule("dQ pass", config.block_m_q, config.block_n_q, head_dim, 1, config.num_warps_q,
                             config.maxnreg)
    return why


def knob_restriction(config: TritonBwdConfig, gpu: GpuSpec, features=None) -> str | None:
    """Why ``gpu`` (or the installed Triton) cannot run this config's knobs ("unsupported: ..."), or None."""
    import triton.language as tl

    features = features or triton_features()
    mode = DQ_MODES[config.dq_mode]
    for wanted, what in ((config.tma, "TMA loads"), (mode == "tma", "dq_mode tma (TMA reduce-add)")):
        if not wanted:
            continue
        if not has_tma(gpu.capability):
            return f"unsupported: {what} need sm_90 or later; sm_{gpu.capability} has none"
        if not features.tensor_descriptors:
            return f"unsupported: {what} need tl.make_tensor_descriptor, which Triton {features.version} lacks"
    if mode == "tma" and not hasattr(getattr(tl, "tensor_descriptor", object), "atomic_add"):
        return f"unsupported: dq_mode tma needs tensor_descriptor.atomic_add, which Triton {features.version} lacks"
    if config.maxnreg and not features.maxnreg:
        return f"unsupported: Triton {features.version} has no maxnreg option"
    return None


def model_smem_bytes(config: TritonBwdConfig, problem: Problem, gpu: GpuSpec) -> int:
    """A lower bound of the largest kernel's dynamic shared memory, bytes (the compile decides).

    wgmma (sm_90): the dK/dV kernel keeps K and V [BLOCK_N, D] and ``num_stages`` buffers of Q
    and dO [BLOCK_M, D]; the dQ pass Q and dO [BLOCK_M_Q, D] and ``num_stages_q`` buffers of K and
    V [BLOCK_N_Q, D]. The compiler adds up to 1 KB of barriers. Elsewhere (mma.sync, cp.async)
    only ``num_stages - 1`` (at least one) buffers of the looped-over tiles are counted: what the
    compiler keeps beside them depends on the layouts (measured 8-24 KB more at D=128 on sm_89).
    """
    e, d = DTYPE_BYTES[problem.dtype], problem.head_dim
    kv_loop, q_loop = 2 * config.block_m * d * e, 2 * config.block_n_q * d * e
    if has_wgmma(gpu.capability):
        kv = config.num_stages * kv_loop + 2 * config.block_n * d * e
        q = 2 * config.block_m_q * d * e + config.num_stages_q * q_loop
    else:
        kv, q = max(config.num_stages - 1, 1) * kv_loop, max(config.num_stages_q - 1, 1) * q_loop
    return max(kv, q) if DQ_MODES[config.dq_mode] == "pass" else kv


def compile_units(config: TritonBwdConfig, problem: Problem) -> list[CompileUnit]:
    """Every kernel a launch runs, built through the launcher's own argument lists
    (``kernel.triton.bwd_launch.UNIT_ARGUMENTS``), specialised as its JIT launches are."""
    import torch

    shape = BwdShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
    units = []
    for name, fn, constexprs, options in to_kernel(config).units():
        arguments, tensors = UNIT_ARGUMENTS[name]
        ordered = unit_constexprs(fn, problem.head_dim, problem.causal, constexprs)
        types = ["*fp32" if t in FP32_TENSORS else "*" + problem.dtype for t in tensors]
        signature, fixed, attrs = specialise(arguments(types, shape), ordered,
                                             UNSPECIALISED if name == "kv" else ())
        dtypes = [torch.float32 if t in FP32_TENSORS else problem.torch_dtype for t in tensors]
        warmup = [value for _, value in arguments(dtypes, shape)]
        launch = (options["num_warps"], config.persistent if name == "kv" else 0)
        units.append(CompileUnit(fn.fn.__name__, fn, signature, fixed, attrs, options, tuple(warmup),
                                 dict(ordered) | options, launch=launch))
    return units


class TritonBackward(AttentionBackward):
    """``kernel.flash_attn_bwd``: FlashAttention-2's backward in Triton, its two passes tuned apart,
    with the dQ mode, TMA loads, a register cap and a persistent grid as knobs."""

    name = "triton"
    config_type = TritonBwdConfig
    autotune_key = ("N_Q", "N_K", "HEAD_DIM", "CAUSAL")
    description = "FA2 backward"

    def edge_tiles(self, config: TritonBwdConfig) -> EdgeTiles:
        return EdgeTiles(max(config.block_m, config.block_m_q), max(config.block_n, config.block_n_q))

    def restriction(self, config: TritonBwdConfig, head_dim: int) -> str | None:
        return restriction(config, head_dim)

    def budget_rule(self, config: TritonBwdConfig, gpu: GpuSpec) -> str | None:
        return knob_restriction(config, gpu)

    def model_smem_bytes(self, config: TritonBwdConfig, problem: Problem, gpu: GpuSpec) -> int:
        return model_smem_bytes(config, problem, gpu)

    def compile_units(self, config: TritonBwdConfig, problem: Problem) -> list[CompileUnit]:
        return compile_units(config, problem)

    def device_source(self) -> str:
        return device_source(JIT_FUNCTIONS)

    def call(self, config: TritonBwdConfig, tensors: dict, problem: Problem, allocate: bool = False):
        from kernel import flash_attn_bwd

        bwd, t = to_kernel(config), tensors
        grads = {} if allocate else dict(dq=t["dq"], dk=t["dk"], dv=t["dv"])
        return lambda: flash_attn_bwd(t["dout"], t["q"], t["k"], t["v"], t["out"], t["lse"], problem.causal,
                                      config=bwd, **grads)

    def triton_config(self, config: TritonBwdConfig) -> str:
        """The ``kernel.BwdConfig(...)`` source: every tile, warp and stage field, then the knobs set."""
        fields, plain = to_kernel(config).__dict__, {a.name: a.plain for a in TritonBwdConfig.knobs()}
        shown = {k: v for k, v in fields.items() if k not in plain or getattr(config, k) != plain[k]}
        return "BwdConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    def from_triton(self, triton_config) -> TritonBwdConfig:
        return from_kernel(triton_config)

    def autotuned(self, configs: Sequence, key: Sequence[str]):
        from kernel.triton.autotune import AutotunedBackward

        entry = AutotunedBackward(configs)

        def tune(tensors: dict, problem: Problem) -> TritonBwdConfig:
            t = tensors
            entry(t["dout"], t["q"], t["k"], t["v"], t["out"], t["lse"], problem.causal)
            return from_kernel(entry.chosen(t["q"], t["k"], problem.causal))
        return tune

    def ncu_kernels(self) -> dict[str, str]:
        return {"ours": r"^bwd_kv_kernel\b", **self.baseline_ncu_kernels()}


class TritonStep(AttentionStep, TritonBackward):
    """The training step: ``kernel.flash_attn_fwd`` at its default config, then the backward tuned."""

    description = "FA2 backward in a training step"

    def call(self, config: TritonBwdConfig, tensors: dict, problem: Problem, allocate: bool = False):
        from kernel import flash_attn_bwd, flash_attn_fwd

        bwd, t = to_kernel(config), tensors

        def step():
            out, lse = flash_attn_fwd(t["q"], t["k"], t["v"], problem.causal)
            return flash_attn_bwd(t["dout"], t["q"], t["k"], t["v"], out, lse, problem.causal, config=bwd,
                                  **({} if allocate else dict(dq=t["dq"], dk=t["dk"], dv=t["dv"])))
        return step


KERNEL = TritonBackward()
STEP = TritonStep()
KERNELS = (KERNEL, STEP)
