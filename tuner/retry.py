"""``--retry-failed``: the configs a sweep stored as ``timeout`` or ``crashed``, tried again.

A config's verdict is stored once and every later run of the study reuses it (nothing is timed
twice), so a config that timed out or crashed for a cause fixed since (a ``--trial-timeout`` too
short, a driver, the environment) keeps that verdict under the same command. The sweep's summary
and its resume line say so and name the flag (:func:`advice`). Under ``--retry-failed`` the sweep
queues a trial for each such config of the study, asked before anything the sampler proposes, and
takes it through the stages as new. Its old rows stay in the store until its new rows replace them,
in one transaction (:func:`store_rows`): an interrupted retry loses nothing, and the next
``--retry-failed`` tries again what it did not reach.
"""

from __future__ import annotations

import shlex
import sys
import threading

from optuna.trial import TrialState

from tuner.samplers import config_of, fully_asked
from tuner.status import Status
from tuner.store import Result, Store

__all__ = ["FAILED", "FLAG", "advice", "failed_keys", "start", "store_rows", "unless_retrying"]

FAILED = (Status.TIMEOUT, Status.CRASHED)
FLAG = "--retry-failed"
HELP = ("run again the configs of the study stored as timeout or crashed (a re-run otherwise reuses every stored "
        "verdict), once their cause is fixed; their old rows stay until the new ones replace them. E.g. "
        "python -m tuner.sweep --gpu sm_90 --study article --trial-timeout 600 --retry-failed")


def failed_keys(rows: list[Result]) -> list[str]:
    """The configs with a row stored as timeout or crashed, in the order first stored."""
    return list(dict.fromkeys(r.config for r in rows if r.status in FAILED))


def advice(rows: list[Result], command: str) -> str | None:
    """What to run to try the failed configs again (None: there are none): the command with ``--retry-failed``."""
    keys = failed_keys(rows)
    if not keys:
        return None
    statuses = sorted({str(r.status) for r in rows if r.config in keys})
    words = shlex.split(command)
    again = command if FLAG in words else f"{command} {FLAG}"
    return (f"{len(keys)} config(s) are stored as {' or '.join(statuses)} ({', '.join(keys[:3])}"
            f"{', ...' if len(keys) > 3 else ''}); a re-run reuses those verdicts. Once the cause is fixed "
            f"(e.g. a longer --trial-timeout), try them again with:\n  {again}")


def _pending(study, config_type) -> set[str]:
    """The configs of trials waiting (queued) or running: queued once, however many retries are started."""
    pending = set()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        params = trial.system_attrs.get("fixed_params", trial.params)
        if fully_asked(params, config_type):
            pending.add(config_of(params, config_type).key)
    return pending


def start(session, known: dict[str, list[Result]], space, sampler: str) -> set[str]:
    """The failed configs taken out of ``known`` (so no stage reuses their rows) and queued in the session's
    study, each unless a trial of it is already waiting or running; says how many on stderr.

    Returns:
        The keys being retried: their new rows replace the old (:func:`store_rows`).
    """
    keys = {key for key, rows in known.items() if any(r.status in FAILED for r in rows)}
    in_space = {config.key: config for config in space.all_configs()}
    outside = sorted(keys - set(in_space))
    keys -= set(outside)
    if not keys:
        print(f"{FLAG}: no config of the study's space is stored as timeout or crashed for this target and GPU; "
              f"nothing to retry" + (f" ({len(outside)} outside the space now are left as stored)" if outside else ""),
              file=sys.stderr)
        return set()
    for key in keys:
        del known[key]
    pending = _pending(session.study, space.kernel.config_type)
    for key in sorted(keys - pending):
        session.study.enqueue_trial(space.trial_params(in_space[key], sampler == "tpe"))
    print(f"{FLAG}: {len(keys)} config(s) stored as timeout or crashed are tried again; their rows are replaced "
          f"as each is stored anew" + (f" ({len(outside)} outside the space now are left as stored)" if outside
                                       else ""), file=sys.stderr)
    return keys


def store_rows(store: Store, rows: list[Result], retrying: set[str], lock: threading.RLock) -> list[Result]:
    """Store a config's rows (:meth:`tuner.store.Store.insert_results`); a config being retried replaces its
    old rows in the same transaction (:meth:`tuner.store.Store.replace_results`). Returns the rows stored."""
    key = rows[0].config
    with lock:
        retried = key in retrying
    if not retried:
        return store.insert_results(rows)
    store.replace_results(rows)
    with lock:
        retrying.discard(key)
    return rows


def unless_retrying(rows: list[Result], retrying: set[str]) -> list[Result]:
    """Rows another sweep stored for a config, but none where they are the failed ones this sweep retries."""
    if rows and rows[0].config in retrying and any(r.status in FAILED for r in rows):
        return []
    return rows
