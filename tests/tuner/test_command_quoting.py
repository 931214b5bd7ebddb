"""The command a run stores (and prints to resume it) is one a shell takes back as it was given: paths with
spaces or quotes stay one argument."""

from __future__ import annotations

import shlex

from conftest import TINY_STUDY

from tuner import sweep
from tuner.store import Store


def test_the_stored_command_splits_back_into_the_arguments_given(tmp_path, sweep_args):
    folder = tmp_path / "my dir's"
    folder.mkdir()
    study = folder / "tiny.toml"
    study.write_text(TINY_STUDY)
    db = folder / "c d.db"
    argv = sweep_args(study, db, "--sampler", "grid", "--trials", "1", "--finalists", "0")
    assert sweep.main(argv) == 0
    (run,) = Store(f"sqlite:///{db}").runs()
    assert shlex.split(run.command) == ["python", "-m", "tuner.sweep", *argv]
