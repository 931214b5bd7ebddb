"""The results store: SQLAlchemy 2.0 ORM over any database URL (SQLite by default).

Three tables, all prefixed ``fa2_`` so that Optuna's own tables (its RDB storage is
pointed at the same URL) sit beside them:

* :class:`Run`: one invocation of the sweep: the target, the GPU actually used, versions.
* :class:`Baseline`: SDPA's flash and cuDNN times for one shape, measured in that run.
* :class:`Result`: one config on one shape of one study, with the outcome of every
  stage (budget, compile, correctness, timing) and the reason it stopped where it did.

Every result is committed on its own (:meth:`Store.session`), so a crash loses at most
the trial in flight. ``pct_flash`` is 100 x SDPA-flash time / our time: above 100 is
faster than SDPA.
"""

from __future__ import annotations

import datetime as dt
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint, create_engine, \
    select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

DEFAULT_URL = "sqlite:///studies/tuning.db"

# Outcomes of a config on a shape. Everything but TIMED is a rejection with a reason.
TIMED = "timed"
INCORRECT = "incorrect"
CRASHED = "crashed"
TIMEOUT = "timeout"
PENDING = "pending"          # passed the budget stage where no GPU could take it further


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


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
    # outcome: TIMED, or the stage's rejection (a budget verdict, INCORRECT, CRASHED, TIMEOUT)
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
    ragged_err_out: Mapped[float | None] = mapped_column(Float)
    # timing, with SDPA measured in the same run
    ms: Mapped[float | None] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    flash_ms: Mapped[float | None] = mapped_column(Float)
    cudnn_ms: Mapped[float | None] = mapped_column(Float)
    pct_flash: Mapped[float | None] = mapped_column(Float)
    pct_cudnn: Mapped[float | None] = mapped_column(Float)
    # where the trial's time went, seconds (for all its shapes together)
    check_s: Mapped[float | None] = mapped_column(Float)
    time_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=now)


def _add_missing_columns(engine) -> None:
    """Bring a database made by an older fa2-tuner up to date: columns added since are
    nullable, so ``ALTER TABLE ... ADD COLUMN`` keeps every stored row."""
    from sqlalchemy import inspect

    inspector = inspect(engine)
    with engine.begin() as connection:
        for table in Base.metadata.sorted_tables:
            present = {column["name"] for column in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in present and column.nullable:
                    kind = column.type.compile(dialect=engine.dialect)
                    connection.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")


class Store:
    """A database of runs, baselines and results (created on first use)."""

    def __init__(self, url: str = DEFAULT_URL):
        self.url = url
        parsed = make_url(url)
        connect_args = {}
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            # Optuna's engine writes the same file; wait for its lock rather than fail.
            connect_args = {"timeout": 60}
        self.engine = create_engine(url, connect_args=connect_args)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            with self.engine.connect() as connection:
                # Write-ahead logging: a commit survives kill -9 and costs one sync, not several.
                connection.exec_driver_sql("PRAGMA journal_mode=WAL")
        Base.metadata.create_all(self.engine)
        _add_missing_columns(self.engine)

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
        """Store rows, replacing earlier rows for the same (study, target, gpu, shape, config)."""
        with self.session() as session:
            for row in rows:
                old = session.scalar(select(Result).where(
                    Result.study == row.study, Result.target == row.target, Result.gpu == row.gpu,
                    Result.shape == row.shape, Result.config == row.config))
                if old is not None:
                    session.delete(old)
                    session.flush()
                session.add(row)

    def runs(self, study: str | None = None) -> list[Run]:
        query = select(Run) if study is None else select(Run).where(Run.study == study)
        with self.session() as session:
            return list(session.scalars(query.order_by(Run.id)))

    def baselines(self, run_id: int) -> list[Baseline]:
        with self.session() as session:
            return list(session.scalars(select(Baseline).where(Baseline.run_id == run_id)))

    def finish_run(self, run_id: int, status: str) -> None:
        with self.session() as session:
            run = session.get(Run, run_id)
            run.status, run.finished_at = status, now()
