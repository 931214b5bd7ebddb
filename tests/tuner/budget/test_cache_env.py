"""Odd environments for the compile caches (issue 43): ``HOME`` read-only, ``FA2_TUNER_CACHE`` naming a
file or a read-only folder. The sweep and ``tuner.budget`` check the caches once, before any compile
worker starts: a folder a variable names that cannot be written is refused (exit 2, the folder and the
variable named, nothing written); a default that cannot be written falls back with one line of warning.
A run is never left marked ``running`` by an error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from concurrent.futures.process import BrokenProcessPool

import pytest

from tuner import sweep
from tuner.budget import CacheError, settle_caches
from tuner.budget.__main__ import main as budget_main
from tuner.store import Store

ONE_CONFIG = """name = "one"
[problem]
n = 64
head_dim = 16
dtype = "fp32"
[space]
block_m = [16]
block_n = [16]
num_warps = [1]
num_stages = [1]
tma = [false]
"""


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No cache variable set (each restored after the test, whatever the code set), and the system's
    temporary folder (where the fallback goes) inside tmp_path."""
    for name in ("FA2_TUNER_CACHE", "TRITON_CACHE_DIR", "TRITON_HOME"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


def _writable(folder) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


@pytest.fixture
def read_only(tmp_path):
    """An empty folder that cannot be written: its mode 0555, and for root (whom modes do not stop) the
    immutable attribute; skipped where neither holds."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    if _writable(folder):
        subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    try:
        if _writable(folder):
            pytest.skip("cannot make a read-only folder here (root, without chattr +i)")
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
        folder.chmod(0o755)


def _sweep_args(tmp_path, *more):
    study = tmp_path / "one.toml"
    study.write_text(ONE_CONFIG)
    return ["--gpu", "sm_90", "--study", str(study), "--out", str(tmp_path / "out"), *more]


@pytest.mark.parametrize("where", ["a file", "under a file", "read-only"])
def test_a_cache_variable_naming_a_folder_that_cannot_be_written_is_refused(clean_env, monkeypatch, capsys, where,
                                                                            request):
    tmp_path = clean_env
    (tmp_path / "a-file").write_text("keep me")
    path = {"a file": tmp_path / "a-file", "under a file": tmp_path / "a-file" / "cache",
            "read-only": request.getfixturevalue("read_only") if where == "read-only" else None}[where]
    monkeypatch.setenv("FA2_TUNER_CACHE", str(path))
    assert sweep.main(_sweep_args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"FA2_TUNER_CACHE={path}" in err and "set FA2_TUNER_CACHE to a writable folder" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
    assert budget_main(["--gpu", "sm_90", "--config", "16,16,1,1"]) == 2
    err = capsys.readouterr().err
    assert f"FA2_TUNER_CACHE={path}" in err and "Traceback" not in err
    assert (tmp_path / "a-file").read_text() == "keep me"


def test_a_read_only_file_system_is_named(clean_env, monkeypatch):
    """EROFS, as a read-only mount gives it even to root: refused, naming why."""
    monkeypatch.setenv("FA2_TUNER_CACHE", str(clean_env / "mounted"))

    def read_only_mount(*args, dir=None, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), dir)
    monkeypatch.setattr(tempfile, "TemporaryFile", read_only_mount)
    with pytest.raises(CacheError, match="Read-only file system.*set FA2_TUNER_CACHE"):
        settle_caches()


def test_triton_cache_variable_that_cannot_be_written_is_refused(clean_env, monkeypatch, capsys):
    (clean_env / "a-file").write_text("")
    monkeypatch.setenv("FA2_TUNER_CACHE", str(clean_env / "cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(clean_env / "a-file"))
    assert budget_main(["--gpu", "sm_90", "--config", "16,16,1,1"]) == 2
    assert "TRITON_CACHE_DIR=" in capsys.readouterr().err


@pytest.mark.parametrize("home", ["a file", "read-only"])
def test_an_unwritable_home_falls_back_with_one_line_and_the_sweep_runs(clean_env, monkeypatch, capsys, home,
                                                                        request):
    tmp_path = clean_env
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "a-file" if home == "a file" else request.getfixturevalue("read_only")))
    assert sweep.main(_sweep_args(tmp_path, "--no-outputs")) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    fallback = tmp_path / "tmp" / f"fa2-tuner-{os.getuid()}"
    assert len(warnings) == 1 and str(fallback / "budget") in warnings[0] and "FA2_TUNER_CACHE" in warnings[0]
    assert "TRITON_CACHE_DIR" in warnings[0]
    assert list((fallback / "budget").glob("*.json")) and any((fallback / "triton").iterdir())   # both caches used
    db = Store(f"sqlite:///{tmp_path / 'out' / 'tuning.db'}")
    assert [r.status for r in db.runs()] == ["budget-only"]
    assert [r.status for r in db.results("one", "sm_90")] == ["pending"]     # compiled, not a compile error


def test_a_writable_default_is_left_alone(clean_env, monkeypatch):
    monkeypatch.setenv("HOME", str(clean_env / "home"))
    assert settle_caches() is None
    assert "FA2_TUNER_CACHE" not in os.environ and "TRITON_CACHE_DIR" not in os.environ


def test_an_unexpected_error_marks_the_run_failed(clean_env, monkeypatch):
    monkeypatch.setenv("FA2_TUNER_CACHE", str(clean_env / "cache"))

    def broken(self):
        raise BrokenProcessPool("a compile worker died")
    monkeypatch.setattr(sweep.Sweep, "budget_only", broken)
    with pytest.raises(BrokenProcessPool):
        sweep.main(_sweep_args(clean_env))
    db = Store(f"sqlite:///{clean_env / 'out' / 'tuning.db'}")
    assert [r.status for r in db.runs()] == ["failed"]
    with contextlib.suppress(Exception):
        db.engine.dispose()


@pytest.mark.parametrize("named", [True, False])
def test_a_refused_store_leaves_no_cache_folder_behind(clean_env, monkeypatch, capsys, named):
    """The caches are checked before the store is opened, and made only when something is written there."""
    tmp_path = clean_env
    if named:
        monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path / "a" / "b" / "c"))
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "t" / "cache"))
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    import sqlite3

    with contextlib.closing(sqlite3.connect(tmp_path / "foreign.db")) as connection:
        connection.execute("create table t (x int)")
    args = _sweep_args(tmp_path, "--storage", f"sqlite:///{tmp_path / 'foreign.db'}")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert sweep.main(args) == 2
    assert "none of fa2-tuner's" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not any((tmp_path / "home").iterdir())
