"""What every Gluon kernel's description shares (the warp-specialized forward and backward for Hopper):
the constants of their launches, the compile unit that counts every partition's registers, the
JIT's specialisation of their launches, and the compile unit built from a kernel's stand-in launch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.kernels._base import CompileUnit
from tuner.problem import Problem

__all__ = ["REGS", "WARPGROUP", "GluonCompileUnit", "specialisation", "ws_compile_unit"]

REGS = tuple(range(24, 257, 8))
WARPGROUP = 4             # warps of a consumer (and of the producer's warpgroup, as setmaxnreg counts)


@dataclass(frozen=True)
class GluonCompileUnit(CompileUnit):
    """A warp-specialized kernel's unit: the launch's ``num_warps`` is the default partition's (a
    consumer), but registers are held by every partition's warpgroup (the producer warp's too).

    Attributes:
        total_warps: the warps that hold registers, as ``setmaxnreg`` counts them.
    """

    total_warps: int = WARPGROUP

    @property
    def num_warps(self) -> int:
        return self.total_warps


def specialisation(problem: Problem) -> str:
    """What the JIT specialises a Gluon kernel's launch on (without compiling: this runs on any
    Triton): dtype, head dim, causal, and each length as a constant 1, a multiple of 16 or neither
    (H and BH are not specialised; batch and heads reach the kernel only through the descriptors' shapes)."""
    def kind(n: int) -> str:
        return "1" if n == 1 else "16n" if n % 16 == 0 else "n"
    return repr((problem.dtype, problem.head_dim, bool(problem.causal), kind(problem.n_q), kind(problem.n_k)))


def ws_compile_unit(gluon, problem: Problem, compile_inputs: Callable, stand_in_launch: Callable) -> GluonCompileUnit:
    """The unit of a warp-specialized kernel at ``gluon`` (its kernel-side config, with ``consumers``
    and ``persistent``), specialised for ``problem`` exactly as the JIT specialises its launch: the
    kernel's ``compile_inputs`` (the JIT's own binder on stand-in tensors of the shape) for the
    cross-compile, its ``stand_in_launch`` for ``JITFunction.warmup`` on the GPU present."""
    shape = (gluon, problem.head_dim, problem.causal, problem.n_q, problem.n_k)
    sizes = dict(batch=problem.batch, heads=problem.heads, dtype=problem.torch_dtype)
    inputs = compile_inputs(*shape, **sizes)
    _, args, constexprs, options = stand_in_launch(*shape, **sizes)
    return GluonCompileUnit(inputs.fn.fn.__name__, inputs.fn, inputs.signature, inputs.constexprs, inputs.attrs,
                            inputs.options, tuple(args), constexprs | options,
                            launch=(gluon.consumers, gluon.persistent),
                            total_warps=WARPGROUP * (1 + gluon.consumers))
