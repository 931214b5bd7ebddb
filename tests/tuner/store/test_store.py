"""The SQLAlchemy store: one session scope, readers that never create, replacing rows, study names."""

from __future__ import annotations

import sqlite3

import pytest

from tuner.store import Finalist, Result, Run, Store, StoreError, StudyRecord


def _run(db: Store) -> Run:
    run = Run(study="x", target="sm_89", gpu="none", sampler="grid", command="", torch_version="",
              triton_version="", driver="")
    db.add(run)
    return run


def _result(run_id: int, config: str, shape: str = "s", status: str = "timed", ms: float | None = 1.0) -> Result:
    return Result(run_id=run_id, study="x", target="sm_89", gpu="g", torch_version="", triton_version="",
                  driver="", shape=shape, batch=1, heads=1, n_q=16, n_k=16, head_dim=16, dtype="fp32",
                  causal=False, config=config, block_m=16, block_n=16, num_warps=1, num_stages=1, status=status,
                  stage="time", ms=ms)


def test_session_rolls_back_and_reraises(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(RuntimeError, match="boom"), db.session() as session:
        session.add(Run(study="x", target="sm_89", gpu="none", sampler="grid", command="", torch_version="",
                        triton_version="", driver=""))
        session.flush()
        raise RuntimeError("boom")
    assert db.runs() == []


def test_readers_never_create_a_database(tmp_path):
    missing = tmp_path / "typo.db"
    with pytest.raises(StoreError, match="no such database file"):
        Store(f"sqlite:///{missing}", create=False)
    assert not missing.exists()
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("create table t (x int)").connection.commit()
    with pytest.raises(StoreError, match="not an fa2-tuner store"):
        Store(f"sqlite:///{other}", create=False)


@pytest.mark.parametrize("url, fragment", [
    ("not a url", "is not a database URL"),
    ("nosuchdialect://x", "cannot load a driver for 'nosuchdialect'"),
    ("postgresql+nosuchdriver://h/db", "cannot load a driver"),
])
def test_bad_urls_are_store_errors(url, fragment):
    with pytest.raises(StoreError, match=fragment):
        Store(url)


def test_a_corrupt_file_is_a_store_error(tmp_path):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        Store(f"sqlite:///{corrupt}", create=False)


def test_replace_results_replaces_one_config_shape_and_keeps_the_rest(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'r.db'}")
    run = _run(db)
    db.replace_results([_result(run.id, "a", "s1", ms=2.0), _result(run.id, "a", "s2", ms=3.0),
                        _result(run.id, "b", "s1", ms=4.0)])
    db.replace_results([_result(run.id, "a", "s1", ms=1.5)])
    stored = {(r.config, r.shape): r.ms for r in db.results("x")}
    assert stored == {("a", "s1"): 1.5, ("a", "s2"): 3.0, ("b", "s1"): 4.0}


def test_claim_study_keeps_the_first_fingerprint(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'c.db'}")
    first = db.claim_study("x", "aaa", "a.toml")
    again = db.claim_study("x", "bbb", "b.toml")
    assert (first.fingerprint, again.fingerprint, again.path) == ("aaa", "aaa", "a.toml")
    with db.session() as session:
        assert session.get(StudyRecord, "x").path == "a.toml"


def test_finalists_of_a_shape_are_replaced_together(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'f.db'}")
    run = _run(db)

    def finalist(config, rank, shape="s"):
        return Finalist(run_id=run.id, study="x", target="sm_89", gpu="g", shape=shape, config=config, rank=rank,
                        rounds=2, median_ms=1.0, min_ms=1.0, max_ms=1.0, spread=0.0, times="[1.0, 1.0]")

    db.replace_finalists([finalist("a", 1), finalist("b", 2), finalist("a", 1, "t")])
    db.replace_finalists([finalist("c", 1)])
    assert {(f.shape, f.config) for f in db.finalists("x", "sm_89")} == {("s", "c"), ("t", "a")}


def test_an_older_database_gains_new_columns_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    db = Store(f"sqlite:///{path}")
    run = _run(db)
    db.replace_results([_result(run.id, "a")])
    with sqlite3.connect(path) as connection:       # an older fa2-tuner had no host_us column
        connection.execute("alter table fa2_results drop column host_us")
    reopened = Store(f"sqlite:///{path}", create=False)
    rows = reopened.results("x")
    assert len(rows) == 1 and rows[0].host_us is None


def test_a_reader_of_a_store_older_than_a_table_gains_the_table_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    db = Store(f"sqlite:///{path}")
    db.replace_results([_result(_run(db).id, "a")])
    with sqlite3.connect(path) as connection:       # made before fa2_profiles existed
        connection.execute("drop table fa2_profiles")
    reopened = Store(f"sqlite:///{path}", create=False)
    assert reopened.profiles() == [] and len(reopened.results("x")) == 1


def test_replace_results_redoes_a_transaction_that_clashed_with_another_writer(tmp_path, monkeypatch):
    from sqlalchemy.exc import OperationalError

    db = Store(f"sqlite:///{tmp_path / 'r.db'}")
    run = _run(db)
    real_session, clashes = db.session, []

    def clashing_once():
        if not clashes:
            clashes.append(1)
            raise OperationalError("DELETE", {}, Exception("deadlock detected"))
        return real_session()

    monkeypatch.setattr(db, "session", clashing_once)
    db.replace_results([_result(run.id, "a"), _result(run.id, "b")])
    monkeypatch.setattr(db, "session", real_session)
    assert clashes and sorted(r.config for r in db.results("x")) == ["a", "b"]


def test_insert_results_keeps_the_first_writer_and_hands_the_loser_its_rows(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'i.db'}")
    run = _run(db)
    mine = [_result(run.id, "a", ms=1.0)]
    assert db.insert_results(mine) is mine
    theirs = db.insert_results([_result(run.id, "a", ms=2.0)])
    assert [r.ms for r in theirs] == [1.0] and [r.ms for r in db.results("x")] == [1.0]


def test_commits_skip_the_fsync_only_in_the_write_ahead_log_files_we_create(tmp_path):
    """NORMAL synchronisation (no fsync per commit) on the store's and Optuna's connections to a file
    the store created in WAL mode; a foreign file in SQLite's default journal keeps FULL."""
    import sqlite3

    from tuner.search import open_storage
    from tuner.store import Store

    def synchronous(engine) -> int:
        with engine.connect() as connection:
            return connection.exec_driver_sql("PRAGMA synchronous").scalar()

    ours = f"sqlite:///{tmp_path / 'ours.db'}"
    store = Store(ours)
    assert synchronous(store.engine) == 1 and synchronous(open_storage(ours).engine) == 1      # NORMAL
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("create table t (x int)")
    assert synchronous(open_storage(f"sqlite:///{foreign}").engine) == 2                      # FULL
