"""What cases start from: study files written into the working folder, and stores built once per battery run
(a store with timed results from an interpreted sweep, a budget-only store, a foreign and a corrupt database),
copied into a case's folder by its setup.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from scripts.battery.runner import PYTHON, SHARED_CACHE, log

# two configs, one small fp16 shape: the cheapest sweep there is (a budget stage of 2 compiles, cached after)
TINY = """name = "tiny"
description = "battery: two configs, one shape"

[problem]
batch = 1
heads = 1
n = 128
head_dim = 64
dtype = "fp16"
causal = false

[space]
block_m = [64]
block_n = [32, 64]
num_warps = [4]
num_stages = [2]
"""

# eight configs: compiles long enough to be interrupted in the middle
SMALL = TINY.replace('name = "tiny"', 'name = "small"').replace("num_warps = [4]", "num_warps = [2, 4]").replace(
    "num_stages = [2]", "num_stages = [1, 2]")

TIMED_DB = "timed/fa2-out/tuning.db"
BUDGET_DB = "budget/fa2-out/tuning.db"


def _sweep(folder: Path, extra: list[str], env_extra: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.toml").write_text(TINY)
    env = dict(os.environ, FA2_TUNER_CACHE=str(SHARED_CACHE), **env_extra)
    command = [str(PYTHON), "-m", "tuner.sweep", "--gpu", "sm_89", "--study", "tiny.toml", "--trials", "2", *extra]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"fixture {folder.name}: {' '.join(command)} exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")


def build(root: Path) -> Path:
    """Build the fixtures under ``root``/fixtures (a few seconds with a warm cache); returns that folder."""
    fixtures = root / "fixtures"
    fixtures.mkdir(parents=True)
    log("fixtures: a timed store (interpreted sweep of the tiny study) and a budget-only store")
    _sweep(fixtures / "timed", ["--device", "cpu"], {"TRITON_INTERPRET": "1"})
    _sweep(fixtures / "budget", [], {})
    with sqlite3.connect(fixtures / "foreign.db") as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        db.execute("INSERT INTO notes (text) VALUES ('not a tuner store')")
    (fixtures / "corrupt.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 40)
    (fixtures / "text.db").write_text("this is a text file, not a database\n")
    code = f"from tuner.store import Store; Store('sqlite:///{fixtures / 'noresults.db'}')"
    subprocess.run([str(PYTHON), "-c", code], check=True, capture_output=True, timeout=300)
    (fixtures / "empty.db").write_bytes(b"")
    return fixtures


# ---------------------------------------------------------------- setup steps: each returns f(ctx)


def study(name: str = "tiny.toml", text: str = TINY):
    def make(ctx):
        (ctx.cwd / name).write_text(text)
    return make


def text_file(rel: str, text: str = "x\n"):
    def make(ctx):
        path = Path(ctx.expand(rel)) if rel.startswith("@") else ctx.cwd / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return make


def raw_file(rel: str, data: bytes):
    def make(ctx):
        (ctx.cwd / rel).write_bytes(data)
    return make


def folder(rel: str):
    def make(ctx):
        (Path(ctx.expand(rel)) if rel.startswith("@") else ctx.cwd / rel).mkdir(parents=True, exist_ok=True)
    return make


def store(kind: str = "timed", dest: str = "fa2-out/tuning.db"):
    """Copy a fixture database (timed, budget, foreign, corrupt, text, empty, noresults) to ``dest`` in the
    working folder; the timed and budget stores come with their study file (tiny.toml)."""
    source = {"timed": TIMED_DB, "budget": BUDGET_DB}.get(kind, f"{kind}.db")

    def make(ctx):
        target = ctx.cwd / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ctx.fixtures / source, target)
        if kind in ("timed", "budget") and not (ctx.cwd / "tiny.toml").exists():
            (ctx.cwd / "tiny.toml").write_text(TINY)
    return make


def outputs(kind: str = "timed"):
    """The whole fa2-out folder of a fixture sweep (store, dashboards, config list)."""
    def make(ctx):
        shutil.copytree(ctx.fixtures / kind / "fa2-out", ctx.cwd / "fa2-out", dirs_exist_ok=True)
        (ctx.cwd / "tiny.toml").write_text(TINY)
    return make
