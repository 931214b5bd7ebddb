"""The Gluon backward for Hopper (:mod:`kernel.gluon.bwd.launch`) as a tunable kernel.

Read top to bottom: its config (the query tile, the key tile, which is the consumer count, the
Q/dO ring's stages, and the knobs: the fp32 dQ staging buffers, a persistent grid and the
register split), the restrictions no compiler beats, the budget rules (what a target or the
installed Triton lacks: an ``unsupported`` verdict, never a compile), the shared-memory model
(``kernel.gluon.bwd.config.smem_bytes``, which the compile tests hold to Triton 3.6 byte for
byte), the compile unit (the Gluon kernel cross-compiled for sm_90 as the JIT specialises the
launch, by ``kernel.gluon.bwd.compile``), the launch and the emitted form: a list of
:class:`kernel.gluon.bwd.config.GluonBwdConfig`. The gradient gate, SDPA's backward as the
baselines and the FLOPs (2.5x the forward's) are every attention backward's
(:class:`~tuner.kernels._attention_bwd.AttentionBackward`).

A launch runs three kernels: the Triton backward's preprocess (delta, dQ's fp32 accumulator
zeroed), the Gluon kernel and the dQ conversion. Only the Gluon kernel depends on the config:
it is the compile unit; the other two are small Triton kernels the JIT builds at the first call.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import ClassVar

from kernel.arch import is_hopper
from kernel.gluon.bwd.config import KEYS_PER_CONSUMER, GluonBwdConfig, smem_bytes
from tuner.gpus import GpuSpec
from tuner.kernels._attention_bwd import AttentionBackward
from tuner.kernels._base import CompileUnit
from tuner.kernels._gluon import REGS, WARPGROUP, GluonCompileUnit, specialisation, ws_compile_unit
from tuner.problem import DTYPE_BYTES, Problem
from tuner.space import LOG2, ORDINAL, KernelConfig, axis

__all__ = ["KERNEL", "GluonBackward", "GluonBwdPoint", "from_kernel", "to_kernel"]

TWO_CONSUMER_HEAD_DIM = 128   # two consumers split dQ's columns: only D=128 has two chunks of 64


@dataclass(frozen=True, order=True)
class GluonBwdPoint(KernelConfig):
    """One point of the Gluon backward's space (``flash_attn_bwd_gluon``'s keywords).

    ``block_m`` is the query tile. ``block_n`` is the key tile of a program, which is the
    consumer count: 64 keys per consumer warpgroup (64: one, 128: two). Two consumers need
    D=128 (each takes 64 of dQ's columns): at D=64 the point launches the one-consumer kernel
    (:func:`to_kernel`), the same binary as ``block_n=64``, so that one study can hold both
    head dims. ``num_warps`` is a consumer warpgroup's, always 4 (the tuner's grid needs the
    axis). ``num_stages`` is the Q/dO ring's depth. Knobs: ``dq_bufs`` (fp32 dQ staging buffers;
    2: a tile's reduce runs under the next tile's), ``persistent`` (programs per SM, 0: one per
    key tile), ``producer_regs`` / ``consumer_regs`` (the setmaxnreg split).
    """

    KEY_FORMAT: ClassVar[str] = "{block_m}x{block_n}_w{num_warps}_s{num_stages}"
    KEY_HELP: ClassVar[str] = "BM,BN,WARPS,STAGES, e.g. 64,128,4,2 (or 64x64_w4_s3_dq1_p1_rc232)"

    block_m: int = axis((64, 128), tpe=LOG2, param="log2_block_m")
    block_n: int = axis((64, 128), tpe=LOG2, param="log2_block_n")
    num_warps: int = axis((WARPGROUP,), tpe=LOG2, param="log2_num_warps")
    num_stages: int = axis((2, 3), (1, 2, 3, 4), tpe=ORDINAL, param="stages")
    dq_bufs: int = axis((1, 2), (1, 2), plain=2, tag="dq")
    persistent: int = axis((0, 1), tuple(range(0, 9)), plain=0, tag="p")
    producer_regs: int = axis((24,), REGS, plain=24, tag="rp")
    consumer_regs: int = axis((232, 240), REGS, plain=240, tag="rc")


def consumers_at(config: GluonBwdPoint, head_dim: int) -> int:
    """The consumer warpgroups a launch of ``config`` has at ``head_dim`` (one below D=128)."""
    consumers = max(1, config.block_n // KEYS_PER_CONSUMER)
    return consumers if head_dim == TWO_CONSUMER_HEAD_DIM else 1


def to_kernel(config: GluonBwdPoint, head_dim: int = TWO_CONSUMER_HEAD_DIM) -> GluonBwdConfig:
    """The :class:`kernel.gluon.bwd.config.GluonBwdConfig` a point stands for at ``head_dim``."""
    return GluonBwdConfig(config.block_m, config.num_stages, config.dq_bufs, consumers_at(config, head_dim),
                          config.persistent, config.producer_regs, config.consumer_regs)


def from_kernel(config: GluonBwdConfig) -> GluonBwdPoint:
    """:func:`to_kernel`'s inverse."""
    return GluonBwdPoint(config.block_m, config.block_n, WARPGROUP, config.num_stages, config.dq_bufs,
                         config.persistent, config.producer_regs, config.consumer_regs)


