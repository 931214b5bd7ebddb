"""The :class:`Store`: opening a database URL as a store, and reading and writing its rows."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import create_engine, delete, inspect, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from tuner.store._sqlite import cannot_read, commit_without_fsync, read_only_engine, stale_schema, unwritable_file
from tuner.store._tables import CONFIG_KEY_LENGTH, TABLES, Base, Finalist, Profile, Result, Run, StudyRecord, now

T = TypeVar("T")
DEFAULT_OUT = "fa2-out"
DEFAULT_URL = f"sqlite:///{DEFAULT_OUT}/tuning.db"
# SQLite writers (ours, Optuna's, other sweeps') wait this long for each other's lock rather than fail.
SQLITE_LOCK_TIMEOUT_S = 60
# An Optuna RDB storage has these (among others): a database of Optuna's alone is welcome.
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})


class StoreError(RuntimeError):
    """The database cannot be used as a store; the message says why and what to do."""


def parse_url(url: str) -> URL:
    """A database URL, parsed once, whose driver SQLAlchemy can load.

    Raises:
        StoreError: not a URL, or no driver for it; the message gives an example of one.
    """
    try:
        parsed = make_url(url)
        parsed.get_backend_name()
    except Exception as exc:
        raise StoreError(f"{url!r} is not a database URL ({type(exc).__name__}); e.g. {DEFAULT_URL}") from None
    if parsed.get_backend_name() == "sqlite" and (parsed.database or "").startswith("~"):
        raise StoreError(f"{url!r}: SQLite does not expand '~' (it would make a folder named '~' here); write the "
                         f"path in full, e.g. sqlite:///{os.path.expanduser(parsed.database)}")
    try:
        parsed.get_dialect()
    except Exception as exc:
        raise StoreError(f"{url!r}: SQLAlchemy cannot load a driver for {parsed.drivername!r} "
                         f"({type(exc).__name__}); e.g. {DEFAULT_URL} or postgresql+psycopg://host/db "
                         f"with psycopg installed") from None
    return parsed


def storage_problem(url: str, create: bool = True, reads_only: bool = False) -> str | None:
    """Why :class:`Store` would refuse ``url`` before connecting, or None; opens and makes nothing (a command asks
    before its work): a reader's SQLite file missing, a writer's it cannot write. StoreError: not a URL."""
    parsed = parse_url(url)
    file = parsed.database if parsed.get_backend_name() == "sqlite" and not in_memory(parsed) else None
    if file and not create and not Path(file).is_file():
        return f"{url}: no such database file {file!r}"
    why = unwritable_file(file) if file and Path(file).is_file() and (create or not reads_only) else None
    return f"{url}: {file!r} {why}; copy it to a folder you can write and give that --storage" if why else None


def in_memory(parsed: URL) -> bool:
    """An SQLite database that lives in memory (``:memory:``, none named, or a URI with ``mode=memory`` or
    ``file::memory:``): everything in it is lost when the process ends."""
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    return (database in ("", ":memory:") or database.startswith("file::memory:")
            or parsed.query.get("mode") == "memory" or "mode=memory" in database)


def sqlite_file(parsed: URL) -> Path | None:
    """The file of an SQLite database on disk (resolved); None for another database, one in memory, or an SQLite
    URI (``file:...``)."""
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or in_memory(parsed) or database.startswith("file:"):
        return None
    return Path(database).resolve()


def engine_options(url: str | URL) -> dict:
    """``create_engine`` keywords for a URL, for our engine and Optuna's alike (SQLite's lock timeout)."""
    parsed = make_url(url) if isinstance(url, str) else url
    return {"connect_args": {"timeout": SQLITE_LOCK_TIMEOUT_S}} if parsed.get_backend_name() == "sqlite" else {}


def _add_missing_columns(connection) -> None:
    """Bring a database made by an older fa2-tuner up to date: columns added since are
    nullable, so ``ALTER TABLE ... ADD COLUMN`` keeps every stored row; config keys that
    were ``VARCHAR(32)`` are widened where the database enforces lengths (PostgreSQL;
    SQLite does not). (Tables added since are made by ``create_all``, which runs first.)"""
    inspector = inspect(connection)
    for table in Base.metadata.sorted_tables:
        present = {column["name"]: column for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present and column.nullable:
                kind = column.type.compile(dialect=connection.dialect)
                connection.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")
        stored = present.get("config")
        length = getattr(stored["type"], "length", None) if stored else None
        if connection.dialect.name == "postgresql" and length is not None and length < CONFIG_KEY_LENGTH:
            connection.exec_driver_sql(f"ALTER TABLE {table.name} ALTER COLUMN config TYPE "
                                       f"VARCHAR({CONFIG_KEY_LENGTH})")


def retrying(action: Callable[[int], T], transient: Callable[[Exception], bool], attempts: int = 5,
             pause_s: float = 0.2) -> T:
    """``action(attempt)``, run again after a growing pause while it raises an error that
    ``transient`` accepts (another process won a race), at most ``attempts`` times."""
    for attempt in range(attempts):
        try:
            return action(attempt)
        except Exception as exc:
            if attempt == attempts - 1 or not transient(exc):
                raise
            time.sleep(pause_s * (attempt + 1))
    raise AssertionError("unreachable")


def mentions(*words: str) -> Callable[[Exception], bool]:
    """A ``transient`` test for :func:`retrying`: the error's text holds one of ``words``."""
    return lambda exc: any(word in str(exc) for word in words)


