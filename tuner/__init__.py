"""fa2-tuner: find the fastest configs of a FlashAttention kernel for a GPU.

What is tuned is a kernel of :mod:`tuner.kernels` (the Triton forward first), each saying
once what the tuner needs to know of it; what is searched lives in :mod:`tuner.space` and
:mod:`tuner.study`; how it is searched in :mod:`tuner.search`; how a config is run in
:mod:`tuner.budget` (budget and compile), :mod:`tuner.pre_gpu_stages`, :mod:`tuner.runner`
(check and time, in an isolated worker) and :mod:`tuner.driver` (the sweep that ties the
stages together); the results in :mod:`tuner.store`, turned into rows by
:mod:`tuner.records`, into winners by :mod:`tuner.winners` and into outputs by
:mod:`tuner.emit`, :mod:`tuner.dashboard` and :mod:`tuner.profile`. :mod:`tuner.commands`
is the ``fa2-tuner`` command line; :mod:`tuner.sweep` the sweep's.
"""

from __future__ import annotations

import importlib
import time

# When this package was first imported: the first thing `python -m tuner.<command>` runs after the
# interpreter's own start (tens of ms), so the sweep's process line can add up the whole process.
STARTED = time.perf_counter()

# Names resolve on first use (PEP 562), so that running one small module, such as the
# program Nsight Compute launches, does not import SQLAlchemy, Optuna and the compiler.
_EXPORTS = {
    "BudgetResult": "tuner.budget", "CompileInfo": "tuner.budget", "CompilePool": "tuner.budget",
    "check": "tuner.budget", "check_many": "tuner.budget",
    "GpuSpec": "tuner.gpus", "valid_names": "tuner.gpus", "Problem": "tuner.problem",
    "KernelConfig": "tuner.space", "SearchSpace": "tuner.space",
    "TunableKernel": "tuner.kernels", "get_kernel": "tuner.kernels", "FwdConfig": "tuner.kernels.triton_fwd",
    "Stage": "tuner.status", "Status": "tuner.status", "Store": "tuner.store",
    "Study": "tuner.study", "StudyError": "tuner.study", "load_study": "tuner.study",
}
_RENAMED = {"load_study": "load", "get_kernel": "get"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    return getattr(module, _RENAMED.get(name, name))
