"""Several sweeps on one study at once, against SQLite and a real PostgreSQL server: three
processes (one killed with kill -9 while it holds a trial), budget-only and full-pipeline
(in the interpreter), and one process driving two workers. Afterwards every config of the
space is stored exactly once per shape, none is lost, every Optuna trial is finished and
no log holds an error.

PostgreSQL: set FA2_TUNER_TEST_PG to a server URL (``scripts/pg_throwaway.sh`` starts one
and prints it); each test makes a database of its own and drops it. Without it, the
PostgreSQL cases skip, saying so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError, ProgrammingError

from tuner.runner import FAULT_ENV
from tuner.study import load

PG_ENV = "FA2_TUNER_TEST_PG"
CROWD_STUDY = """
name = "crowd"
[problem]
batch = 1
heads = 2
n = 64
head_dim = 16
dtype = "fp32"
causal = [false, true]
[space]
block_m = [16, 32, 64]
block_n = [16, 32]
num_warps = [1, 2]
num_stages = [1]
tma = [false]
persistent = [0]
[timing]
warmup_ms = 1
rep_ms = 1
"""
LOG_ERRORS = ("Traceback", "database is locked", "Error", "error:")


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path):
    """A fresh, empty database URL of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'crowd.db'}"
        return
    server = os.environ.get(PG_ENV)
    if not server:
        pytest.skip(f"no PostgreSQL server: set {PG_ENV}=postgresql+psycopg://... (scripts/pg_throwaway.sh "
                    f"starts one and prints the URL)")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[postgres]'")
    name = f"fa2_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    yield server.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture
def crowd(tmp_path) -> Path:
    path = tmp_path / "crowd.toml"
    path.write_text(CROWD_STUDY)
    return path


