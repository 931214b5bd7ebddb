"""The verdict on a config for a target: can it launch, and if not, why.

:func:`verdict` is pure: the kernel's restrictions first, then its budget rules (knobs the
target or Triton lacks), then its shared-memory model (no compile) or the compiler's
figures for each of its compile units (with one), registers and spills. A config of
several units is judged unit by unit, and a rejection names the unit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from tuner.budget._compile import CompileInfo, CompileTask
from tuner.budget._pool import CompilePool, compile_many
from tuner.gpus import GpuSpec
from tuner.kernels import kernel_of
from tuner.problem import Problem
from tuner.space import LOG2
from tuner.status import LAUNCHABLE, Status


@dataclass(frozen=True)
class BudgetResult:
    """The verdict on one config for one target and problem."""

    config: Any
    target: str
    verdict: Status
    reason: str
    model_bytes: int
    limit_bytes: int
    compiled_bytes: int | None = None
    registers: int | None = None
    spill_bytes: int | None = None

    @property
    def launchable(self) -> bool:
        return self.verdict in LAUNCHABLE

    def as_row(self) -> dict:
        row = asdict(self)
        row.update(row.pop("config"))
        row["verdict"] = str(self.verdict)
        return row


def smem_limit(info: CompileInfo | None, gpu: GpuSpec) -> int:
    """Dynamic shared memory a launch may ask for: the opt-in limit less the static part."""
    static = info.static_shared_bytes if info else 0
    return gpu.smem_per_block_optin - static


def _compiled_verdict(config, gpu: GpuSpec, info: CompileInfo) -> tuple[Status, str]:
    """The compiler's figures, unit by unit: the first unit over a limit decides, named when there are several."""
    parts = info.parts()
    if info.error:
        return Status.COMPILE_ERROR, info.error
    judged = []
    for unit in parts:
        where = f"{unit.name}: " if len(parts) > 1 else ""
        limit = smem_limit(unit, gpu)
        if unit.shared_bytes > limit:
            return Status.OVER_SMEM, f"{where}needs {unit.shared_bytes} B > {limit} B on {gpu.name}"
        threads = 32 * (unit.num_warps or config.num_warps)
        if unit.registers * threads > gpu.regs_per_sm:
            return Status.OVER_REGISTERS, (f"{where}{unit.registers} registers x {threads} threads = "
                                           f"{unit.registers * threads} > {gpu.regs_per_sm} on {gpu.name}")
        judged.append((where, unit, limit))
    for where, unit, _ in judged:
        if unit.spill_bytes:
            return Status.SPILLS, f"{where}spills {unit.spill_bytes} B per thread at {unit.registers} registers"
    return Status.FITS, "; ".join(f"{where}{unit.shared_bytes} B <= {limit} B, {unit.registers} registers"
                                  for where, unit, limit in judged)


def outside_allowed(config) -> str | None:
    """The first field of the config outside the values its kernel allows (a study's space can
    only hold those; ``--config 100,64,4,3`` can), naming them; None if every field is allowed.
    The compiler is never asked: Triton's answer to a tile of 100 is a caret under the source."""
    for axis in type(config).axes():
        value = getattr(config, axis.name)
        if value not in axis.allowed:
            rule = " (powers of two only)" if axis.tpe == LOG2 else ""
            values = [str(v) for v in axis.allowed]
            shown = ", ".join(values if len(values) <= 10 else values[:3] + ["...", values[-1]])
            return f"{axis.name}={value!r} is not allowed{rule}; use one of {shown}"
    return None


def verdict(config, problem: Problem, gpu: GpuSpec, info: CompileInfo | None) -> BudgetResult:
    """Judge one config of any kernel; ``info`` None means the model alone decides (no compile)."""
    kernel = kernel_of(config)
    model = kernel.model_smem_bytes(config, problem, gpu)
    limit = smem_limit(info, gpu)
    base = dict(config=config, target=gpu.name, model_bytes=model, limit_bytes=limit)
    # A field outside the kernel's values first, named with them (the kernel's API refuses it so): its rules
    # judge only configs it could run (maxnreg 7 is invalid, not over a register cap of 7).
    why_not = outside_allowed(config) or kernel.restriction(config, problem.head_dim)
    if why_not:
        kind = Status.OVER_REGISTERS if why_not.startswith("registers") else Status.INVALID
        return BudgetResult(verdict=kind, reason=why_not, **base)
    unsupported = kernel.budget_rule(config, gpu)
    if unsupported:
        return BudgetResult(verdict=Status.UNSUPPORTED, reason=unsupported, **base)
    if info is None:
        if model > limit:
            return BudgetResult(verdict=Status.OVER_SMEM, reason=f"model needs {model} B > {limit} B on {gpu.name}",
                                **base)
        return BudgetResult(verdict=Status.FITS, reason=f"model {model} B <= {limit} B", **base)
    compiled = dict(compiled_bytes=info.shared_bytes, registers=info.registers, spill_bytes=info.spill_bytes)
    status, reason = _compiled_verdict(config, gpu, info)
    return BudgetResult(verdict=status, reason=reason, **base, **compiled)


def check_many(configs: Iterable, problem: Problem, gpu: GpuSpec, compile: bool = True,
               jobs: int | None = None, progress=None, pool: CompilePool | None = None) -> list[BudgetResult]:
    """Judge many configs; the ones the restrictions or the budget rules reject are never compiled."""
    configs = list(configs)
    to_compile = [c for c in configs if outside_allowed(c) is None
                  and kernel_of(c).restriction(c, problem.head_dim) is None
                  and kernel_of(c).budget_rule(c, gpu) is None] if compile else []
    tasks = [CompileTask(c, problem, gpu.capability) for c in to_compile]
    infos = dict(zip(to_compile, compile_many(tasks, jobs, progress, pool)))
    return [verdict(c, problem, gpu, infos.get(c)) for c in configs]


def check(config, problem: Problem, gpu: GpuSpec, compile: bool = True) -> BudgetResult:
    """Judge one config (see :func:`check_many`)."""
    return check_many([config], problem, gpu, compile)[0]
