"""fa2-tuner: find the fastest FlashAttention-2 forward config for a GPU.

What is searched lives in :mod:`tuner.space` and :mod:`tuner.study`; how it is searched
in :mod:`tuner.search`; how a config is run in :mod:`tuner.budget` (budget and compile),
:mod:`tuner.runner` (check and time, in an isolated worker) and :mod:`tuner.driver`
(the sweep that ties the stages together); the results in :mod:`tuner.store`, turned
into rows by :mod:`tuner.records` and into outputs by :mod:`tuner.emit` and
:mod:`tuner.dashboard`. :mod:`tuner.sweep` is the command line.
"""

from tuner.budget import BudgetResult, CompileInfo, CompilePool, check, check_many, model_smem_bytes
from tuner.gpus import GpuSpec, valid_names
from tuner.problem import Problem
from tuner.space import Config, SearchSpace, restriction
from tuner.status import Stage, Status
from tuner.store import Store
from tuner.study import Study, StudyError
from tuner.study import load as load_study

__all__ = [
    "BudgetResult", "CompileInfo", "CompilePool", "Config", "GpuSpec", "Problem", "SearchSpace", "Stage", "Status",
    "Store", "Study", "StudyError", "check", "check_many", "load_study", "model_smem_bytes", "restriction",
    "valid_names",
]
