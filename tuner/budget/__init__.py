"""Will a config run on the target GPU? Decided before anything is timed, without a GPU.

Two answers, which the tests hold to each other: the kernel's analytic model of its shared
memory per architecture (:meth:`tuner.kernels.TunableKernel.model_smem_bytes`), and
:func:`compile_config`, the exact figures from compiling the kernel's compile units for the
target on the CPU. :func:`verdict` turns them, with the kernel's restrictions and budget
rules, into a :class:`BudgetResult`. ``python -m tuner.budget`` is the command line.
"""

from tuner.budget._cache import CacheError, settle_caches
from tuner.budget._compile import (
    CompileInfo,
    CompileTask,
    cache_dir,
    compile_config,
    compile_log,
    compile_tasks,
    quiet_compiler_pages,
    read_resource_usage,
)
from tuner.budget._pool import MAX_JOBS, CompilePool, compile_many
from tuner.budget._verdict import BudgetResult, check, check_many, smem_limit, verdict

__all__ = [
    "MAX_JOBS",
    "BudgetResult", "CacheError", "CompileInfo", "CompilePool", "CompileTask", "cache_dir", "check", "check_many",
    "compile_config", "compile_log", "compile_many", "compile_tasks", "quiet_compiler_pages", "read_resource_usage",
    "settle_caches", "smem_limit", "verdict",
]
