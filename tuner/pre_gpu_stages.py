"""The two stages before the GPU, as pure functions of a config of any kernel: budget and compile.

Each returns a :class:`Rejection` (the status, the stage, the reason, and the budget
fields for the rows) or lets the config through. Like the pruning in Triton's
autotuner, nothing here has side effects; :mod:`tuner.driver` acts on the answers. What
a kernel can run, and what it compiles to, is the kernel's to say (:mod:`tuner.kernels`);
this module imports neither Optuna nor a compiler.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tuner import budget
from tuner.budget import CompileInfo, CompileTask
from tuner.gpus import GpuSpec
from tuner.status import Stage, Status
from tuner.study import Study


@dataclass(frozen=True)
class Rejection:
    """Why a config stops before the GPU, and what the rows should carry."""

    status: Status
    stage: Stage
    reason: str
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Compiled:
    """The compile stage's verdict: fields for the rows, and a rejection or None."""

    fields: dict
    rejection: Rejection | None = None


def for_target(study: Study, target: GpuSpec) -> Study:
    """The study as ``target`` searches it: its space less the knob values the target (or the installed
    Triton) can never run (:meth:`tuner.space.SearchSpace.runnable_on`: no TMA on sm_89), so that no trial
    goes to them; its fingerprint stays the file's. Itself where nothing leaves."""
    space = study.space.runnable_on(target)
    if space == study.space:
        return study
    return replace(study, space=space, defined_space=study.defined_space or study.space)


def dropped(study: Study) -> list[str]:
    """``axis value`` of each value a target took out of the study's space (:func:`for_target`), for messages."""
    if study.defined_space is None:
        return []
    return [f"{name}={value}" for name, values in study.defined_space.axes for value in values
            if value not in study.space[name]]


def budget_stage(config, study: Study, target: GpuSpec) -> Rejection | None:
    """The study's space and restrictions, then the model for the target (no compile)."""
    outside = [name for name, values in study.space.axes if getattr(config, name) not in values]
    if outside:   # an ordinal sampler can step between the study's values
        return Rejection(Status.RESTRICTED, Stage.BUDGET, f"{', '.join(outside)} outside the study's space",
                         {"budget_verdict": str(Status.RESTRICTED)})
    for shape in study.variants():
        result = budget.verdict(config, shape, target, None)
        if result.verdict in (Status.OVER_REGISTERS, Status.INVALID):
            return Rejection(result.verdict, Stage.BUDGET, result.reason, {"budget_verdict": str(result.verdict)})
        why = study.restricted_by(config, shape.head_dim)
        if why:
            return Rejection(Status.RESTRICTED, Stage.BUDGET, why, {"budget_verdict": str(Status.RESTRICTED)})
        if not result.launchable:
            return Rejection(result.verdict, Stage.BUDGET, result.reason, {
                "budget_verdict": str(result.verdict), "model_smem_bytes": result.model_bytes,
                "smem_limit_bytes": result.limit_bytes})
    return None


def compile_plan(config, study: Study, target: GpuSpec, present: GpuSpec | None,
                 edges: bool = True) -> list[CompileTask]:
    """The compiles a config needs: every specialisation of the study for the target, and
    for the GPU present also the gate's own specialisation (so the worker never compiles),
    unless ``edges`` is False (the sweep compiles :func:`edge_plan` later, for contenders)."""
    tasks = budget.compile_tasks(config, study.variants(), target.capability,
                                 present.capability if present else None)
    return tasks + edge_plan(config, study, present) if edges else tasks


def edge_plan(config, study: Study, present: GpuSpec | None) -> list[CompileTask]:
    """The gate's edge shapes' compiles for the GPU present: none where they run in the study's
    binaries (a kernel that does not specialise on lengths) or where no GPU compiles."""
    if present is None:
        return []
    extra = {p for shape in study.variants() for p in study.kernel.gate_compile_problems(shape, config)}
    return [CompileTask(config, problem, present.capability, True) for problem in sorted(extra, key=repr)]


def compile_stage(config, study: Study, target: GpuSpec, present: GpuSpec | None,
                  tasks: Sequence[CompileTask], infos: Sequence[CompileInfo]) -> Compiled:
    """Judge the binaries of :func:`compile_plan`: the target's first (their figures go in
    the rows), then the GPU present's, the gate's specialisation included."""
    variants = set(study.variants())
    fields: dict = {}
    binaries = []
    for task, info in zip(tasks, infos):
        on_target = task.capability == target.capability     # else it is the GPU present's binary
        gpu = target if on_target else present
        result = budget.verdict(config, task.problem, gpu, info)
        if on_target and task.problem in variants:
            fields = dict(budget_verdict=str(result.verdict), model_smem_bytes=result.model_bytes,
                          smem_bytes=result.compiled_bytes, smem_limit_bytes=result.limit_bytes,
                          registers=result.registers, spill_bytes=result.spill_bytes)
        if task.problem in variants and (task.via_jit or present is None):    # the binary that runs
            binaries.append(info.binary)
        if not result.launchable:
            where = "" if on_target else f"on the GPU used ({gpu.name}): "
            if task.problem not in variants:
                where += "the gate's edge shapes: "
            return Compiled(fields, Rejection(result.verdict, Stage.COMPILE, where + result.reason, fields))
    fields["binary"] = "+".join(binaries) if binaries and all(binaries) else None
    return Compiled(fields)


def pool_sizes(sampler: str, workers: int, study: Study, target: GpuSpec, present: GpuSpec | None,
               jobs: int | None = None, batch: int | None = None, edges: bool = True) -> tuple[int, int]:
    """(a batch: half the trials the sweep keeps in flight, compile processes), where the user gave neither.

    Compile processes: the cores but two (the GPU worker and this process) on larger hosts. A
    batch holds about two full waves of the pool's compiles (:func:`compile_plan` of a config:
    every specialisation for the target, again for the GPU present where it is not the target,
    and the gate's unless ``edges`` is False), so that with two batches in flight
    (:func:`tuner.pipeline.stream`) the pool has work while the devices time the trials compiled
    before (a batch of four configs once gave 14 processes 24 compiles, a second wave of 10).
    TPE's batch is 4 to 16, so that it still learns from what it is told; other samplers do not
    learn: at least one config per process."""
    cores = os.cpu_count() or 1
    jobs = jobs or (max(1, cores - 2) if cores > 4 else cores)
    if batch:
        return batch, jobs
    kernel = study.kernel
    sample = kernel.config_type(*(a.default[0] for a in kernel.config_type.tiles()))
    waves = math.ceil(2 * jobs / max(1, len(compile_plan(sample, study, target, present, edges))))
    if sampler != "tpe":
        return max(2, cores - 2, 2 * workers, waves), jobs
    return max(4, 2 * workers, min(16, waves)), jobs
