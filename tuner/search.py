"""How the space is searched: the ask/tell bookkeeping around Optuna's samplers.

The sweep drives Optuna by ask and tell, a trial at a time with a window of them in flight
(:mod:`tuner.pipeline`), so that their configs compile in parallel before each is timed. This
module keeps Optuna's side of that: a session on a study in the store (the samplers, their
parameters and how a trial becomes a config are :mod:`tuner.samplers`'), the grid's trials
written in one transaction each, and how trials left running by a killed sweep are found and
finished on the next run (so a ``kill -9`` loses nothing and repeats nothing).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner.samplers import (
    SAMPLERS,
    STAGE_ATTR,
    budget_refused,
    config_of,
    constraints,
    distributions,
    fully_asked,
    make_sampler,
)
from tuner.space import SearchSpace
from tuner.store import commit_without_fsync, engine_options, mentions, pid_alive, retrying

__all__ = ["GRACE_S", "HEARTBEAT", "HEARTBEAT_S", "OWNER_ATTR", "REJECTED_CONSTRAINT", "SAMPLERS", "STAGE_ATTR",
           "SearchSession",
           "config_of", "distributions", "grid_left", "grid_size", "make_sampler", "open_storage", "orphaned_trials",
           "owner", "owner_dead"]

OWNER_ATTR = "owner"              # "host:pid" of the sweep that asked the trial
REJECTED_CONSTRAINT = "rejected"  # 1.0 when the config was rejected: TPE models it as infeasible, not slow
# Heartbeats (seconds): every sweep records one per held trial at this interval; another
# sweep fails a trial whose heartbeat is older than the grace period and Optuna re-queues
# its config, so a host that dies mid-trial loses nothing. FA2_TUNER_HEARTBEAT="1,3,1" for tests.
# The third number: how often (s) a live sweep looks for trials that dead sweeps left.
HEARTBEAT_ENV = "FA2_TUNER_HEARTBEAT"
HEARTBEAT_S, GRACE_S, RESCAN_S = (float(x) for x in os.environ.get(HEARTBEAT_ENV, "10,60,15").split(","))
HEARTBEAT = (int(max(1, HEARTBEAT_S)), int(max(2, GRACE_S)))
_RETRY = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Orphan:
    """A trial a dead sweep asked for and never finished."""

    number: int
    config: object


def owner_dead(trial) -> bool:
    """The trial's sweep ran on this host and its process is gone."""
    owner_host, _, pid = str(trial.user_attrs.get(OWNER_ATTR, ":")).rpartition(":")
    return owner_host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def orphaned_trials(study: optuna.Study, config_type) -> tuple[list[Orphan], int]:
    """Trials still RUNNING whose sweep is gone (same host, process dead), as configs of ``config_type``.

    Returns:
        (orphans to finish now, count of RUNNING trials owned by live or remote sweeps).
    """
    orphans, foreign = [], 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if owner_dead(trial) and fully_asked(trial.params, config_type):
            orphans.append(Orphan(trial.number, config_of(trial.params, config_type)))
        else:
            foreign += 1
    return orphans, foreign


@contextlib.contextmanager
def _quiet():
    """Heartbeats outside ``study.optimize`` are what ask-and-tell needs; Optuna warns that
    they are experimental and meant for optimize, on every call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*RetryFailedTrialCallback")
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        yield


def open_storage(url: str, heartbeat: tuple[int, int] = HEARTBEAT) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on the store's URL, with heartbeats and re-queued stale trials.

    Several sweeps starting together race to create Optuna's tables (a unique constraint
    on ``alembic_version`` fires in the loser): the loser waits and tries again. SQLite
    writers wait for each other's lock rather than fail (the store's :func:`~tuner.store.engine_options`).
    """
    kwargs = engine_options(url) or {"pool_pre_ping": True}

    def storage(_attempt: int) -> optuna.storages.RDBStorage:
        with _quiet():
            opened = optuna.storages.RDBStorage(
                url, engine_kwargs=kwargs, heartbeat_interval=heartbeat[0], grace_period=heartbeat[1],
                heartbeat_stale_trial_callback=_RETRY(max_retry=3))
        commit_without_fsync(opened.engine)      # in the store's WAL file: a commit per parameter asked
        return opened

    # IntegrityError / OperationalError from the racing DDL
    return retrying(storage, mentions("UNIQUE", "unique", "already exists", "locked", "duplicate"), attempts=6,
                    pause_s=0.3)


class Heartbeat(threading.Thread):
    """Records a heartbeat for each trial this sweep holds, every interval, until stopped."""

    def __init__(self, storage: optuna.storages.RDBStorage, interval_s: float):
        super().__init__(daemon=True, name="fa2-tuner-heartbeat")
        self.storage, self.interval_s = storage, interval_s
        self.held: set[int] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def beat(self, trial_id: int) -> None:
        with self.lock:
            self.held.add(trial_id)
        self.storage.record_heartbeat(trial_id)

    def release(self, trial_id: int) -> None:
        with self.lock:
            self.held.discard(trial_id)

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            with self.lock:
                held = list(self.held)
            for trial_id in held:
                with contextlib.suppress(Exception):    # a lost connection: the next beat tries again
                    self.storage.record_heartbeat(trial_id)


