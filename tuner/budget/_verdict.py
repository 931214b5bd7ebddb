"""The verdict on a config for a target: can it launch, and if not, why.

:func:`verdict` is pure: the space's restrictions first, then the shared-memory model
(no compile) or the compiler's figures (with one), then registers and spills.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from tuner.budget._compile import CompileInfo, CompilePool, CompileTask, compile_many
from tuner.budget._knobs import knob_restriction
from tuner.budget._model import model_smem_bytes
from tuner.gpus import GpuSpec
from tuner.problem import Problem
from tuner.space import Config, restriction
from tuner.status import LAUNCHABLE, Status


@dataclass(frozen=True)
class BudgetResult:
    """The verdict on one config for one target and problem."""

    config: Config
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


def verdict(config: Config, problem: Problem, gpu: GpuSpec, info: CompileInfo | None) -> BudgetResult:
    """Judge one config; ``info`` None means the model alone decides (no compile)."""
    model = model_smem_bytes(config, problem.head_dim, problem.dtype, gpu)
    limit = smem_limit(info, gpu)
    base = dict(config=config, target=gpu.name, model_bytes=model, limit_bytes=limit)
    why_not = restriction(config, problem.head_dim)
    if why_not:
        kind = Status.OVER_REGISTERS if why_not.startswith("registers") else Status.INVALID
        return BudgetResult(verdict=kind, reason=why_not, **base)
    unsupported = knob_restriction(config, gpu)
    if unsupported:
        return BudgetResult(verdict=Status.UNSUPPORTED, reason=unsupported, **base)
    if info is None:
        if model > limit:
            return BudgetResult(verdict=Status.OVER_SMEM, reason=f"model needs {model} B > {limit} B on {gpu.name}",
                                **base)
        return BudgetResult(verdict=Status.FITS, reason=f"model {model} B <= {limit} B", **base)
    compiled = dict(compiled_bytes=info.shared_bytes, registers=info.registers, spill_bytes=info.spill_bytes)
    if info.error:
        return BudgetResult(verdict=Status.COMPILE_ERROR, reason=info.error, **base, **compiled)
    if info.shared_bytes > limit:
        return BudgetResult(verdict=Status.OVER_SMEM, reason=f"needs {info.shared_bytes} B > {limit} B on {gpu.name}",
                            **base, **compiled)
    threads = 32 * config.num_warps
    if info.registers * threads > gpu.regs_per_sm:
        return BudgetResult(verdict=Status.OVER_REGISTERS, reason=(
            f"{info.registers} registers x {threads} threads = {info.registers * threads} > {gpu.regs_per_sm} "
            f"on {gpu.name}"), **base, **compiled)
    if info.spill_bytes:
        return BudgetResult(verdict=Status.SPILLS, reason=f"spills {info.spill_bytes} B per thread at "
                                                          f"{info.registers} registers", **base, **compiled)
    return BudgetResult(verdict=Status.FITS, reason=f"{info.shared_bytes} B <= {limit} B, {info.registers} registers",
                        **base, **compiled)


def check_many(configs: Iterable[Config], problem: Problem, gpu: GpuSpec, compile: bool = True,
               jobs: int | None = None, progress=None, pool: CompilePool | None = None) -> list[BudgetResult]:
    """Judge many configs; the ones the restrictions or the knob rules reject are never compiled."""
    configs = list(configs)
    to_compile = [c for c in configs if restriction(c, problem.head_dim) is None
                  and knob_restriction(c, gpu) is None] if compile else []
    tasks = [CompileTask(c, problem, gpu.capability) for c in to_compile]
    infos = dict(zip(to_compile, compile_many(tasks, jobs, progress, pool)))
    return [verdict(c, problem, gpu, infos.get(c)) for c in configs]


def check(config: Config, problem: Problem, gpu: GpuSpec, compile: bool = True) -> BudgetResult:
    """Judge one config (see :func:`check_many`)."""
    return check_many([config], problem, gpu, compile)[0]