def _transient(exc: Exception) -> bool:
    """A clash with another writer that redoing the transaction resolves."""
    if isinstance(exc, IntegrityError):
        return True
    text = str(exc).lower()
    return isinstance(exc, OperationalError) and any(
        word in text for word in ("deadlock", "could not serialize", "database is locked"))


def _check_sqlite(engine, url=None) -> None:
    """An existing SQLite file, read through before anything is written to it: a header that
    opens over pages that are garbage ("database disk image is malformed" in the middle of a
    sweep) is refused now, with SQLite's first complaint. Reads only; ``quick_check`` is linear
    in the file's size (milliseconds for a sweep's store)."""
    with engine.connect() as connection:
        found = [row[0] for row in connection.exec_driver_sql("PRAGMA quick_check(1)")]
    if found != ["ok"]:
        said = " ".join(" ".join(found).replace("*** in database main ***", "").split())   # one line
        raise StoreError(f"{url or engine.url}: cannot open: the database is corrupt (SQLite's quick_check: "
                         f"{said[:200]}); restore it from a copy or give another --storage")


DDL_LOCK = 0x6661327475   # "fa2tu": PostgreSQL advisory lock that serialises table creation across hosts


def _create_tables(engine) -> None:
    """``create_all`` and the missing columns, safe when several processes start at once.

    On PostgreSQL a transaction-scoped advisory lock serialises them. SQLite has no such
    lock; there a process that loses the race ("already exists", or a unique constraint
    on the catalogue) waits a moment and tries again, up to five times.
    """
    def create(_attempt: int) -> None:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({DDL_LOCK})")
            Base.metadata.create_all(connection)
            _add_missing_columns(connection)

    lost_race = mentions("already exists", "duplicate", "UNIQUE", "locked")
    retrying(create, lambda exc: isinstance(exc, (OperationalError, IntegrityError, ProgrammingError))
             and lost_race(exc))


def _not_a_store(url: str) -> str:
    return (f"{url}: not an fa2-tuner store (no {', '.join(TABLES)} tables); give the database a sweep wrote "
            f"(python -m tuner.sweep writes {DEFAULT_URL} by default)")


