"""The results store: SQLAlchemy 2.0 ORM over any database URL (SQLite by default).

Tables, all prefixed ``fa2_`` so that Optuna's own tables (its RDB storage is pointed
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
error, never a new empty database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    inspect,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

DEFAULT_OUT = "fa2-out"
DEFAULT_URL = f"sqlite:///{DEFAULT_OUT}/tuning.db"
TABLES = ("fa2_runs", "fa2_results")     # a store has these; Optuna's tables alone are not one


class StoreError(RuntimeError):
    """The database cannot be used as a store; the message says why and what to do."""


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class StudyRecord(Base):
    """A study name, and the fingerprint of the definition stored under it."""

    __tablename__ = "fa2_studies"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Run(Base):
    """One invocation of ``python -m tuner.sweep``."""

    __tablename__ = "fa2_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))              # the device used, or "none"
    sampler: Mapped[str] = mapped_column(String(16))
    command: Mapped[str] = mapped_column(Text)
    torch_version: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(64))
    driver: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    status: Mapped[str] = mapped_column(String(32), default="running")


class Baseline(Base):
    """PyTorch SDPA on one shape, measured in one run (the denominator of every ratio)."""

    __tablename__ = "fa2_baselines"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fa2_runs.id"), index=True)
    shape: Mapped[str] = mapped_column(String(96))
    phase: Mapped[str | None] = mapped_column(String(8), default="start")   # start, or end (drift check)
    flash_ms: Mapped[float | None] = mapped_column(Float)
    cudnn_ms: Mapped[float | None] = mapped_column(Float)
    flash_host_us: Mapped[float | None] = mapped_column(Float)
    cudnn_host_us: Mapped[float | None] = mapped_column(Float)
    timer: Mapped[str | None] = mapped_column(String(16))       # cuda_graph, do_bench or wall_clock
    measured_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Result(Base):
    """One config on one shape of one study, for one target on one GPU."""

    __tablename__ = "fa2_results"
    __table_args__ = (UniqueConstraint("study", "target", "gpu", "shape", "config"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fa2_runs.id"), index=True)
    optuna_trial: Mapped[int | None] = mapped_column(Integer)
    # where: the study, the target budget, the GPU that ran it, and its software
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))
    torch_version: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(64))
    driver: Mapped[str] = mapped_column(String(64))
    # the shape
    shape: Mapped[str] = mapped_column(String(96))
    batch: Mapped[int] = mapped_column(Integer)
    heads: Mapped[int] = mapped_column(Integer)
    n_q: Mapped[int] = mapped_column(Integer)
    n_k: Mapped[int] = mapped_column(Integer)
    head_dim: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    causal: Mapped[bool] = mapped_column(Boolean)
    # the config
    config: Mapped[str] = mapped_column(String(32))
    block_m: Mapped[int] = mapped_column(Integer)
    block_n: Mapped[int] = mapped_column(Integer)
    num_warps: Mapped[int] = mapped_column(Integer)
    num_stages: Mapped[int] = mapped_column(Integer)
    # outcome: a tuner.status.Status (TIMED, or the stage's rejection) and the tuner.status.Stage
    status: Mapped[str] = mapped_column(String(24), index=True)
    stage: Mapped[str] = mapped_column(String(16))             # the last stage reached
    reason: Mapped[str] = mapped_column(Text, default="")
    # budget (on the target) and compile (for the GPU used)
    budget_verdict: Mapped[str | None] = mapped_column(String(24))
    model_smem_bytes: Mapped[int | None] = mapped_column(Integer)
    smem_bytes: Mapped[int | None] = mapped_column(Integer)     # compiled for the target
    smem_limit_bytes: Mapped[int | None] = mapped_column(Integer)
    registers: Mapped[int | None] = mapped_column(Integer)
    spill_bytes: Mapped[int | None] = mapped_column(Integer)
    binary: Mapped[str | None] = mapped_column(String(64))     # hash of what the GPU ran
    # correctness on this shape and on the ragged gate shape
    err_out: Mapped[float | None] = mapped_column(Float)
    err_lse: Mapped[float | None] = mapped_column(Float)
    err_bound: Mapped[float | None] = mapped_column(Float)
    lse_bound: Mapped[float | None] = mapped_column(Float)
    ragged_err_out: Mapped[float | None] = mapped_column(Float)    # the worst of the gate shapes
    ragged_err_lse: Mapped[float | None] = mapped_column(Float)
    # timing, with SDPA measured in the same run: GPU time, and the host time of a call
    ms: Mapped[float | None] = mapped_column(Float)
    host_us: Mapped[float | None] = mapped_column(Float)
    timer: Mapped[str | None] = mapped_column(String(16))       # cuda_graph, do_bench or wall_clock
    tflops: Mapped[float | None] = mapped_column(Float)
    flash_ms: Mapped[float | None] = mapped_column(Float)
    cudnn_ms: Mapped[float | None] = mapped_column(Float)
    pct_flash: Mapped[float | None] = mapped_column(Float)
    pct_cudnn: Mapped[float | None] = mapped_column(Float)
    # where the trial's time went, seconds (for all its shapes together)
    check_s: Mapped[float | None] = mapped_column(Float)
    time_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


class Finalist(Base):
    """One of a shape's best configs, re-timed with the others in interleaved rounds."""

    __tablename__ = "fa2_finalists"
    __table_args__ = (UniqueConstraint("study", "target", "gpu", "shape", "config"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fa2_runs.id"), index=True)
    study: Mapped[str] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(128))
    shape: Mapped[str] = mapped_column(String(96))
    config: Mapped[str] = mapped_column(String(32))
    rank: Mapped[int] = mapped_column(Integer)                  # 1: the winner (best median)
    rounds: Mapped[int] = mapped_column(Integer)
    median_ms: Mapped[float] = mapped_column(Float)
    min_ms: Mapped[float] = mapped_column(Float)
    max_ms: Mapped[float] = mapped_column(Float)
    spread: Mapped[float] = mapped_column(Float)                # (max - min) / median
    times: Mapped[str] = mapped_column(Text)                    # ms per round, JSON
    timer: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


def _add_missing_columns(engine) -> None:
    """Bring a database made by an older fa2-tuner up to date: columns added since are
    nullable, so ``ALTER TABLE ... ADD COLUMN`` keeps every stored row."""
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
                _add_missing_columns(self.engine)
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
