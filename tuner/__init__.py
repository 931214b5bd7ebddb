"""fa2-tuner: find the fastest FlashAttention-2 forward config for a GPU.

What is searched lives in :mod:`tuner.space` and :mod:`tuner.study`, how it is searched
in :mod:`tuner.search`, how a config is run (compiled, checked, timed) in
:mod:`tuner.budget` and :mod:`tuner.runner`, the hardware in :mod:`tuner.gpus`, and the
results in :mod:`tuner.store`. :mod:`tuner.sweep` ties them together; :mod:`tuner.emit`
and :mod:`tuner.dashboard` turn the results into a config list and pages.
"""

from tuner._budget import BudgetResult, CompileInfo, CompilePool, Problem, check, check_many, model_smem_bytes
from tuner.gpus import GpuSpec, valid_names
from tuner.space import Config, SearchSpace, restriction
from tuner.store import Store
from tuner.study import Study, StudyError
from tuner.study import load as load_study

__all__ = [
    "BudgetResult", "CompileInfo", "CompilePool", "Config", "GpuSpec", "Problem", "SearchSpace", "Store", "Study",
    "StudyError", "check", "check_many", "load_study", "model_smem_bytes", "restriction", "valid_names",
]