def grid_size(space: SearchSpace) -> int:
    """Points of the grid sampler's product grid (restricted ones included)."""
    return space.size()


def grid_left(trials: optuna.Study | list, space: SearchSpace) -> int:
    """Grid points no trial has taken yet (the grid sampler would repeat one after that),
    from a study or from a list of its trials already read."""
    if isinstance(trials, optuna.Study):
        trials = trials.get_trials(deepcopy=False)
    taken = {t.system_attrs["grid_id"] for t in trials
             if "grid_id" in t.system_attrs and t.state != TrialState.WAITING}
    return grid_size(space) - len(taken)


class SearchSession:
    """One sweep's side of an Optuna study in RDB storage: ask, tell and resume.

    Several sweeps (threads of one, processes, hosts) may share the study. Each trial
    this one holds gets a heartbeat; trials whose sweep died are finished by the others:
    at once when it ran on this host (its process is gone), else once its heartbeat is
    stale (Optuna fails the trial and re-queues its config). Calls are thread-safe.

    Args:
        url: the database URL (Optuna's tables sit beside the store's).
        name: the Optuna study name.
        sampler: ``tpe``, ``grid`` or ``random``.
        space: the study's space.
        seed: the sampler's seed.
        trials: the study's total trial budget, counting earlier runs (ignored by grid).
        attrs: user attributes for the study (metric, target, GPU).
        warm: configs a new study tries first (:func:`tuner.records.warm_configs`; not for the grid).
    """

    def __init__(self, url: str, name: str, sampler: str, space: SearchSpace, seed: int | None, trials: int | None,
                 attrs: dict, warm: tuple = ()):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space, self.grid = space, sampler == "grid"
        self.config_type = space.kernel.config_type
        self.lock = threading.Lock()           # the orphans and the foreign count
        self.storage = open_storage(url)
        self.study = _create_study(name, self.storage, make_sampler(sampler, space, seed))
        self.study_id = self.storage.get_study_id_from_name(name)
        for key, value in attrs.items():
            if self.study.user_attrs.get(key) != value:
                self.study.set_user_attr(key, value)
        self.distributions = as_stored(self.study, distributions(space, sampler))
        if warm and not self.grid and not self.study.get_trials(deepcopy=False):
            for config in warm:     # asked before anything the sampler proposes
                self.study.enqueue_trial(space.trial_params(config, sampler == "tpe"), skip_if_exists=True)
        self.total = grid_size(space) if self.grid else (trials or 100)
        self.me = owner()
        self.ids: dict[int, int] = {}          # trial number -> id, of the trials this sweep asked
        self.heartbeat = Heartbeat(self.storage, HEARTBEAT[0])
        self.heartbeat.start()
        self._scanned = 0.0
        self.orphans, self.foreign = [], 0
        self._rescan()

    def close(self) -> None:
        self.heartbeat.stopped.set()

    def finished(self) -> int:
        return sum(t.state.is_finished() for t in self.study.get_trials(deepcopy=False))

    def trial(self, number: int) -> optuna.trial.Trial:
        """A handle on a trial asked earlier (perhaps by a sweep that died)."""
        trial_id = self.ids.get(number)
        if trial_id is None:
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        return optuna.trial.Trial(self.study, trial_id)

    def _rescan(self) -> None:
        """Fail trials with a stale heartbeat (re-queued by Optuna) and collect this host's orphans."""
        self._scanned = time.monotonic()
        with _quiet():
            optuna.storages.fail_stale_trials(self.study)
        orphans, foreign = orphaned_trials(self.study, self.config_type)
        with self.lock:
            self.foreign = foreign
            known = {o.number for o in self.orphans}
            self.orphans += [o for o in orphans if o.number not in known]

    def ask(self) -> tuple[int, object] | None:
        """The next trial: an orphan of a dead sweep first, then a re-queued or new one.

        None when the study is done. When this sweep holds no trial but others still do,
        it waits for them rather than return None: one of theirs may die and come back,
        re-queued (or as an orphan, if it ran on this host).
        """
        while True:
            answer = self._ask_once()
            if answer != "wait":
                return answer
            time.sleep(HEARTBEAT[0])

    def counted(self, trials: list) -> int:
        """The trials that count towards ``--trials``: finished or running, less those the budget refused
        (:func:`tuner.samplers.budget_refused`: told infeasible, so TPE learns the boundary, then asked again;
        at most ``total`` of them go free, so a space the budget refuses mostly still ends)."""
        spent = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING) for t in trials)
        return spent - min(self.total, sum(t.state.is_finished() and budget_refused(t) for t in trials))

    def done(self) -> bool:
        """Nothing is left to ask: no orphan, no trial waiting or running, the grid or ``--trials`` spent
        (a warm re-run of a finished study, which :class:`tuner.driver.Sweep` then starts no device for)."""
        trials = self.study.get_trials(deepcopy=False)
        if self.orphans or any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in trials):
            return False
        return grid_left(trials, self.space) <= 0 if self.grid else self.counted(trials) >= self.total

    def _next_orphan(self) -> tuple[int, object] | None:
        while True:
            with self.lock:
                if not self.orphans:
                    return None
                orphan, self.orphans = self.orphans[0], self.orphans[1:]
            trial = self.trial(orphan.number)
            try:
                for key, value in ((OWNER_ATTR, self.me), ("config", orphan.config.key)):
                    trial.set_user_attr(key, value)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue                    # another sweep took it over and finished it first
            self.ids[orphan.number] = trial._trial_id
            self.heartbeat.beat(trial._trial_id)
            return orphan.number, orphan.config

    def _ask_once(self) -> tuple[int, object] | None | str:
        if time.monotonic() - self._scanned > RESCAN_S:
            self._rescan()
        orphan = self._next_orphan()
        if orphan:
            return orphan
        trials = self.study.get_trials(deepcopy=False)      # one read decides whether the study is done
        waiting = any(t.state == TrialState.WAITING for t in trials)
        if not waiting and (grid_left(trials, self.space) <= 0 if self.grid else self.counted(trials) >= self.total):
            others = [t for t in trials if t.state == TrialState.RUNNING and t._trial_id not in self.heartbeat.held]
            if not others or self.heartbeat.held:     # never wait while holding trials others may wait on
                return None
            self._rescan()
            return "wait" if not self.orphans else self._ask_once()
        point = self.study.sampler.next_point(trials) if self.grid and not waiting else None
        if point is not None:       # the grid's trial in one transaction, where study.ask makes one per parameter
            grid_id, params, system_attrs = point
            config = config_of(params, self.config_type)
            trial_id = self.storage.create_new_trial(self.study_id, optuna.trial.create_trial(
                state=TrialState.RUNNING, params=params, distributions=self.distributions, system_attrs=system_attrs,
                user_attrs={OWNER_ATTR: self.me, "config": config.key}))
            number = self.storage.get_trial_number_from_id(trial_id)
        else:
            with _quiet():
                trial = self.study.ask(self.distributions)
            trial_id, number, config = trial._trial_id, trial.number, config_of(trial.params, self.config_type)
            for key, value in ((OWNER_ATTR, self.me), ("config", config.key)):
                trial.set_user_attr(key, value)
        self.ids[number] = trial_id
        self.heartbeat.beat(trial_id)
        return number, config

    def leader(self, number: int, config) -> int | None:
        """The lowest-numbered other RUNNING trial of the same config, if it comes before
        ``number``: that trial times the config, and this one waits for its rows."""
        running = [t.number for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                   if t.number < number and fully_asked(t.params, self.config_type)
                   and config_of(t.params, self.config_type) == config]
        return min(running) if running else None

    def alive(self, number: int) -> bool:
        """The trial is RUNNING and its sweep is not known dead (on this host: its process is
        gone; elsewhere, a stale heartbeat makes some sweep fail it)."""
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        trial = self.storage.get_trial(trial_id)
        return trial.state == TrialState.RUNNING and not owner_dead(trial)

    def tell(self, number: int, value: float, attrs: dict) -> bool:
        """Finish a trial: its attributes, the rejected constraint (:func:`tuner.samplers.constraints`), then its value.

        Returns:
            False if the trial was already finished elsewhere (another sweep judged this
            one dead and re-queued its config): the rows are stored all the same.
        """
        trial = self.trial(number)
        self.ids.pop(number, None)
        self.heartbeat.release(trial._trial_id)
        try:       # a trial finished elsewhere refuses the first attribute (UpdateFinishedTrialError)
            for key, item in attrs.items():
                trial.set_user_attr(key, item)
            trial.set_constraint(REJECTED_CONSTRAINT, constraints(SimpleNamespace(value=value, user_attrs=attrs))[0])
            self.study.tell(number, value)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
            return False
        return True


def as_stored(study: optuna.Study, wanted: dict) -> dict:
    """The distributions to ask with: ``wanted``, but a categorical's stored distribution where the study's
    trials asked it over more choices (a space narrowed since, as a target narrows it: ``tma`` [false] on
    sm_89, asked [false, true] by a sweep before; Optuna refuses a categorical's choices changing under a
    stored study). The sampler's other choices are refused by the budget, as outside the study's space."""
    stored: dict = {}
    for trial in study.get_trials(deepcopy=False):
        for name, distribution in trial.distributions.items():
            stored.setdefault(name, distribution)
    out = {}
    for name, distribution in wanted.items():
        old = stored.get(name, distribution)
        wider = (isinstance(old, CategoricalDistribution) and isinstance(distribution, CategoricalDistribution)
                 and set(distribution.choices) < set(old.choices))
        out[name] = old if wider else distribution
    return out


def _create_study(name: str, storage, sampler) -> optuna.Study:
    """``create_study(load_if_exists=True)``, when another sweep may be creating it at this moment."""
    return retrying(lambda _attempt: optuna.create_study(study_name=name, storage=storage, direction="maximize",
                                                         sampler=sampler, load_if_exists=True),
                    mentions("UNIQUE", "unique", "already exists", "duplicate"))
