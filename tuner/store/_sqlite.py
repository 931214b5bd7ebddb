"""SQLite's particulars: commits without an fsync each in a write-ahead-logged file, and reading a store
this process cannot write (an SQLite file on a read-only mount, or a read-only file).

A command that only reads (emit, the dashboard) opens such a file in SQLite's read-only mode, which
never writes it nor a journal beside it. Where its folder cannot be written either, the file is also
opened ``immutable`` (SQLite then needs no ``-shm`` file beside a write-ahead-logged database, which
it cannot make there; nobody can be writing a file in that folder), unless a write-ahead log already
lies beside it, whose commits must be read. The store's tables are read as they are: a store of an
older fa2-tuner, which a writable one would be brought up to date, is refused naming what it lacks.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy import create_engine, event, inspect

from tuner.paths import unwritable
from tuner.store._tables import Base

__all__ = ["cannot_read", "commit_without_fsync", "read_only_engine", "stale_schema", "unwritable_file"]


def _sqlite_commits_without_fsync(dbapi_connection, _record) -> None:
    """Each connection of an engine on SQLite in WAL mode (the files the store creates): NORMAL
    synchronisation makes a commit durable against a crash or ``kill -9`` of the process, not
    against the machine losing power, and saves an fsync per commit. A sweep makes about ten
    commits per trial on its engine and, through Optuna, one per parameter asked. A file in
    another journal mode (one we did not create) keeps SQLite's default, FULL: NORMAL is safe
    only with the write-ahead log."""
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


def commit_without_fsync(engine) -> None:
    """Listen for :func:`_sqlite_commits_without_fsync` on ``engine`` (Optuna's, too), and drop the
    connections it already holds so that every one gets it."""
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_commits_without_fsync)
        engine.dispose()


def unwritable_file(file: str) -> str | None:
    """Why an existing SQLite ``file`` cannot be written, or None. A write changes the file and makes a journal
    beside it (``-journal``, or ``-wal`` and ``-shm``), so its folder must be writable too. SQLite opens a file it
    cannot write read-only without a word, and only the first write fails ("attempt to write a readonly
    database"): a writer asks this first (:func:`tuner.store.storage_problem`)."""
    path = Path(file).absolute()
    if not os.access(path, os.W_OK):
        return "cannot be written (a read-only file or mount, or another user's)"
    folder = unwritable(f"{path}-fa2-tuner-probe", "file")      # can SQLite make its journal beside it
    if folder:
        return f"is in a folder SQLite cannot write its journal in ({folder.removeprefix('cannot be made: ')})"
    return None


def read_only_engine(file: str, timeout_s: float):
    """An engine that only reads ``file`` (see the module's docstring)."""
    path = Path(file).absolute()
    folder_shut = unwritable(f"{path}-fa2-tuner-probe", "file") is not None     # can a file be made beside it
    immutable = folder_shut and not Path(f"{path}-wal").exists()
    uri = f"{path.as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, timeout=timeout_s, check_same_thread=False)

    return create_engine("sqlite://", creator=connect)


def stale_schema(engine, url: str, file: str) -> tuple[list[str], str | None]:
    """(the tables and columns an older fa2-tuner's store lacks, which a writable one would be given; why the
    store cannot be read as it is then, None if it can)."""
    inspector = inspect(engine)
    present = set(inspector.get_table_names())
    stale = [table.name for table in Base.metadata.sorted_tables if table.name not in present]
    for table in Base.metadata.sorted_tables:
        if table.name in present:
            columns = {column["name"] for column in inspector.get_columns(table.name)}
            stale += [f"{table.name}.{c.name}" for c in table.columns if c.name not in columns]
    why = (f"{url}: written by an older fa2-tuner (it lacks {', '.join(stale[:4])}), and cannot be brought up to "
           f"date here (it {unwritable_file(file)}); copy it to a folder you can write")
    return stale, why if stale else None


def cannot_read(url: str, file: str, exc: Exception) -> str:
    """The error of a read-only file SQLite would not open (a write-ahead log beside it, and no -shm)."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (f"{url}: it {unwritable_file(file)}, and SQLite cannot open it read-only either ({type(exc).__name__}: "
            f"{detail[:300]}); copy it, with its -wal file if there is one, to a folder you can write")
