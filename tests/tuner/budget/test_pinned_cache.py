"""Pins where settle_caches looks: the tuner's cache is FA2_TUNER_CACHE's budget/ folder (not the root
alone), and Triton's default cache sits under TRITON_HOME where that is set."""

from __future__ import annotations

import os
import tempfile

import pytest

from tuner.budget import CacheError, settle_caches


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No cache variable set (each restored after the test, whatever settle_caches sets), HOME a writable
    folder, and the system's temporary folder (where fallbacks go) inside tmp_path."""
    for name in ("FA2_TUNER_CACHE", "TRITON_CACHE_DIR", "TRITON_HOME"):
        monkeypatch.setenv(name, "x")          # so that monkeypatch restores it, set or not before
        monkeypatch.delenv(name)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


def test_a_named_cache_whose_budget_folder_cannot_be_made_is_refused(bare_env, monkeypatch):
    """FA2_TUNER_CACHE itself is writable, but its budget/ (where compile results go) is a file."""
    root = bare_env / "cache"
    root.mkdir()
    (root / "budget").write_text("not a folder")
    monkeypatch.setenv("FA2_TUNER_CACHE", str(root))
    with pytest.raises(CacheError, match="FA2_TUNER_CACHE=.*set FA2_TUNER_CACHE to a writable folder"):
        settle_caches()
    assert (root / "budget").read_text() == "not a folder"


def test_a_named_writable_cache_gets_its_budget_folder(bare_env, monkeypatch):
    from tuner.budget import cache_dir

    monkeypatch.setenv("FA2_TUNER_CACHE", str(bare_env / "cache"))
    assert settle_caches() is None
    assert cache_dir() == bare_env / "cache" / "budget"
    assert not (bare_env / "cache").exists()          # checked, not made: the first compile result makes it


def test_triton_s_default_cache_follows_triton_home_not_home(bare_env, monkeypatch):
    """HOME is writable, TRITON_HOME is a file: Triton would write under TRITON_HOME, so its cache falls back."""
    (bare_env / "a-file").write_text("")
    monkeypatch.setenv("TRITON_HOME", str(bare_env / "a-file"))
    warning = settle_caches()
    assert warning is not None and "TRITON_CACHE_DIR" in warning and str(bare_env / "a-file") in warning
    assert "FA2_TUNER_CACHE" not in warning                       # the tuner's own cache under HOME is fine
    assert os.environ["TRITON_CACHE_DIR"] == str(bare_env / "home" / ".cache" / "fa2-tuner" / "triton")


def test_a_writable_triton_home_keeps_triton_s_cache_there(bare_env, monkeypatch):
    (bare_env / "triton-home").mkdir()
    monkeypatch.setenv("TRITON_HOME", str(bare_env / "triton-home"))
    assert settle_caches() is None
    assert "TRITON_CACHE_DIR" not in os.environ
    assert not (bare_env / "triton-home" / ".triton").exists()      # Triton makes it at its first compile