class Store:
    """A database of studies, runs, baselines, results and finalists.

    Args:
        url: any SQLAlchemy URL.
        create: make the database and its tables if missing (the sweep); readers pass
            False, and a database that is missing or holds no fa2-tuner tables is a
            :class:`StoreError`.
        adopt: add our tables to a database that holds other tables and none of ours (a
            writer otherwise refuses it: ``--storage-init``). Its journal mode is left as it is:
            write-ahead logging is switched on only in a SQLite file this store creates.
        reads_only: the caller only reads (emit, the dashboard): an SQLite file this process cannot
            write (a read-only mount or file) is opened read-only (:mod:`tuner.store._sqlite`),
            and :attr:`read_only` says so.

    Raises:
        StoreError: the URL names no usable store (missing, corrupt, someone else's); the
            message says why. Nothing has been written to it then.
    """

    def __init__(self, url: str = DEFAULT_URL, create: bool = True, adopt: bool = False, reads_only: bool = False):
        self.url = url
        if problem := storage_problem(url, create, reads_only):       # said before anything is opened
            raise StoreError(problem)
        parsed = parse_url(url)
        file = parsed.database if parsed.get_backend_name() == "sqlite" and not in_memory(parsed) else None
        self.read_only = bool(file) and reads_only and not create and unwritable_file(file) is not None
        if self.read_only:
            self._open_read_only(url, file)
            return
        new_file = bool(file) and (not Path(file).is_file() or Path(file).stat().st_size == 0)
        if file and create:
            try:
                Path(file).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{url}: cannot make the folder for {file!r}: {exc.strerror or exc}") from None
        try:
            self.engine = create_engine(url, **engine_options(parsed))
            if file and not new_file:
                _check_sqlite(self.engine)
            if new_file and create:
                with self.engine.connect() as connection:
                    # Write-ahead logging: a commit survives kill -9 and costs one sync, not several.
                    connection.exec_driver_sql("PRAGMA journal_mode=WAL")
            commit_without_fsync(self.engine)
            self._open(url, create, adopt)
        except StoreError:
            raise
        except Exception as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise StoreError(f"{url}: cannot open: {type(exc).__name__}: {detail[:300]}") from None

    def _open_read_only(self, url: str, file: str) -> None:
        """A file this process cannot write, for a reader: read as it is, or refused saying why."""
        try:
            self.engine = read_only_engine(file, SQLITE_LOCK_TIMEOUT_S)
            _check_sqlite(self.engine, url)
            stale, problem = stale_schema(self.engine, url, file)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(cannot_read(url, file, exc)) from None
        if problem:
            raise StoreError(_not_a_store(url) if set(TABLES) & set(stale) else problem)

    def _open(self, url: str, create: bool, adopt: bool) -> None:
        """Make the tables (a writer), or check they are there (a reader); either way add what
        an older fa2-tuner's store lacks (tables, nullable columns, wider keys). A database
        with tables, none of them ours, is someone else's: refused unless ``adopt``."""
        present = set(inspect(self.engine).get_table_names())
        # ours: a store's tables, or an Optuna storage's (the sweep shares its study by design)
        ours = any(name.startswith("fa2_") for name in present) or present >= OPTUNA_TABLES
        if not create and not set(TABLES) <= present:
            raise StoreError(_not_a_store(url))
        if present and not ours and not adopt:
            shown = ", ".join(sorted(present)[:5]) + (", ..." if len(present) > 5 else "")
            raise StoreError(f"{url}: holds {len(present)} table(s) of something else ({shown}) and none of "
                             f"fa2-tuner's; give another database, or pass --storage-init to add fa2-tuner's "
                             f"tables (and Optuna's) to this one")
        _create_tables(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One unit of work: commits on success, rolls back and re-raises on error."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def add(self, *rows: Base) -> None:
        """Commit rows now (each trial's rows go in one transaction)."""
        with self.session() as session:
            session.add_all(rows)

    def results(self, study: str | None = None, target: str | None = None, gpu: str | None = None) -> list[Result]:
        """Stored results, optionally for one study, target and GPU."""
        return self._rows(Result, (study, target, gpu), (Result.id,))

    def replace_results(self, rows: list[Result]) -> None:
        """Store rows, replacing earlier rows for the same (study, target, gpu, shape, config).

        One transaction. When another process writes the same keys at the same time (the
        unique constraint fires, or PostgreSQL breaks a deadlock between the two), the
        transaction is redone, up to five times with a growing pause; the last writer's rows win.
        """
        columns = [c.name for c in Result.__table__.columns if c.name != "id"]

        def replace(attempt: int) -> None:
            # fresh objects each time: a rolled-back flush leaves its ids on the old ones
            batch = rows if attempt == 0 else [Result(**{c: getattr(r, c) for c in columns}) for r in rows]
            with self.session() as session:
                for row in batch:
                    session.execute(delete(Result).where(
                        Result.study == row.study, Result.target == row.target, Result.gpu == row.gpu,
                        Result.shape == row.shape, Result.config == row.config))
                session.add_all(batch)

        retrying(replace, _transient, pause_s=0.1)

    def timed_results(self, kernel: str, pass_: str, head_dims) -> list[Result]:
        """Timed rows of one kernel and pass at these head dims, of every study, target and GPU
        (a warm start's source; rows without a kernel are the Triton forward's)."""
        with self.session() as session:
            rows = session.scalars(select(Result).where(Result.status == "timed", Result.ms.is_not(None),
                                                        Result.head_dim.in_(list(head_dims))).order_by(Result.id))
            return [r for r in rows if (r.kernel or "triton", r.pass_ or "fwd") == (kernel, pass_)]

    def config_rows(self, study: str, target: str, gpu: str, config: str) -> list[Result]:
        """The stored rows of one config (one per shape), e.g. written by another sweep."""
        with self.session() as session:
            return list(session.scalars(select(Result).where(
                Result.study == study, Result.target == target, Result.gpu == gpu, Result.config == config)
                .order_by(Result.id)))

    def insert_results(self, rows: list[Result]) -> list[Result]:
        """Store a config's rows unless another process stored that config first.

        The unique constraint on (study, target, gpu, shape, config) decides: the loser's
        transaction rolls back and it gets the winner's rows, so every config is stored
        once however many sweeps share the database.

        Returns:
            The rows now stored for the config: ``rows``, or the winner's.
        """
        try:
            with self.session() as session:
                session.add_all(rows)
            return rows
        except IntegrityError:
            first = rows[0]
            stored = self.config_rows(first.study, first.target, first.gpu, first.config)
            if not stored:
                raise
            return stored

    def claim_study(self, name: str, fingerprint: str, path: str) -> StudyRecord:
        """Record the study's fingerprint, or return the one already stored under ``name``
        (also when another process stores it at the same moment)."""
        def claim(_attempt: int) -> StudyRecord:
            with self.session() as session:
                record = session.get(StudyRecord, name)
                if record is None:
                    record = StudyRecord(name=name, fingerprint=fingerprint, path=path)
                    session.add(record)
            return record

        return retrying(claim, lambda exc: isinstance(exc, IntegrityError), attempts=2, pause_s=0.0)

    def stored_study(self, name: str) -> StudyRecord | None:
        """The study a sweep stored under ``name`` (its fingerprint and file); None where none did."""
        with self.session() as session:
            return session.get(StudyRecord, name)

    def runs(self, study: str | None = None) -> list[Run]:
        query = select(Run) if study is None else select(Run).where(Run.study == study)
        with self.session() as session:
            return list(session.scalars(query.order_by(Run.id)))

    def finalists(self, study: str, target: str, gpu: str | None = None) -> list[Finalist]:
        query = select(Finalist).where(Finalist.study == study, Finalist.target == target)
        if gpu is not None:
            query = query.where(Finalist.gpu == gpu)
        with self.session() as session:
            return list(session.scalars(query.order_by(Finalist.shape, Finalist.rank)))

    def replace_finalists(self, rows: list[Finalist]) -> None:
        """Store a re-timing, replacing earlier finalists of the same shapes."""
        with self.session() as session:
            for shape in {(r.study, r.target, r.gpu, r.shape) for r in rows}:
                session.execute(delete(Finalist).where(Finalist.study == shape[0], Finalist.target == shape[1],
                                                       Finalist.gpu == shape[2], Finalist.shape == shape[3]))
            session.add_all(rows)

    def finish_run(self, run_id: int, status: str) -> None:
        with self.session() as session:
            run = session.get(Run, run_id)
            run.status, run.finished_at = status, now()

    def profiles(self, study: str | None = None, target: str | None = None, gpu: str | None = None) -> list[Profile]:
        """Stored profiles, optionally for one study, target and GPU."""
        return self._rows(Profile, (study, target, gpu), (Profile.shape, Profile.kind, Profile.rank, Profile.id))

    def _rows(self, model, where: tuple[str | None, str | None, str | None], order: tuple) -> list:
        """Rows of a table with study, target and gpu columns, filtered on those given."""
        query = select(model)
        for column, value in zip((model.study, model.target, model.gpu), where):
            if value is not None:
                query = query.where(column == value)
        with self.session() as session:
            return list(session.scalars(query.order_by(*order)))

    def replace_profile(self, row: Profile) -> None:
        """Store one profile whole, in one transaction, replacing an earlier one of the same
        (study, target, gpu, shape, kind, config)."""
        with self.session() as session:
            session.execute(delete(Profile).where(
                Profile.study == row.study, Profile.target == row.target, Profile.gpu == row.gpu,
                Profile.shape == row.shape, Profile.kind == row.kind, Profile.config == row.config))
            session.add(row)
