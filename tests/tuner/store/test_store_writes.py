"""The store's writes where sweeps meet: rows of two GPUs side by side, a clash that comes after
the rows were flushed, and the GPU whose rows the outputs read."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from sqlalchemy.exc import OperationalError

from tuner import winners
from tuner.store import Finalist, Result, Run, Store


def _run(db: Store) -> int:
    run = Run(study="x", target="sm_90", gpu="none", sampler="grid", command="", torch_version="", triton_version="",
              driver="")
    db.add(run)
    return run.id


def _row(run_id: int, config: str, gpu: str, shape: str = "s", ms: float | None = 1.0, status: str = "timed"):
    return Result(run_id=run_id, study="x", target="sm_90", gpu=gpu, torch_version="", triton_version="", driver="",
                  shape=shape, batch=1, heads=1, n_q=16, n_k=16, head_dim=16, dtype="fp32", causal=False,
                  config=config, block_m=16, block_n=16, num_warps=1, num_stages=1, status=status, stage="time", ms=ms)


def test_rows_of_two_gpus_are_kept_apart_when_one_gpus_rows_are_replaced(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'g.db'}")
    run = _run(db)
    db.replace_results([_row(run, "a", "H200"), _row(run, "a", "H100", ms=2.0), _row(run, "b", "H100", ms=3.0)])
    db.replace_results([_row(run, "a", "H200", ms=0.5)])
    assert {(r.gpu, r.config): r.ms for r in db.results("x")} == {("H200", "a"): 0.5, ("H100", "a"): 2.0,
                                                                  ("H100", "b"): 3.0}
    assert [r.ms for r in db.results("x", "sm_90", "H100")] == [2.0, 3.0]
    assert [r.ms for r in db.results("x", "sm_90", "H200")] == [0.5]
    assert db.results("x", "sm_89") == [] and db.results("y") == []
    assert [r.ms for r in db.config_rows("x", "sm_90", "H100", "a")] == [2.0]


def test_insert_results_of_one_config_on_another_gpu_is_no_clash(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'i.db'}")
    run = _run(db)
    mine = [_row(run, "a", "H200")]
    theirs = [_row(run, "a", "H100", ms=2.0)]
    assert db.insert_results(mine) is mine and db.insert_results(theirs) is theirs
    assert sorted(r.ms for r in db.results("x")) == [1.0, 2.0]


def test_finalists_are_read_and_replaced_per_gpu(tmp_path):
    db = Store(f"sqlite:///{tmp_path / 'f.db'}")
    run = _run(db)

    def finalist(gpu, config):
        return Finalist(run_id=run, study="x", target="sm_90", gpu=gpu, shape="s", config=config, rank=1, rounds=1,
                        median_ms=1.0, min_ms=1.0, max_ms=1.0, spread=0.0, times="[1.0]")

    db.replace_finalists([finalist("H200", "a"), finalist("H100", "b")])
    db.replace_finalists([finalist("H200", "c")])
    assert [f.config for f in db.finalists("x", "sm_90", "H100")] == ["b"]
    assert [f.config for f in db.finalists("x", "sm_90", "H200")] == ["c"]


def test_the_outputs_read_the_gpu_with_the_most_timed_rows_and_only_its_rows(tmp_path):
    rows = [_row(1, "a", "H100", "s"), _row(1, "b", "H100", "s", ms=None, status="crashed"),
            _row(1, "c", "H100", "s", ms=None, status="crashed"),
            _row(1, "a", "H200", "s", ms=0.9), _row(1, "b", "H200", "s", ms=0.8), _row(1, "z", "none", "s", None,
                                                                                        "pending")]
    gpu, mine = winners.measured_on(rows)
    assert gpu == "H200" and {r.config for r in mine} == {"a", "b"} and {r.gpu for r in mine} == {"H200"}
    gpu, theirs = winners.measured_on(rows, "H100")
    assert gpu == "H100" and len(theirs) == 3 and winners.winner(theirs, "s") == "a"
    assert winners.winner(mine, "s") == "b"
    with pytest.raises(ValueError, match="H300"):
        winners.measured_on(rows, "H300")
    assert winners.measured_on(rows[-1:]) == (None, [])


def test_a_clash_after_the_rows_were_flushed_is_redone_with_fresh_rows(tmp_path, monkeypatch):
    """The first transaction flushes the rows (they get ids), then clashes with another writer
    and rolls back; meanwhile that writer takes those ids. The redo must insert new objects:
    the old ones still carry the ids, which are now another row's."""
    db = Store(f"sqlite:///{tmp_path / 'c.db'}")
    run = _run(db)
    real_session, clashes = db.session, []

    @contextmanager
    def flush_then_clash():
        if clashes:
            with real_session() as session:
                yield session
            return
        with real_session() as session:
            yield session
            session.flush()
            clashes.append(sorted(o.id for o in session.identity_map.values() if isinstance(o, Result)))
            session.rollback()
            db.add(*[_row(run, f"other{i}", "H100") for i in range(2)])     # the other writer takes those ids
            raise OperationalError("INSERT", {}, Exception("database is locked"))

    monkeypatch.setattr(db, "session", flush_then_clash)
    db.replace_results([_row(run, "a", "H200"), _row(run, "b", "H200", ms=2.0)])
    monkeypatch.setattr(db, "session", real_session)
    assert clashes and all(i is not None for i in clashes[0])
    stored = {(r.gpu, r.config): r.ms for r in db.results("x")}
    assert stored == {("H200", "a"): 1.0, ("H200", "b"): 2.0, ("H100", "other0"): 1.0, ("H100", "other1"): 1.0}