def _start(study: Path, url: str, log: Path, *extra: str, hang: bool = False) -> subprocess.Popen:
    """A sweep process; ``hang``: its worker hangs on every config, so it is sure to hold a
    trial in flight when it is killed."""
    command = [sys.executable, "-m", "tuner.sweep", "--gpu", "sm_89", "--study", str(study), "--storage", url,
               "--no-outputs", "--trial-timeout", "120", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FA2_TUNER_HEARTBEAT": "1,4,1"}
    if hang:
        env[FAULT_ENV] = ",".join(f"{c.key}:hang" for c in load(str(study)).space.all_configs())
    return subprocess.Popen(command, cwd=log.parent, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _query(url: str, sql: str, **params) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    except (OperationalError, ProgrammingError):    # the tables are not there yet
        return []
    finally:
        engine.dispose()


def _wait_for_a_trial_of(process: subprocess.Popen, url: str, timeout_s: float = 300) -> list[int]:
    """Trial numbers the process holds (RUNNING, owned by it) once it holds one and others are stored."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and process.poll() is None:
        held = _query(url, "select t.number from trials t join trial_user_attributes a on a.trial_id = t.trial_id "
                           "where t.state = 'RUNNING' and a.key = 'owner' and a.value_json like :owner",
                      owner=f'%:{process.pid}"')
        stored = _query(url, "select count(distinct config) from fa2_results where status = 'timed'")
        if held and stored and stored[0][0] >= 2:
            return [number for (number,) in held]
        time.sleep(0.2)
    raise AssertionError(f"process {process.pid} never held a trial while others were stored")


def _assert_each_config_stored_once(url: str, study: Path) -> None:
    space = load(str(study)).space.all_configs()
    rows = _query(url, "select config, shape, count(*) from fa2_results group by config, shape")
    assert {count for _, _, count in rows} == {1}, "a config stored twice for a shape"
    assert {config for config, _, _ in rows} == {c.key for c in space}, "a config of the space was lost"
    assert len(rows) == 2 * len(space)


def _assert_logs_clean(logs: list[Path]) -> None:
    for log in logs:
        content = log.read_text()
        bad = [line for line in content.splitlines() if any(word in line for word in LOG_ERRORS)]
        assert not bad, f"{log.name}:\n" + "\n".join(bad[:10])


def test_three_sweeps_one_killed_store_every_config_once_and_finish_every_trial(database, crowd, tmp_path):
    logs = [tmp_path / f"sweep{i}.log" for i in range(3)]
    processes = [_start(crowd, database, log, "--device", "cpu", "--sampler", "grid", "--finalists", "0",
                        "--batch", "2", hang=i == 0) for i, log in enumerate(logs)]
    held = _wait_for_a_trial_of(processes[0], database)
    os.killpg(processes[0].pid, signal.SIGKILL)        # the sweep, its worker and its compilers
    processes[0].wait()
    for process, log in zip(processes[1:], logs[1:]):
        assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    _assert_each_config_stored_once(database, crowd)
    states = dict(_query(database, "select state, count(*) from trials group by state"))
    assert set(states) <= {"COMPLETE", "FAIL"} and "RUNNING" not in states and "WAITING" not in states, states
    # A survivor finished each trial the killed sweep held: took it over as an orphan (its
    # process is gone) and completed it, or, if its heartbeat went stale first, failed it and
    # completed the retry Optuna queued for it.
    finished = dict(_query(database, "select number, state from trials"))
    retries = _query(database, "select t.state, a.value_json from trials t join trial_system_attributes a "
                               "on a.trial_id = t.trial_id where a.key = 'retry_history'")
    retried = {int(n) for state, history in retries if state == "COMPLETE" for n in json.loads(history)}
    assert all(finished[number] == "COMPLETE" or (finished[number] == "FAIL" and number in retried)
               for number in held), (held, finished, retries)
    _assert_logs_clean(logs[1:])


def test_three_budget_only_sweeps_store_the_space_once(database, crowd, tmp_path):
    logs = [tmp_path / f"budget{i}.log" for i in range(3)]
    processes = [_start(crowd, database, log) for log in logs]
    for process, log in zip(processes, logs):
        assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    _assert_each_config_stored_once(database, crowd)
    assert {status for (status,) in _query(database, "select status from fa2_runs")} == {"budget-only"}
    _assert_logs_clean(logs)
    # the Optuna view of the verdicts ends whole, once, whichever sweep wrote it last
    assert _query(database, "select count(*) from trials t join studies s on s.study_id = t.study_id where "
                            "s.study_name = 'crowd@sm_89-budget'") == [(len(load(str(crowd)).space.all_configs()),)]


def test_one_sweep_drives_two_workers_on_one_study(crowd, tmp_path):
    from tuner import sweep

    url = f"sqlite:///{tmp_path / 'two.db'}"
    assert sweep.main(["--gpu", "sm_89", "--study", str(crowd), "--storage", url, "--no-outputs", "--device", "cpu",
                       "--sampler", "grid", "--finalists", "2", "--rounds", "2", "--workers", "2"]) == 0
    _assert_each_config_stored_once(url, crowd)
    devices = {d for (d,) in _query(url, "select device_index from fa2_results where status = 'timed'")}
    assert devices == {0, 1}, devices
    assert _query(url, "select state, count(*) from trials group by state") == [("COMPLETE", 12)]
    assert {d for (d,) in _query(url, "select device_index from fa2_baselines")} == {0, 1}
    # each shape's finalists re-timed together, the two shapes dealt out to the two devices: its 2
    # fastest, and the best config across shapes where that is not among them (interpreter timings
    # are noise, so that third one comes and goes: select_finalists says which to expect)
    from tuner.finalists import select_finalists
    from tuner.store import Store

    chosen = select_finalists(Store(url, create=False).results(), 2)
    assert sorted(chosen) == ["B1 H2 Nq64 Nk64 D16 fp32", "B1 H2 Nq64 Nk64 D16 fp32 causal"]
    assert all(len(keys) in (2, 3) for keys in chosen.values()), chosen
    stored = _query(url, "select shape, config from fa2_finalists order by shape, config")
    assert stored == sorted((shape, key) for shape, keys in chosen.items() for key in keys)


def test_a_config_asked_twice_at_once_is_timed_once(crowd, tmp_path):
    import optuna

    from tuner import sweep

    url = f"sqlite:///{tmp_path / 'twice.db'}"
    study = optuna.create_study(study_name="crowd@sm_89-interpreter", storage=url, direction="maximize")
    twin = {"block_m": 32, "block_n": 32, "num_warps": 1, "num_stages": 1, "tma": False, "warp_specialize": False,
            "maxnreg": 0, "persistent": 0}
    study.enqueue_trial(twin)
    study.enqueue_trial(twin)        # both are asked first, and go to the two workers together
    assert sweep.main(["--gpu", "sm_89", "--study", str(crowd), "--storage", url, "--no-outputs", "--device", "cpu",
                       "--sampler", "grid", "--finalists", "0", "--workers", "2"]) == 0
    _assert_each_config_stored_once(url, crowd)
    trials = [t for t in optuna.load_study(study_name="crowd@sm_89-interpreter", storage=url).trials
              if t.user_attrs.get("config") == "32x32_w1_s1"]
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)    # two enqueued, one of the grid
    assert sorted(t.user_attrs["reused"] for t in trials) == [False, True, True]
    timed_by = {n for (n,) in _query(url, "select optuna_trial from fa2_results where config = '32x32_w1_s1'")}
    assert timed_by <= {0, 1} and len(timed_by) == 1


def test_a_trial_that_raises_does_not_leave_its_twin_waiting(crowd, tmp_path, monkeypatch):
    """The first of two trials of one config dies before Optuna hears of it (a BrokenPipeError printing, say): its
    Optuna trial stays RUNNING, so the second, waiting for its rows, used to wait 3 x --trial-timeout (here 3 x 60 s)
    before the sweep could end; now the failure ends the wait at once and is what the sweep raises."""
    import optuna

    from tuner import sweep
    from tuner.runner import GpuWorker

    url = f"sqlite:///{tmp_path / 'dies.db'}"
    study = optuna.create_study(study_name="crowd@sm_89-interpreter", storage=url, direction="maximize")
    twin = {"block_m": 32, "block_n": 32, "num_warps": 1, "num_stages": 1, "tma": False, "warp_specialize": False,
            "maxnreg": 0, "persistent": 0}
    study.enqueue_trial(twin)
    study.enqueue_trial(twin)
    trial = GpuWorker.trial

    def dies_on_the_twin(self, config, **kw):
        if config.key == "32x32_w1_s1":
            time.sleep(2)          # the other trial of it has compiled by now and waits for this one's rows
            raise BrokenPipeError("the reader went away")
        return trial(self, config, **kw)

    monkeypatch.setattr(GpuWorker, "trial", dies_on_the_twin)
    started = time.monotonic()
    with pytest.raises(BrokenPipeError, match="the reader went away"):
        sweep.main(["--gpu", "sm_89", "--study", str(crowd), "--storage", url, "--no-outputs", "--device", "cpu",
                    "--sampler", "grid", "--finalists", "0", "--workers", "2", "--trial-timeout", "60"])
    assert time.monotonic() - started < 60
