"""The search's samplers: Optuna's, over the parameters a kernel's axes give it, and how a
trial's parameters become a config of the kernel (:mod:`tuner.search` drives them by ask and tell)."""

from __future__ import annotations

import math

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from tuner.space import CATEGORICAL, LOG2, SearchSpace

__all__ = ["SAMPLERS", "STAGE_ATTR", "asked_axes", "budget_refused", "config_of", "constraints", "distributions",
           "fully_asked", "make_sampler"]

SAMPLERS = ("tpe", "grid", "random")
STAGE_ATTR = "stage"      # a finished trial's user attribute: the last stage it reached ("budget": refused there)


def constraints(trial) -> tuple[float]:
    """A finished trial's constraint, from the verdict stored on it (its value and its user attributes):
    1.0 (infeasible) where a stage refused the config (the budget's verdict first among them) or nothing
    was timed (value 0), 0.0 where it was timed. Told with each trial (:meth:`tuner.search.SearchSession.tell`,
    Optuna's ``set_constraint``), TPE reads it from the trial: refused configs fall in its "bad" group as
    infeasible, not as slow, so it learns where the budget's boundary lies (Optuna 5's TPE splits on
    the trial's constraints; its ``constraints_func`` is the deprecated form of the same)."""
    refused = budget_refused(trial) or not (trial.value or 0) > 0
    return (1.0 if refused else 0.0,)


def budget_refused(trial) -> bool:
    """The trial's config was refused by the budget (the study's space and restrictions, the knob rules,
    the model): a verdict of a pure function of the config, had before anything was compiled or timed."""
    return trial.user_attrs.get(STAGE_ATTR) == "budget"


def asked_axes(space: SearchSpace) -> list[tuple[object, tuple]]:
    """(axis, values) of the axes Optuna is asked for (:meth:`tuner.space.Axis.asked`): the others
    are knobs the space leaves off, which :func:`config_of` fills in."""
    return [(axis, space[axis.name]) for axis in space.kernel.config_type.axes() if axis.asked(space[axis.name])]


def distributions(space: SearchSpace, sampler: str = "grid") -> dict:
    """The parameters Optuna samples, from the kernel's axes: under ``tpe`` each axis in its own
    encoding (ordered exponents of powers of two, ordered integers, or categoricals: the knobs,
    a few unordered choices each, learnt jointly with the tiles by TPE's multivariate model);
    categoricals of every axis otherwise (the grid's axes). Both decode with :func:`config_of`."""
    if sampler != "tpe":
        return {axis.name: CategoricalDistribution(list(values)) for axis, values in asked_axes(space)}
    out = {}
    for axis, space_values in asked_axes(space):
        values = sorted(space_values)
        if axis.tpe == CATEGORICAL:
            out[axis.tpe_param] = CategoricalDistribution(list(space_values))
        elif axis.tpe == LOG2:
            exponents = [v.bit_length() - 1 for v in values]
            if any(2 ** e != v for e, v in zip(exponents, values)):
                raise ValueError(f"{axis.name} values must be powers of two for the tpe sampler; got {values}")
            out[axis.tpe_param] = IntDistribution(min(exponents), max(exponents))
        else:   # ordered integers, stepped by their common difference (query tiles of 64, 128, 192)
            step = math.gcd(*(b - a for a, b in zip(values, values[1:]))) or 1
            if len(values) != (max(values) - min(values)) // step + 1:
                raise ValueError(f"{axis.name} values must be evenly spaced for the tpe sampler (it would ask for "
                                 f"the values between them); got {values}")
            out[axis.tpe_param] = IntDistribution(min(values), max(values), step=step)
    return out


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, for ask-and-tell: its ``after_trial`` calls ``study.stop()``
    when the grid is done, which only works inside ``study.optimize``. The sweep stops
    on :func:`grid_left` instead."""

    def after_trial(self, study, trial, state, values) -> None:
        return None

    def before_trial(self, study, trial) -> None:
        """A trial asked through ``study.ask`` takes a point as :meth:`next_point` chooses (Optuna's
        first pass would take the point numbered like the trial, held or not by a trial that
        :class:`tuner.search.SearchSession` made in one transaction)."""
        if "grid_id" in trial.system_attrs or "fixed_params" in trial.system_attrs:
            return
        point = self.next_point(study.get_trials(deepcopy=False))
        if point is None:
            return super().before_trial(study, trial)
        for key, value in point[2].items():
            study._storage.set_trial_system_attr(trial._trial_id, key, value)

    def next_point(self, trials: list) -> tuple[int, dict, dict] | None:
        """(grid id, parameters, system attributes) of a point no trial holds, chosen as the
        sampler's ``before_trial`` chooses past the first pass (at random among those neither
        finished nor running), from the study's trials already read. None where every point is
        held, or where this Optuna's sampler lacks what it is read from."""
        grids, names, space = (getattr(self, name, None) for name in ("_all_grids", "_param_names", "_search_space"))
        if grids is None or names is None or space is None:
            return None
        taken = set()           # points of trials finished or running (a waiting trial holds none)
        for t in trials:
            seen = t.system_attrs.get("search_space")
            if ("grid_id" in t.system_attrs and (t.state.is_finished() or t.state == TrialState.RUNNING)
                    and (seen == space or self._same_search_space(seen))):
                taken.add(t.system_attrs["grid_id"])
        free = sorted(set(range(len(grids))) - taken)
        if not free:
            return None
        grid_id = int(self._rng.rng.choice(free))
        return grid_id, dict(zip(names, grids[grid_id])), {"search_space": space, "grid_id": grid_id}


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
        return _GridSampler({axis.name: list(values) for axis, values in asked_axes(space)}, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")


def config_of(params: dict, config_type):
    """The config (of ``config_type``) a trial's parameters stand for, in either encoding. A knob
    missing from the parameters (a trial stored before the knob existed) is off."""
    values = {}
    for axis in config_type.axes():
        kind = type(axis.default[0])
        if axis.tpe == LOG2 and axis.tpe_param in params:
            values[axis.name] = 2 ** int(params[axis.tpe_param])
        elif f"log2_{axis.name}" in params:     # stored before the axis left the log2 encoding
            values[axis.name] = 2 ** int(params[f"log2_{axis.name}"])
        elif axis.tpe_param in params:
            values[axis.name] = kind(params[axis.tpe_param])
        elif axis.name in params:
            values[axis.name] = kind(params[axis.name])
        elif axis.knob:
            values[axis.name] = axis.plain
        else:
            raise ValueError(f"trial parameters {sorted(params)} lack {axis.name!r} (or {axis.tpe_param!r})")
    return config_type(**values)


def fully_asked(params: dict, config_type) -> bool:
    """A trial with a parameter for every tile axis (one with fewer was never fully asked;
    trials stored before a knob existed lack that knob, which is off)."""
    return len(params) >= len(config_type.tiles())