def restriction(config: GluonBwdPoint, head_dim: int) -> str | None:
    """Why the kernel can never run this config at this head dim, or None: the launcher's own
    config checks (:meth:`GluonBwdConfig.problems`) less shared memory, which the budget judges."""
    if config.num_warps != WARPGROUP:
        return f"warps: a consumer warpgroup is {WARPGROUP} warps; got num_warps={config.num_warps}"
    if config.block_n % KEYS_PER_CONSUMER or config.block_n // KEYS_PER_CONSUMER not in (1, 2):
        return f"invalid: block_n is {KEYS_PER_CONSUMER} keys per consumer, 64 or 128; got {config.block_n}"
    found = [p for p in to_kernel(config, head_dim).problems(head_dim) if not p.startswith("shared memory")]
    return found[0] if found else None


def budget_rule(config: GluonBwdPoint, gpu: GpuSpec) -> str | None:
    """What the target or the installed Triton lacks ("unsupported: ..."), or None. Judged before any
    compile: an Ada sweep, or one on a Triton other than 3.6, compiles nothing."""
    from kernel.gluon.api import gluon_bwd_support

    if not is_hopper(gpu.capability):
        return (f"unsupported: the Gluon backward needs sm_90 (Hopper: wgmma, TMA, TMA reduce, setmaxnreg); "
                f"{gpu.name} has none of them")
    reason = gluon_bwd_support(gpu.capability)       # this Triton's Gluon API (3.6's) and its TMA reduce
    return None if reason is None else f"unsupported: {reason}"


def compile_unit(config: GluonBwdPoint, problem: Problem) -> GluonCompileUnit:
    """``bwd_gluon_kernel`` specialised for ``problem`` exactly as the JIT specialises its launch
    (``kernel.gluon.bwd.compile.compile_inputs``: the JIT's own binder on stand-in tensors)."""
    from kernel.gluon.bwd.compile import compile_inputs, stand_in_launch

    return ws_compile_unit(to_kernel(config, problem.head_dim), problem, compile_inputs, stand_in_launch)


@lru_cache(maxsize=1)
def _device_source() -> str:
    """The Gluon backward's device code and its launch arguments (every module that holds some)."""
    import kernel.gluon.attention as shared
    import kernel.gluon.bwd.kernel as device
    import kernel.gluon.bwd.launch as launcher
    import kernel.gluon.bwd.producer as producer
    import kernel.gluon.schedule as schedule

    return "".join(inspect.getsource(m) for m in (shared, schedule, producer, device, launcher))


