"""The results store: SQLAlchemy 2.0 ORM over any database URL (SQLite by default).

Tables (:mod:`tuner.store._tables`), all prefixed ``fa2_`` so that Optuna's own tables (its RDB storage is pointed
at the same URL) sit beside them:

* :class:`StudyRecord`: each study name once, with the fingerprint of its definition,
  so a different study that reuses the name is refused rather than mixed in.
* :class:`Run`: one invocation of the sweep: the target, the GPU actually used, versions.
* :class:`Baseline`: SDPA's flash and cuDNN times for one shape, measured in that run.
* :class:`Result`: one config on one shape of one study, with the outcome of every
  stage (budget, compile, correctness, timing) and the reason it stopped where it did.
* :class:`Finalist`: the best configs of a shape re-timed together after the search,
  in rounds; the one with the best median is the shape's winner.

Every result is committed on its own (:meth:`Store.session`), so a crash loses at most
the trial in flight. ``pct_flash`` is 100 x SDPA-flash time / our time: above 100 is
faster than SDPA. Readers open a store with ``create=False``: a mistyped path is an
error, never a new empty database; those that only read (emit, the dashboard) add
``reads_only=True``, and read an SQLite file they cannot write (a read-only mount) read-only.
"""

from tuner.store._runs import INTERRUPTED, RunHeartbeat, mark_gone_runs, pid_alive, run_gone
from tuner.store._store import (
    DEFAULT_OUT,
    DEFAULT_URL,
    SQLITE_LOCK_TIMEOUT_S,
    Store,
    StoreError,
    commit_without_fsync,
    engine_options,
    in_memory,
    mentions,
    parse_url,
    retrying,
    sqlite_file,
    storage_problem,
)
from tuner.store._tables import (
    CONFIG_KEY_LENGTH,
    TABLES,
    Base,
    Baseline,
    Finalist,
    Profile,
    Result,
    Run,
    StudyRecord,
    now,
)

__all__ = ["CONFIG_KEY_LENGTH", "DEFAULT_OUT", "DEFAULT_URL", "INTERRUPTED", "SQLITE_LOCK_TIMEOUT_S", "TABLES", "Base",
           "Baseline", "Finalist", "Profile", "Result", "Run", "RunHeartbeat", "Store", "StoreError", "StudyRecord",
           "commit_without_fsync", "engine_options", "in_memory", "mark_gone_runs", "mentions", "now", "parse_url",
           "pid_alive", "retrying", "run_gone", "sqlite_file", "storage_problem"]
