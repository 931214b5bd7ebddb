"""Without a GPU: the budget and compile stages for the target over a study's whole space.

Every config is checked against the target's budget and compiled for it on the CPU
(cached), and stored with its verdict, ``pending`` for those that fit and wait for a GPU.

The verdicts are also written as an Optuna study, ``<study>@<target>-budget`` (apart from the
study a GPU sweep searches, which they would otherwise mark as done), so that
``optuna-dashboard`` shows them. One trial per config, its parameters the config's axes:

* fits (``pending``): ``COMPLETE``; its value is the compiled shared memory over the target's
  limit per block (1.0: all of it; the study minimises it, so "best" means the most room left,
  never the fastest: nothing was timed);
* rejected by a rule, the model or the compiler's figures (``over_smem``, ``over_registers``,
  ``invalid``, ``unsupported``, ``restricted``): ``PRUNED``;
* refused by the compiler (``compile_error``): ``FAIL``.

Every trial carries ``status``, ``reason`` and ``config`` as user attributes, and ``smem_bytes``,
``registers`` and ``spill_bytes`` where the compiler said them; the study, ``smem_limit_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import Counter

import optuna
from optuna.distributions import distribution_to_json
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from tuner import budget, records, search
from tuner.formatting import headline
from tuner.pre_gpu_stages import Rejection, budget_stage, compile_plan, compile_stage
from tuner.records import RunContext
from tuner.status import Stage, Status
from tuner.store import Store


def budget_only(ctx: RunContext, store: Store, jobs: int | None = None) -> Counter:
    """Stages 1 and 2 for the target over the study's whole space, stored in one transaction.

    Returns:
        How many configs ended in each status (``pending``: fits, waits for the GPU).
    """
    study, target = ctx.study, ctx.target
    counts: Counter = Counter()
    configs = study.space.all_configs()
    rejected = {c: budget_stage(c, study, target) for c in configs}
    to_compile = [c for c in configs if rejected[c] is None]
    plans = {c: compile_plan(c, study, target, None) for c in to_compile}
    tasks = [task for c in to_compile for task in plans[c]]
    print(f"budget stage for {target.name}: {len(configs) - len(to_compile)} configs rejected by the restrictions, "
          f"the knob rules and the model; compiling {len(to_compile)} for {target.name} ({len(tasks)} compiles, "
          f"cached after)", file=sys.stderr)
    started = time.perf_counter()
    infos = iter(budget.compile_many(tasks, jobs=jobs, progress=compile_progress(target.name)))
    rows, verdicts = [], []
    for config in configs:
        rejection = rejected[config]
        if rejection is None:
            verdict = compile_stage(config, study, target, None, plans[config],
                                    [next(infos) for _ in plans[config]])
            rejection = verdict.rejection or Rejection(
                Status.PENDING, Stage.COMPILE, f"fits {target.name}; timing needs a CUDA GPU", verdict.fields)
        counts[rejection.status] += 1
        verdicts.append((config, rejection))
        if rejection.status == Status.COMPILE_ERROR:     # the whole error goes in the store
            print(f"compile_error {config.key}: {headline(rejection.reason)}", file=sys.stderr)
        rows += records.result_rows(config, ctx, rejection.status, rejection.stage, rejection.reason,
                                    rejection.fields)
    store.replace_results(rows)
    print(f"budget stage: {len(configs)} configs, {len(tasks)} compiles in {time.perf_counter() - started:.0f} s")
    unsupported = Counter(r.reason for r in rejected.values() if r is not None and r.status == Status.UNSUPPORTED)
    for reason, count in unsupported.most_common(3):       # what the target or Triton lacks, said once
        print(f"  {count} config(s) {reason}")
    optuna_view(ctx, store.url, verdicts)
    return counts


def optuna_study_name(ctx: RunContext) -> str:
    return f"{ctx.study.name}@{ctx.target.name}-budget"


def search_study_name(ctx: RunContext, present, device: str) -> str:
    """The Optuna study of a sweep that times (the budget stage's is :func:`optuna_study_name`)."""
    on = f"-on-{present.name}" if present is not None and present.name != ctx.target.name else ""
    return f"{ctx.study.name}@{ctx.target.name}{on}" + ("-interpreter" if device == "cpu" else "")


def _trial(config, rejection: Rejection, distributions: dict):
    """One config's verdict as a finished Optuna trial (the module's encoding)."""
    fields = rejection.fields
    smem, limit = fields.get("smem_bytes"), fields.get("smem_limit_bytes")
    attrs = {"status": str(rejection.status), "reason": (rejection.reason or "")[:300], "config": config.key,
             "smem_bytes": smem, "registers": fields.get("registers"), "spill_bytes": fields.get("spill_bytes")}
    attrs = {key: value for key, value in attrs.items() if value is not None}    # fewer rows: none is known
    params = {name: getattr(config, name) for name in distributions}
    if rejection.status == Status.PENDING and smem is not None and limit:
        return create_trial(params=params, distributions=distributions, value=smem / limit, user_attrs=attrs)
    state = TrialState.FAIL if rejection.status == Status.COMPILE_ERROR else TrialState.PRUNED
    return create_trial(params=params, distributions=distributions, state=state, user_attrs=attrs)


def optuna_view(ctx: RunContext, url: str, verdicts: list) -> None:
    """The verdicts as the Optuna study :func:`optuna_study_name` (the module's encoding), replacing an
    older one unless it holds these very verdicts (its ``verdicts`` attribute says which). Written in
    one transaction (:func:`_write_view`), so that budget-only sweeps of one study at once leave one
    whole copy. A view: the store's rows are the record, so a failure here is a warning, not the end."""
    name = optuna_study_name(ctx)
    digest = hashlib.sha256("\n".join(f"{c.key} {r.status} {r.reason}" for c, r in verdicts).encode()).hexdigest()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    attrs = {"value": f"compiled shared memory / {ctx.target.name}'s limit per block; not a speed: timing needs a "
                      f"CUDA GPU", "smem_limit_bytes": ctx.target.smem_per_block_optin, "verdicts": digest[:16]}
    try:
        storage = search.open_storage(url)
        distributions = search.distributions(ctx.study.space, "grid")
        _write_view(storage, name, attrs, [_trial(config, rejection, distributions) for config, rejection in verdicts])
    except (IntegrityError, OperationalError) as exc:
        if "locked" not in str(exc) and "UNIQUE" not in str(exc).upper():
            raise
        print(f"note: another sweep wrote the budget's Optuna view {name!r} at the same moment; its copy stands",
              file=sys.stderr)
    except Exception as exc:   # noqa: BLE001 (the view is optional; say why it is missing)
        print(f"warning: the budget's Optuna view {name!r} was not written: {type(exc).__name__}: "
              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}", file=sys.stderr)


def _write_view(storage, name: str, attrs: dict, trials: list) -> None:
    """The study, its attributes and its trials, replacing an older copy, in one transaction through
    Optuna's RDB models (their setters store times as Optuna does). Optuna's ``add_trials`` commits
    each trial on its own, tens of ms apiece: the backward's 15,552 configs took 8 minutes on 2 busy
    cores this way, 42 s. Two writers at once: the second's transaction fails whole (unique name)."""
    from optuna.storages._rdb import models

    value_model = models.TrialValueModel
    with Session(storage.engine) as session, session.begin():
        old = session.query(models.StudyModel).filter_by(study_name=name).one_or_none()
        if old is not None:
            if any(a.key == "verdicts" and json.loads(a.value_json) == attrs["verdicts"] for a in old.user_attributes):
                return
            session.delete(old)
            session.flush()
        study = models.StudyModel(study_name=name)
        study.directions = [models.StudyDirectionModel(direction=StudyDirection.MINIMIZE, objective=0)]
        study.user_attributes = [models.StudyUserAttributeModel(key=k, value_json=json.dumps(v)) for k, v in
                                 attrs.items()]
        for number, trial in enumerate(trials):
            row = models.TrialModel(number=number, study=study, state=trial.state,
                                    datetime_start=trial.datetime_start, datetime_complete=trial.datetime_complete)
            row.params = [models.TrialParamModel(param_name=key, distribution_json=distribution_to_json(
                trial.distributions[key]), param_value=trial.distributions[key].to_internal_repr(value))
                for key, value in trial.params.items()]
            row.user_attributes = [models.TrialUserAttributeModel(key=key, value_json=json.dumps(value))
                                   for key, value in trial.user_attrs.items()]
            if trial.values:
                stored, kind = value_model.value_to_stored_repr(trial.value)
                row.values = [value_model(objective=0, value=stored, value_type=kind)]
        session.add(study)


def compile_progress(target: str):
    """A progress callback for the compile pool: a live counter on a terminal, a line now and then in a log."""
    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rcompiling for {target}: {done}/{total}", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)
        elif done % 50 == 0 or done == total:     # a log gets a line now and then
            print(f"compiling for {target}: {done}/{total}", file=sys.stderr, flush=True)
    return progress
