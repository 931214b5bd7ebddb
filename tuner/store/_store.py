"""The :class:`Store`: opening a database URL as a store, and reading and writing its rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, delete, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from tuner.store._tables import TABLES, Base, Finalist, Profile, Result, Run, StudyRecord, now

DEFAULT_OUT = "fa2-out"
DEFAULT_URL = f"sqlite:///{DEFAULT_OUT}/tuning.db"


class StoreError(RuntimeError):
    """The database cannot be used as a store; the message says why and what to do."""


def _add_missing_columns(engine) -> None:
    """Bring a database made by an older fa2-tuner up to date: columns added since are
    nullable, so ``ALTER TABLE ... ADD COLUMN`` keeps every stored row. (Tables added
    since are made by ``create_all``, which runs first.)"""
    inspector = inspect(engine)
    with engine.begin() as connection:
        for table in Base.metadata.sorted_tables:
            present = {column["name"] for column in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in present and column.nullable:
                    kind = column.type.compile(dialect=engine.dialect)
                    connection.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")


def _create_tables(engine) -> None:
    """``create_all``, tolerant of another process creating the same tables at the same time."""
    for attempt in range(5):
        try:
            Base.metadata.create_all(engine)
            _add_missing_columns(engine)
            return
        except OperationalError as exc:
            if "already exists" not in str(exc) and "duplicate column" not in str(exc) or attempt == 4:
                raise


class Store:
    """A database of studies, runs, baselines, results and finalists.

    Args:
        url: any SQLAlchemy URL.
        create: make the database and its tables if missing (the sweep); readers pass
            False, and a database that is missing or holds no fa2-tuner tables is a
            :class:`StoreError`.

    Raises:
        StoreError: the URL names no usable store; the message says why.
    """

    def __init__(self, url: str = DEFAULT_URL, create: bool = True):
        self.url = url
        try:
            parsed = make_url(url)
            backend = parsed.get_backend_name()
        except Exception as exc:
            raise StoreError(f"{url!r} is not a database URL ({type(exc).__name__}); "
                             f"e.g. {DEFAULT_URL}") from None
        try:
            parsed.get_dialect()
        except Exception as exc:
            raise StoreError(f"{url!r}: SQLAlchemy cannot load a driver for {parsed.drivername!r} "
                             f"({type(exc).__name__}); e.g. {DEFAULT_URL} or postgresql+psycopg://host/db "
                             f"with psycopg installed") from None
        file = parsed.database if backend == "sqlite" and parsed.database not in (None, "", ":memory:") else None
        connect_args = {}
        if backend == "sqlite":
            if file and not create and not Path(file).is_file():
                raise StoreError(f"{url}: no such database file {file!r}")
            if file and create:
                try:
                    Path(file).parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"{url}: cannot make the folder for {file!r}: {exc.strerror or exc}") from None
            # Optuna's engine writes the same file; wait for its lock rather than fail.
            connect_args = {"timeout": 60}
        try:
            self.engine = create_engine(url, connect_args=connect_args)
            if file and create:
                with self.engine.connect() as connection:
                    # Write-ahead logging: a commit survives kill -9 and costs one sync, not several.
                    connection.exec_driver_sql("PRAGMA journal_mode=WAL")
            if create:
                _create_tables(self.engine)
            else:
                present = set(inspect(self.engine).get_table_names())
                if not set(TABLES) <= present:
                    raise StoreError(f"{url}: not an fa2-tuner store (no {', '.join(TABLES)} tables); "
                                     f"run python -m tuner.sweep with --storage {url} first")
                _create_tables(self.engine)   # tables added since (fa2_profiles ...), and their columns
        except StoreError:
            raise
        except Exception as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise StoreError(f"{url}: cannot open: {type(exc).__name__}: {detail[:300]}") from None

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
        query = select(Result)
        for column, value in ((Result.study, study), (Result.target, target), (Result.gpu, gpu)):
            if value is not None:
                query = query.where(column == value)
        with self.session() as session:
            return list(session.scalars(query.order_by(Result.id)))

    def replace_results(self, rows: list[Result]) -> None:
        """Store rows, replacing earlier rows for the same (study, target, gpu, shape, config).

        One transaction; if another process commits the same keys first (the unique
        constraint fires), the transaction is redone once, and this one's rows win.
        """
        for attempt in range(2):
            try:
                with self.session() as session:
                    for row in rows:
                        session.execute(delete(Result).where(
                            Result.study == row.study, Result.target == row.target, Result.gpu == row.gpu,
                            Result.shape == row.shape, Result.config == row.config))
                    session.add_all(rows)
                return
            except IntegrityError:
                if attempt:
                    raise

    def claim_study(self, name: str, fingerprint: str, path: str) -> StudyRecord:
        """Record the study's fingerprint, or return the one already stored under ``name``."""
        with self.session() as session:
            record = session.get(StudyRecord, name)
            if record is None:
                record = StudyRecord(name=name, fingerprint=fingerprint, path=path)
                session.add(record)
        return record

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
        query = select(Profile)
        for column, value in ((Profile.study, study), (Profile.target, target), (Profile.gpu, gpu)):
            if value is not None:
                query = query.where(column == value)
        with self.session() as session:
            return list(session.scalars(query.order_by(Profile.shape, Profile.kind, Profile.rank, Profile.id)))

    def replace_profile(self, row: Profile) -> None:
        """Store one profile whole, in one transaction, replacing an earlier one of the same
        (study, target, gpu, shape, kind, config)."""
        with self.session() as session:
            session.execute(delete(Profile).where(
                Profile.study == row.study, Profile.target == row.target, Profile.gpu == row.gpu,
                Profile.shape == row.shape, Profile.kind == row.kind, Profile.config == row.config))
            session.add(row)
