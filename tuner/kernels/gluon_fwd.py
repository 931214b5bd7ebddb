"""The Gluon forward for Hopper (:mod:`kernel.gluon.fwd.launch`, ``variant="ws"``) as a tunable kernel.

Read top to bottom: its config (the query tile, which is the consumer count, the key tile, the
K/V ring's stages, and the knobs: the softmax overlapped with the PV wgmma, the two consumers'
ping-pong, a persistent grid and the register split), the restrictions no compiler beats, the
budget rules (what a target or the installed Triton lacks: an ``unsupported`` verdict, never a
compile), the shared-memory model (``kernel.gluon.fwd.config.smem_bytes``, which the compile tests
hold to Triton 3.6 byte for byte), the compile unit (cross-compiled for sm_90 as the JIT
specialises the launch, by ``kernel.gluon.fwd.compile``), the launch and the emitted form: a list of
:class:`kernel.gluon.fwd.config.GluonConfig` for :class:`kernel.gluon.fwd.autotune.AutotunedGluonForward`.
The check, the SDPA baselines and the FLOPs are every attention forward's
(:class:`~tuner.kernels._attention.AttentionForward`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from kernel.arch import is_hopper
from kernel.gluon.fwd.config import GluonConfig, smem_bytes
from tuner.gpus import GpuSpec
from tuner.kernels._attention import AttentionForward
from tuner.kernels._base import CompileUnit
from tuner.kernels._gluon import REGS, WARPGROUP, GluonCompileUnit, specialisation, ws_compile_unit
from tuner.problem import DTYPE_BYTES, Problem
from tuner.space import LOG2, ORDINAL, KernelConfig, axis

__all__ = ["KERNEL", "GluonForward", "GluonFwdConfig", "to_kernel"]



@dataclass(frozen=True, order=True)
class GluonFwdConfig(KernelConfig):
    """One point of the Gluon forward's space (``flash_attn_fwd_gluon(variant="ws")``'s keywords).

    ``block_m`` is the consumer count: 64 query rows per consumer warpgroup (64: one, 128: two,
    192: three; TPE takes it as an ordered integer, stored before 192 existed as its log2).
    ``num_warps`` is a consumer warpgroup's warps, always 4 (the tuner's grid needs the axis; the
    launch's warps follow from the consumers). ``num_stages`` is the K/V ring's depth. Knobs:
    ``overlap`` (softmax of key tile j under the PV wgmma of tile j - 1), ``pingpong`` (two
    consumers take turns at the tensor cores; needs ``overlap``), ``persistent`` (programs per
    SM, 0: one per query tile), ``producer_regs`` / ``consumer_regs`` (the setmaxnreg split).
    """

    KEY_FORMAT: ClassVar[str] = "{block_m}x{block_n}_w{num_warps}_s{num_stages}"
    KEY_HELP: ClassVar[str] = "BM,BN,WARPS,STAGES, e.g. 128,128,4,2 (or 128x128_w4_s2_ov_pp_p1)"

    block_m: int = axis((64, 128), (64, 128, 192), tpe=ORDINAL, param="block_m")
    block_n: int = axis((64, 128), tpe=LOG2, param="log2_block_n")
    num_warps: int = axis((WARPGROUP,), tpe=LOG2, param="log2_num_warps")
    num_stages: int = axis((1, 2, 3, 4), tpe=ORDINAL, param="stages")
    overlap: bool = axis((False, True), plain=False, tag="ov")
    pingpong: bool = axis((False, True), plain=False, tag="pp")
    persistent: int = axis((0, 1, 2), tuple(range(0, 9)), plain=0, tag="p")
    producer_regs: int = axis((24,), REGS, plain=24, tag="rp")
    consumer_regs: int = axis((240,), REGS, plain=240, tag="rc")


def to_kernel(config: GluonFwdConfig) -> GluonConfig:
    """The :class:`kernel.gluon.fwd.config.GluonConfig` (variant "ws") a point of the space stands for."""
    return GluonConfig("ws", config.block_m, config.block_n, config.num_stages, config.overlap, config.pingpong,
                       config.persistent, config.producer_regs, config.consumer_regs)


def from_kernel(config: GluonConfig) -> GluonFwdConfig:
    """:func:`to_kernel`'s inverse (a ws config)."""
    if config.variant != "ws":
        raise ValueError(f"the tuner's Gluon forward is variant 'ws'; got {config.variant!r}")
    return GluonFwdConfig(config.block_m, config.block_n, WARPGROUP, config.num_stages, config.overlap,
                          config.pingpong, config.persistent, config.producer_regs, config.consumer_regs)


def restriction(config: GluonFwdConfig, head_dim: int) -> str | None:
    """Why the kernel can never run this config at this head dim, or None: the launcher's own
    config checks (:meth:`GluonConfig.problems`) less shared memory, which the budget judges; and
    ping-pong only with two consumers (with one it is stored off: the same binary twice)."""
    if config.num_warps != WARPGROUP:
        return f"warps: a consumer warpgroup is {WARPGROUP} warps; got num_warps={config.num_warps}"
    if config.pingpong and config.block_m != 128:
        return "invalid: pingpong needs two consumer warpgroups (block_m 128)"
    found = [p for p in to_kernel(config).problems(head_dim) if not p.startswith("shared memory")]
    return found[0] if found else None


