"""A store that cannot be written (a read-only mount, a read-only file) is read by the commands that only
read it, emit and the dashboard, and nothing is written beside it; a command that writes is refused."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from tuner import dashboard, emit, sweep
from tuner.store import Store, StoreError

HAND_STUDY = 'name = "hand"\n[problem]\nbatch = 1\nheads = 2\nn = 128\ncausal = [false, true]\n'


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for this process: its permissions where they bind (not root), else a read-only
    bind mount of it (root, with the right to mount); skipped where neither can be had."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in (folder, *folder.iterdir())}
        for path in modes:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    mount = shutil.which("mount")
    made = mount and subprocess.run(f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}",
                                    shell=True, capture_output=True).returncode == 0
    if not made:
        subprocess.run(["umount", str(folder)], capture_output=True)
        pytest.skip("running as root, which permissions do not bind, and no read-only bind mount can be made here")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=True)


def _hand_store_in(folder: Path, hand_store) -> str:
    """The conftest's hand store, moved (closed, its write-ahead log folded in) into ``folder``."""
    db = hand_store()
    db.engine.dispose()
    folder.mkdir()
    source = Path(db.url.removeprefix("sqlite:///"))
    shutil.move(source, folder / "hand.db")
    return f"sqlite:///{folder / 'hand.db'}"


def test_emit_and_the_dashboard_read_a_store_on_a_read_only_folder(hand_store, tmp_path, capsys):
    url = _hand_store_in(tmp_path / "ro", hand_store)
    (tmp_path / "hand.toml").write_text(HAND_STUDY)
    before = sorted(os.listdir(tmp_path / "ro"))
    with read_only(tmp_path / "ro"):
        assert emit.main(["--study", str(tmp_path / "hand.toml"), "--gpu", "sm_90", "--storage", url,
                          "--out", str(tmp_path / "c.py")]) == 0, capsys.readouterr().err
        assert "CONFIGS = [" in capsys.readouterr().out
        assert dashboard.main(["--storage", url, "--out", str(tmp_path / "pages")]) == 0, capsys.readouterr().err
        assert "wrote" in capsys.readouterr().out
        with pytest.raises(StoreError, match="hand.db"):      # the sweep's store: refused, a clear error
            Store(url)
        assert sorted(os.listdir(tmp_path / "ro")) == before          # no -journal, -wal nor -shm left there


def test_a_readers_store_opens_read_only_where_it_cannot_be_written(hand_store, tmp_path, monkeypatch):
    """Without a read-only folder to be had (root without mounts): a file the store says it cannot write is
    opened in SQLite's read-only mode, which refuses writes and leaves the file as it was."""
    url = _hand_store_in(tmp_path / "ro", hand_store)
    file = tmp_path / "ro" / "hand.db"
    before = file.read_bytes()
    from tuner.store import _sqlite

    monkeypatch.setattr(_sqlite, "unwritable", lambda path, kind: "cannot be written (read-only)")
    db = Store(url, create=False, reads_only=True)
    assert len(db.results("hand")) == 26 and db.read_only
    with pytest.raises(OperationalError, match="write a readonly database"), db.engine.connect() as connection:
        connection.exec_driver_sql("DELETE FROM fa2_results")
    db.engine.dispose()
    assert file.read_bytes() == before
    assert sorted(os.listdir(tmp_path / "ro")) == ["hand.db"]


def _deny_writes(monkeypatch, denied: Path) -> None:
    """``os.access`` says ``denied`` (a file, or a folder) cannot be written, as a read-only mount or permissions
    say it even to root, where chmod binds nothing; SQLite itself is not told (as root it could still write)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(path).absolute() == denied:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


@pytest.mark.parametrize("shut, why", [
    ("file", "cannot be written (a read-only file or mount, or another user's)"),
    ("folder", "is in a folder SQLite cannot write its journal in ({folder} is not writable (read-only, or "
               "another user's))"),
])
def test_the_sweep_refuses_a_store_it_cannot_write_before_any_work(shut, why, hand_store, tiny, sweep_args, tmp_path,
                                                                   monkeypatch, capsys):
    """Bug caught (the 2026-12-04 evening battery): SQLite opens an existing file it cannot write read-only without
    a word, and the sweep ended at its first write in "attempt to write a readonly database", a traceback, exit 1.
    Now exit 2 naming --storage, before anything is written; emit still reads the store where it is."""
    url = _hand_store_in(tmp_path / "ro", hand_store)
    file = tmp_path / "ro" / "hand.db"
    before = file.read_bytes()
    _deny_writes(monkeypatch, file if shut == "file" else file.parent)
    assert sweep.main(sweep_args(tiny, file, "--trials", "1")) == 2
    err = capsys.readouterr().err
    said = f"{url}: {str(file)!r} {why.format(folder=file.parent)}; copy it to a folder you can write and give that"
    assert err.strip().splitlines()[-1] == f"python -m tuner.sweep: error: --storage: {said} --storage", err
    assert file.read_bytes() == before and sorted(os.listdir(file.parent)) == ["hand.db"]
    (tmp_path / "hand.toml").write_text(HAND_STUDY)
    assert emit.main(["--study", str(tmp_path / "hand.toml"), "--gpu", "sm_90", "--storage", url,
                      "--out", str(tmp_path / "c.py")]) == 0, capsys.readouterr().err
    assert file.read_bytes() == before


def test_the_sweep_refuses_a_store_on_a_read_only_mount_with_a_rollback_journal(hand_store, tiny, sweep_args,
                                                                                tmp_path, capsys):
    """The battery's own case, where it can be made: a store SQLite opens read-only without a word (a rollback
    journal: no -shm to make), on a read-only folder."""
    import sqlite3

    url = _hand_store_in(tmp_path / "ro", hand_store)
    file = tmp_path / "ro" / "hand.db"
    with contextlib.closing(sqlite3.connect(file)) as connection:
        connection.execute("PRAGMA journal_mode=DELETE")
    before = file.read_bytes()
    with read_only(tmp_path / "ro"):
        assert sweep.main(sweep_args(tiny, file, "--trials", "1")) == 2
        assert sorted(os.listdir(tmp_path / "ro")) == ["hand.db"]
    err = capsys.readouterr().err
    assert f"error: --storage: {url}: {str(file)!r} cannot be written" in err and "Traceback" not in err, err
    assert file.read_bytes() == before