class GluonBackward(AttentionBackward):
    """``kernel.gluon.bwd.launch.flash_attn_bwd_gluon``: a TMA producer warp and one or two consumer
    warpgroups holding dK and dV, dQ by TMA reduce-add into fp32, for Hopper under Triton 3.6."""

    name = "gluon_bwd"
    config_type = GluonBwdPoint
    autotune_key = ("N_Q", "N_K", "HEAD_DIM", "CAUSAL")
    description = "Gluon warp-specialized backward (Hopper, Triton 3.6)"
    emitted_imports = "from kernel.gluon.bwd.config import GluonBwdConfig"
    emitted_what = ("kernel.gluon.bwd.config.GluonBwdConfig configs (flash_attn_bwd_gluon's keywords; "
                    "consumers=2 runs at D=128 only)")

    def restriction(self, config: GluonBwdPoint, head_dim: int) -> str | None:
        return restriction(config, head_dim)

    def budget_rule(self, config: GluonBwdPoint, gpu: GpuSpec) -> str | None:
        return budget_rule(config, gpu)

    def model_smem_bytes(self, config: GluonBwdPoint, problem: Problem, gpu: GpuSpec) -> int:
        """Triton 3.6's allocation on sm_90 (the static 1 KB is the budget's, from the cubin)."""
        constants = (problem.n_q == 1) + (problem.n_k == 1)          # lengths the JIT makes constants
        return smem_bytes(to_kernel(config, problem.head_dim), problem.head_dim, DTYPE_BYTES[problem.dtype],
                          constant_lengths=constants)

    def compile_units(self, config: GluonBwdPoint, problem: Problem) -> list[CompileUnit]:
        return [compile_unit(config, problem)]

    def specialisation(self, problem: Problem) -> str:
        return specialisation(problem)

    def device_source(self) -> str:
        return _device_source()

    def call(self, config: GluonBwdPoint, tensors: dict, problem: Problem, allocate: bool = False):
        from kernel.gluon.bwd.launch import flash_attn_bwd_gluon

        knobs, t = asdict(to_kernel(config, problem.head_dim)), tensors
        grads = {} if allocate else dict(dq=t["dq"], dk=t["dk"], dv=t["dv"])
        return lambda: flash_attn_bwd_gluon(t["q"], t["k"], t["v"], t["out"], t["lse"], t["dout"], problem.causal,
                                            **knobs, **grads)

    def triton_config(self, config: GluonBwdPoint) -> str:
        """The ``GluonBwdConfig(...)`` source: every field, the consumers as at D=128."""
        fields = asdict(to_kernel(config))
        return "GluonBwdConfig(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"

    def from_triton(self, triton_config) -> GluonBwdPoint:
        if not isinstance(triton_config, GluonBwdConfig):
            raise ValueError(f"the Gluon backward's list holds GluonBwdConfig; got {type(triton_config).__name__}")
        return from_kernel(triton_config)

    def autotuned(self, configs: Sequence, key: Sequence[str]):
        """The fastest of ``configs`` per (lengths, head dim, causal, dtype), timed on its first call
        (the kernel has no autotuned entry point of its own): those it cannot run there are skipped."""
        points = [self.from_triton(c) for c in configs]
        chosen: dict[tuple, GluonBwdPoint] = {}

        def tune(tensors: dict, problem: Problem) -> GluonBwdPoint:
            import triton

            where = (problem.n_q, problem.n_k, problem.head_dim, bool(problem.causal), problem.dtype)
            if where not in chosen:
                runnable = [p for p in points if restriction(p, problem.head_dim) is None]
                if not runnable:
                    raise ValueError(f"no config of the list runs at head dim {problem.head_dim}")
                times = {p: triton.testing.do_bench(self.call(p, tensors, problem)) for p in runnable}
                chosen[where] = min(runnable, key=times.__getitem__)
            self.call(chosen[where], tensors, problem)()
            return chosen[where]
        return tune

    def ncu_kernels(self) -> dict[str, str]:
        return {"ours": r"^bwd_gluon_kernel\b", **self.baseline_ncu_kernels()}


KERNEL = GluonBackward()
