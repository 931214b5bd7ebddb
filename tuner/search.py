"""How the space is searched: Optuna samplers, and the ask/tell bookkeeping around them.

The sweep drives Optuna by ask and tell, in batches, so that a batch's configs compile
in parallel before they are timed one at a time. This module keeps Optuna's side of
that: which sampler, the parameter distributions, how a trial becomes a
:class:`~tuner.space.Config`, and how trials left running by a killed sweep are found
and finished on the next run (so a ``kill -9`` loses nothing and repeats nothing).
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from tuner.space import Config, SearchSpace

SAMPLERS = ("tpe", "grid", "random")
OWNER_ATTR = "owner"              # "host:pid" of the sweep that asked the trial
REJECTED_CONSTRAINT = "rejected"  # 1.0 when the config was rejected: TPE models it as infeasible, not slow
PARAMS = ("block_m", "block_n", "num_warps", "num_stages")


# TPE sees tile sizes and warps as ordered exponents (16 -> 4, ..., 256 -> 8), so that it
# knows 256 lies next to 128: as categoricals, a value it has not tried yet is no more
# likely than any other, and narrow optima (256x64 with 16 warps at D=128) go unfound.
ORDINAL = {"log2_block_m": "block_m", "log2_block_n": "block_n", "log2_num_warps": "num_warps", "stages": "num_stages"}


def distributions(space: SearchSpace, sampler: str = "grid") -> dict:
    """The parameters Optuna samples: ordinal exponents for ``tpe``, categoricals otherwise
    (the grid's axes). Both decode with :func:`config_of`."""
    if sampler == "tpe":
        out = {}
        for name, field in ORDINAL.items():
            values = sorted(getattr(space, field))
            if name.startswith("log2_"):
                exponents = [v.bit_length() - 1 for v in values]
                if any(2 ** e != v for e, v in zip(exponents, values)):
                    raise ValueError(f"{field} values must be powers of two for the tpe sampler; got {values}")
                out[name] = IntDistribution(min(exponents), max(exponents))
            else:
                out[name] = IntDistribution(min(values), max(values))
        return out
    return {name: CategoricalDistribution(list(getattr(space, name))) for name in PARAMS}


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, for ask-and-tell: its ``after_trial`` calls ``study.stop()``
    when the grid is done, which only works inside ``study.optimize``. The sweep stops
    on :func:`grid_left` instead."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def make_sampler(name: str, space: SearchSpace, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name.

    Args:
        name: ``tpe`` (constant liar, so a batch asked at once spreads out; rejected
            configs carry the :data:`REJECTED_CONSTRAINT` so it learns where they are), ``grid``
            (every config once, in random order) or ``random``.
        space: the search space (the grid's axes).
        seed: for reproducible searches.

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True, group=False,
                                          n_startup_trials=10)
    if name == "grid":
        return _GridSampler({n: list(getattr(space, n)) for n in PARAMS}, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")


def config_of(params: dict) -> Config:
    """The config a trial's parameters stand for, in either encoding."""
    if "log2_block_m" in params:
        return Config(2 ** int(params["log2_block_m"]), 2 ** int(params["log2_block_n"]),
                      2 ** int(params["log2_num_warps"]), int(params["stages"]))
    return Config(*(int(params[name]) for name in PARAMS))


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Orphan:
    """A trial a dead sweep asked for and never finished."""

    number: int
    config: Config


def orphaned_trials(study: optuna.Study) -> tuple[list[Orphan], int]:
    """Trials still RUNNING whose sweep is gone (same host, process dead).

    Returns:
        (orphans to finish now, count of RUNNING trials owned by live or remote sweeps).
    """
    host = socket.gethostname()
    orphans, foreign = [], 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner_host, _, pid = str(trial.user_attrs.get(OWNER_ATTR, ":")).rpartition(":")
        if owner_host == host and pid.isdigit() and not _pid_alive(int(pid)) and len(trial.params) == len(PARAMS):
            orphans.append(Orphan(trial.number, config_of(trial.params)))
        else:
            foreign += 1
    return orphans, foreign


def grid_size(space: SearchSpace) -> int:
    """Points of the grid sampler's product grid (restricted ones included)."""
    return math.prod(len(getattr(space, name)) for name in PARAMS)


def grid_left(study: optuna.Study, space: SearchSpace) -> int:
    """Grid points no trial has taken yet (the grid sampler would repeat one after that)."""
    taken = {t.system_attrs["grid_id"] for t in study.get_trials(deepcopy=False)
             if "grid_id" in t.system_attrs and t.state != TrialState.WAITING}
    return grid_size(space) - len(taken)


class SearchSession:
    """One sweep's side of an Optuna study in RDB storage: ask, tell and resume.

    Args:
        url: the database URL (Optuna's tables sit beside the store's).
        name: the Optuna study name.
        sampler: ``tpe``, ``grid`` or ``random``.
        space: the study's space.
        seed: the sampler's seed.
        trials: the study's total trial budget, counting earlier runs (ignored by grid).
        attrs: user attributes for the study (metric, target, GPU).
    """

    def __init__(self, url: str, name: str, sampler: str, space: SearchSpace, seed: int | None, trials: int | None,
                 attrs: dict):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space, self.grid = space, sampler == "grid"
        self.storage = optuna.storages.RDBStorage(url)
        self.study = optuna.create_study(study_name=name, storage=self.storage, direction="maximize",
                                         sampler=make_sampler(sampler, space, seed), load_if_exists=True)
        self.study_id = self.storage.get_study_id_from_name(name)
        for key, value in attrs.items():
            self.study.set_user_attr(key, value)
        self.distributions = distributions(space, sampler)
        self.total = grid_size(space) if self.grid else (trials or 100)
        self.orphans, self.foreign = orphaned_trials(self.study)
        self.me = owner()

    def finished(self) -> int:
        return sum(t.state.is_finished() for t in self.study.get_trials(deepcopy=False))

    def trial(self, number: int) -> optuna.trial.Trial:
        """A handle on a trial asked earlier (perhaps by a sweep that died)."""
        return optuna.trial.Trial(self.study,
                                  self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number))

    def ask(self) -> tuple[int, Config] | None:
        """The next trial: an orphan of a dead sweep first, then a new one; None when done."""
        if self.orphans:
            orphan, self.orphans = self.orphans[0], self.orphans[1:]
            self.trial(orphan.number).set_user_attr(OWNER_ATTR, self.me)
            return orphan.number, orphan.config
        if self.grid:
            if grid_left(self.study, self.space) <= 0:
                return None
        elif sum(t.state.is_finished() or t.state == TrialState.RUNNING
                 for t in self.study.get_trials(deepcopy=False)) >= self.total:
            return None
        trial = self.study.ask(self.distributions)
        trial.set_user_attr(OWNER_ATTR, self.me)
        return trial.number, config_of(trial.params)

    def tell(self, number: int, value: float, attrs: dict) -> None:
        """Finish a trial: its attributes, the rejected constraint (value 0), then its value."""
        trial = self.trial(number)
        for key, item in attrs.items():
            trial.set_user_attr(key, item)
        trial.set_constraint(REJECTED_CONSTRAINT, 0.0 if value > 0 else 1.0)
        self.study.tell(number, value)