def budget_rule(config: GluonFwdConfig, gpu: GpuSpec) -> str | None:
    """What the target or the installed Triton lacks ("unsupported: ..."), or None. Judged before any
    compile: an Ada sweep, or one on a Triton other than 3.6, compiles nothing."""
    from kernel.gluon.api import gluon_api_support

    if not is_hopper(gpu.capability):
        return (f"unsupported: the Gluon forward needs sm_90 (Hopper: wgmma, TMA, setmaxnreg); "
                f"{gpu.name} has none of them")
    reason = gluon_api_support()
    return None if reason is None else f"unsupported: {reason}"


def compile_unit(config: GluonFwdConfig, problem: Problem) -> GluonCompileUnit:
    """``_fwd_ws_kernel`` specialised for ``problem`` exactly as the JIT specialises its launch
    (``kernel.gluon.fwd.compile.compile_inputs``: the JIT's own binder on stand-in tensors of the shape)."""
    from kernel.gluon.fwd.compile import compile_inputs, stand_in_launch

    return ws_compile_unit(to_kernel(config), problem, compile_inputs, stand_in_launch)


@lru_cache(maxsize=1)
def _device_source() -> str:
    """The Gluon kernels' device code (every module that holds some of it)."""
    import kernel.gluon.attention as shared
    import kernel.gluon.fwd.kernel_ws as ws
    import kernel.gluon.schedule as schedule

    return inspect.getsource(shared) + inspect.getsource(schedule) + inspect.getsource(ws)


class GluonForward(AttentionForward):
    """``kernel.gluon.fwd.launch.flash_attn_fwd_gluon(variant="ws")``: a TMA producer warp and one or
    two consumer warpgroups in ping-pong, for Hopper under Triton 3.6."""

    name = "gluon_fwd"
    config_type = GluonFwdConfig
    autotune_key = ("N_Q", "N_K", "HEAD_DIM", "CAUSAL")
    description = "Gluon warp-specialized forward (Hopper, Triton 3.6)"
    emitted_imports = "from kernel.gluon.fwd.config import GluonConfig"
    emitted_what = "kernel.gluon.fwd.config.GluonConfig configs (for kernel.gluon.fwd.autotune.AutotunedGluonForward)"

    def restriction(self, config: GluonFwdConfig, head_dim: int) -> str | None:
        return restriction(config, head_dim)

    def budget_rule(self, config: GluonFwdConfig, gpu: GpuSpec) -> str | None:
        return budget_rule(config, gpu)

    def model_smem_bytes(self, config: GluonFwdConfig, problem: Problem, gpu: GpuSpec) -> int:
        """Triton 3.6's allocation on sm_90 (the static 1 KB is the budget's, from the cubin)."""
        return smem_bytes(to_kernel(config), problem.head_dim, DTYPE_BYTES[problem.dtype])

    def compile_units(self, config: GluonFwdConfig, problem: Problem) -> list[CompileUnit]:
        return [compile_unit(config, problem)]

    def specialisation(self, problem: Problem) -> str:
        return specialisation(problem)

    def device_source(self) -> str:
        return _device_source()

    def call(self, config: GluonFwdConfig, tensors: dict, problem: Problem, allocate: bool = False):
        from dataclasses import asdict

        from kernel.gluon.fwd.launch import flash_attn_fwd_gluon

        knobs, t = asdict(to_kernel(config)), tensors
        if allocate:
            return lambda: flash_attn_fwd_gluon(t["q"], t["k"], t["v"], problem.causal, **knobs)
        return lambda: flash_attn_fwd_gluon(t["q"], t["k"], t["v"], problem.causal, **knobs, out=t["out"],
                                            lse=t["lse"])

    def triton_config(self, config: GluonFwdConfig) -> str:
        """The ``GluonConfig(...)`` source: the variant, tiles and switches, then a register split
        away from the default."""
        gluon = to_kernel(config)
        fields = dict(variant="ws", block_m=gluon.block_m, block_n=gluon.block_n, num_stages=gluon.num_stages,
                      overlap=gluon.overlap, pingpong=gluon.pingpong, persistent=gluon.persistent)
        fields |= {name: getattr(gluon, name) for name in ("producer_regs", "consumer_regs")
                   if getattr(gluon, name) != getattr(GluonConfig, name)}
        return "GluonConfig(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"

    def from_triton(self, triton_config) -> GluonFwdConfig:
        return from_kernel(triton_config)

    def autotuned(self, configs: Sequence, key: Sequence[str]):
        from kernel.gluon.fwd.autotune import AutotunedGluonForward

        entry = AutotunedGluonForward(configs)

        def tune(tensors: dict, problem: Problem) -> GluonFwdConfig:
            t = tensors
            entry(t["q"], t["k"], t["v"], problem.causal, out=t["out"], lse=t["lse"])
            return from_kernel(entry.chosen(t["q"], t["k"], problem.causal))
        return tune

    def ncu_kernels(self) -> dict[str, str]:
        return {"ours": r"^_fwd_ws_kernel\b", **self.baseline_ncu_kernels()}


KERNEL = GluonForward()
