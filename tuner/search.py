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
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner.space import Config, SearchSpace

SAMPLERS = ("tpe", "grid", "random")
OWNER_ATTR = "owner"              # "host:pid" of the sweep that asked the trial
REJECTED_CONSTRAINT = "rejected"  # 1.0 when the config was rejected: TPE models it as infeasible, not slow
PARAMS = ("block_m", "block_n", "num_warps", "num_stages")


def distributions(space: SearchSpace) -> dict[str, CategoricalDistribution]:
    """Each parameter as a categorical over the space's values (the grid's axes too)."""
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


def grid_left(study: optuna.Study, space: SearchSpace) -> int:
    """Grid points no trial has taken yet (the grid sampler would repeat one after that)."""
    taken = {t.system_attrs["grid_id"] for t in study.get_trials(deepcopy=False)
             if "grid_id" in t.system_attrs and t.state != TrialState.WAITING}
    return math.prod(len(getattr(space, name)) for name in PARAMS) - len(taken)
