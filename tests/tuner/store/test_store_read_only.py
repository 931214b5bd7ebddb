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

from tuner import dashboard, emit
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
