"""fa2-tuner: find the fastest FlashAttention-2 forward config for a GPU.

What is searched lives in :mod:`tuner.space` and :mod:`tuner.study`; how it is searched
in :mod:`tuner.search`; how a config is run in :mod:`tuner.budget` (budget and compile),
:mod:`tuner.runner` (check and time, in an isolated worker) and :mod:`tuner.driver`
(the sweep that ties the stages together); the results in :mod:`tuner.store`, turned
into rows by :mod:`tuner.records` and into outputs by :mod:`tuner.emit` and
:mod:`tuner.dashboard`. :mod:`tuner.sweep` is the command line.
"""

from __future__ import annotations

import importlib

# Names resolve on first use (PEP 562), so that running one small module, such as the
# program Nsight Compute launches, does not import SQLAlchemy, Optuna and the compiler.
_EXPORTS = {
    "BudgetResult": "tuner.budget", "CompileInfo": "tuner.budget", "CompilePool": "tuner.budget",
    "check": "tuner.budget", "check_many": "tuner.budget", "model_smem_bytes": "tuner.budget",
    "GpuSpec": "tuner.gpus", "valid_names": "tuner.gpus", "Problem": "tuner.problem",
    "Config": "tuner.space", "SearchSpace": "tuner.space", "restriction": "tuner.space",
    "Stage": "tuner.status", "Status": "tuner.status", "Store": "tuner.store",
    "Study": "tuner.study", "StudyError": "tuner.study", "load_study": "tuner.study",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    return getattr(module, "load" if name == "load_study" else name)
