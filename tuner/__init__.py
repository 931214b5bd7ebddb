"""fa2-tuner: find the fastest FlashAttention-2 forward config for a GPU.

What is searched lives in :mod:`tuner.space`, the hardware in :mod:`tuner.gpus`, and
whether a config can run on a target in :mod:`tuner.budget`.
"""

from tuner._budget import BudgetResult, CompileInfo, Problem, check, check_many, model_smem_bytes
from tuner.gpus import GpuSpec, valid_names
from tuner.space import Config, SearchSpace, restriction

__all__ = [
    "BudgetResult", "CompileInfo", "Config", "GpuSpec", "Problem", "SearchSpace", "check", "check_many",
    "model_smem_bytes", "restriction", "valid_names",
]
