"""Will a config run on the target GPU? Decided before anything is timed, without a GPU.

Two answers, which the tests hold to each other: :func:`model_smem_bytes`, an analytic
model of the kernel's shared memory per architecture, and :func:`compile_config`, the
exact figure from compiling the real kernel for the target on the CPU. :func:`verdict`
turns them into a :class:`BudgetResult`. ``python -m tuner.budget`` is the command line.
"""

from tuner.budget._compile import (
    CompileInfo,
    CompilePool,
    CompileTask,
    cache_dir,
    compile_config,
    compile_many,
    compile_source,
    compile_tasks,
    read_resource_usage,
    specialisation,
)
from tuner.budget._knobs import TritonFeatures, knob_restriction, triton_features
from tuner.budget._model import TMA_BARRIERS, model_smem_bytes, uses_wgmma
from tuner.budget._verdict import BudgetResult, check, check_many, smem_limit, verdict

__all__ = [
    "TMA_BARRIERS", "BudgetResult", "CompileInfo", "CompilePool", "CompileTask", "TritonFeatures", "cache_dir",
    "check", "check_many", "compile_config", "compile_many", "compile_source", "compile_tasks", "knob_restriction",
    "model_smem_bytes", "read_resource_usage", "smem_limit", "specialisation", "triton_features", "uses_wgmma",
    "verdict",
]
