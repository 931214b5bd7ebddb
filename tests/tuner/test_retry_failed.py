"""Configs stored as ``timeout`` or ``crashed`` are run again under ``--retry-failed`` (issue 43).

A re-run reuses every stored verdict, so without the flag a config that timed out stays so; the summary says
so and names the flag. With it, only those configs are taken through the stages again, and their old rows
stay in the store until the new ones replace them. The GPU worker is faked in this process, as in
``test_warm_rerun``: a config listed in ``failing`` gets the worker's failure instead of a time.
"""

from __future__ import annotations

import sqlite3

import pytest

from tuner import sweep
from tuner.outcome import NamedError, ShapeOutcome, TrialOutcome, WorkerFailed
from tuner.runner import GpuWorker
from tuner.status import Status

FAILING = {"16x16_w1_s1": Status.TIMEOUT, "32x16_w1_s2": Status.CRASHED}


@pytest.fixture
def worker(monkeypatch):
    """A fake worker: ``state["failing"]`` fail as they say; ``state["trials"]`` the configs it was asked to time,
    ``state["seen"]`` what the store held for a config while its trial ran."""
    state = {"failing": dict(FAILING), "trials": [], "seen": {}, "db": None}

    def request(self, kind, argument=None, timeout_s=None):
        labels = [p.label for p in self.shapes]
        if kind == "device_info":
            return {"device_name": "fake", "device_uuid": None}
        if kind == "baselines":
            return {label: dict(flash_ms=1.0, cudnn_ms=1.0, flash_host_us=1.0, cudnn_host_us=1.0, timer="wall_clock")
                    for label in labels}
        if kind in ("trial", "trial_without_edges", "check"):
            config = argument if kind == "check" else argument[0]      # a trial's: (config, bounds)
            state["trials"].append(config.key)
            with sqlite3.connect(state["db"]) as connection:
                state["seen"][config.key] = connection.execute(
                    "select status from fa2_results where config = ?", (config.key,)).fetchall()
            failure = state["failing"].get(config.key)
            if failure:
                raise WorkerFailed(failure, f"injected {failure}")
            shapes = {label: ShapeOutcome(label, True, errors=(NamedError("out", 0.0, 1.0),), ms=1.0,
                                          timer="wall_clock") for label in labels}
            return TrialOutcome(Status.TIMED, "", shapes)
        raise AssertionError(f"unexpected request {kind}")

    monkeypatch.setattr(GpuWorker, "request", request)
    return state


def _statuses(query, db) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for config, status in query(db, "select config, status from fa2_results"):
        out.setdefault(config, set()).add(status)
    return out


@pytest.mark.parametrize("sampler", ["grid", "tpe"])
def test_retry_failed_runs_again_only_the_failed_configs(tiny, tmp_path, worker, sweep_args, query, capsys, sampler):
    db = tmp_path / "r.db"
    worker["db"] = db
    args = sweep_args(tiny, db, "--sampler", sampler, "--finalists", "0", "--trials", "8", "--seed", "1")
    assert sweep.main(args) == 0
    first = _statuses(query, db)
    failed = {key for key, statuses in first.items() if statuses & {"timeout", "crashed"}}
    assert failed and failed <= set(FAILING)
    out = capsys.readouterr().out
    assert "--retry-failed" in out and "stored as" in out and "timeout" in out     # the summary names the flag
    worker["failing"].clear()            # the cause is fixed
    worker["trials"].clear()
    assert sweep.main(args) == 0         # the same command reuses the verdicts: nothing is timed again
    assert worker["trials"] == [] and _statuses(query, db) == first
    assert "--retry-failed" in capsys.readouterr().out
    assert sweep.main(args + ["--retry-failed"]) == 0
    assert sorted(worker["trials"]) == sorted(failed)             # only the failed ones
    for key in failed:                   # their old rows were still stored while their retry ran
        assert {s for (s,) in worker["seen"][key]} == first[key]
    now = _statuses(query, db)
    assert all(now[key] == {"timed"} for key in failed)
    assert {k: v for k, v in now.items() if k not in failed} == {k: v for k, v in first.items() if k not in failed}
    captured = capsys.readouterr()
    assert f"{len(failed)} config(s) stored as timeout or crashed are tried again" in captured.err
    assert "--retry-failed" not in captured.out                   # none left to advise on
    worker["trials"].clear()
    assert sweep.main(args + ["--retry-failed"]) == 0             # nothing failed is left: nothing to run
    assert worker["trials"] == [] and "nothing to retry" in capsys.readouterr().err


def test_the_resume_line_after_ctrl_c_names_the_flag(tiny, tmp_path, worker, sweep_args, query, capsys,
                                                      monkeypatch):
    db = tmp_path / "r.db"
    worker["db"] = db
    args = sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")
    assert sweep.main(args) == 0
    capsys.readouterr()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep.Sweep, "run", interrupted)
    assert sweep.main(args) == 130
    err = capsys.readouterr().err
    assert "Resume with the same command" in err and "--retry-failed" in err
