"""Behaviour that must survive refactors, held to what the code produced before them.

The golden files in ``tests/fixtures/unchanged/`` were written by the code of commit 227bf39
(before issue 21's refactor), from inputs that live in this repository:

* ``emit_*.py.txt``: ``tuner.emit``'s list from a store built out of the H200 rows of
  ``tests/fixtures/h200_results.json.gz``, with finalists made up for one shape and knob variants
  of the D=128 rows made up as study ``hopper_knobs``, byte for byte;
* ``summary_article.txt``: the sweep's end-of-run summary of the same store;
* ``fingerprints.json``: every shipped study's fingerprint (a changed one would refuse
  every stored study);
* ``budget_model.json.gz``: the budget's model-only verdict on every config of the
  default and the ``hopper_knobs`` spaces for three targets and two head dims;
* ``optuna_params.json``: the parameters Optuna is asked for (their names and
  distributions), so that stored Optuna studies resume.

The store is made from :data:`SCHEMA_BEFORE`, the DDL the store had before issue 21
(SQLite, as ``sqlite_master`` holds it), and its rows are written with raw SQL: so these
tests also show that a store written before a change opens after it.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES

GOLDEN = FIXTURES / "unchanged"
GPU = "NVIDIA H200 (sm_90)"
COMMAND = "python -m tuner.emit --study article --gpu sm_90 --storage sqlite:///h200.db"

# The fa2_ tables as the code before issue 21 created them (SQLite's own text of the DDL).
SCHEMA_BEFORE = """
CREATE TABLE fa2_baselines (
	id INTEGER NOT NULL, run_id INTEGER NOT NULL, shape VARCHAR(96) NOT NULL, phase VARCHAR(8),
	flash_ms FLOAT, cudnn_ms FLOAT, flash_host_us FLOAT, cudnn_host_us FLOAT, timer VARCHAR(16),
	device_index INTEGER, device_uuid VARCHAR(64), measured_at DATETIME NOT NULL,
	PRIMARY KEY (id), FOREIGN KEY(run_id) REFERENCES fa2_runs (id)
);
CREATE TABLE fa2_finalists (
	id INTEGER NOT NULL, run_id INTEGER NOT NULL, study VARCHAR(128) NOT NULL, target VARCHAR(16) NOT NULL,
	gpu VARCHAR(128) NOT NULL, shape VARCHAR(96) NOT NULL, config VARCHAR(32) NOT NULL, rank INTEGER NOT NULL,
	rounds INTEGER NOT NULL, median_ms FLOAT NOT NULL, min_ms FLOAT NOT NULL, max_ms FLOAT NOT NULL,
	spread FLOAT NOT NULL, times TEXT NOT NULL, timer VARCHAR(16), flash_ms FLOAT, cudnn_ms FLOAT,
	created_at DATETIME NOT NULL,
	PRIMARY KEY (id), UNIQUE (study, target, gpu, shape, config), FOREIGN KEY(run_id) REFERENCES fa2_runs (id)
);
CREATE TABLE fa2_profiles (
	id INTEGER NOT NULL, study VARCHAR(128) NOT NULL, target VARCHAR(16) NOT NULL, gpu VARCHAR(128) NOT NULL,
	shape VARCHAR(96) NOT NULL, kind VARCHAR(16) NOT NULL, config VARCHAR(32) NOT NULL, rank INTEGER,
	status VARCHAR(16) NOT NULL, reason TEXT NOT NULL, kernel_name TEXT, duration_us FLOAT, tensor_pct FLOAT,
	sm_pct FLOAT, dram_pct FLOAT, dram_read_bytes FLOAT, dram_write_bytes FLOAT, l2_hit_pct FLOAT,
	warps_active_pct FLOAT, registers INTEGER, smem_bytes INTEGER, grid_size INTEGER, block_size INTEGER,
	sm_clock_mhz FLOAT, stalls TEXT, ncu_version VARCHAR(64), torch_version VARCHAR(64),
	triton_version VARCHAR(64), driver VARCHAR(64), created_at DATETIME NOT NULL,
	PRIMARY KEY (id), UNIQUE (study, target, gpu, shape, kind, config)
);
CREATE TABLE fa2_results (
	id INTEGER NOT NULL, run_id INTEGER NOT NULL, optuna_trial INTEGER, study VARCHAR(128) NOT NULL,
	target VARCHAR(16) NOT NULL, gpu VARCHAR(128) NOT NULL, torch_version VARCHAR(64) NOT NULL,
	triton_version VARCHAR(64) NOT NULL, driver VARCHAR(64) NOT NULL, shape VARCHAR(96) NOT NULL,
	batch INTEGER NOT NULL, heads INTEGER NOT NULL, n_q INTEGER NOT NULL, n_k INTEGER NOT NULL,
	head_dim INTEGER NOT NULL, dtype VARCHAR(8) NOT NULL, causal BOOLEAN NOT NULL, config VARCHAR(32) NOT NULL,
	block_m INTEGER NOT NULL, block_n INTEGER NOT NULL, num_warps INTEGER NOT NULL, num_stages INTEGER NOT NULL,
	tma BOOLEAN, warp_specialize BOOLEAN, maxnreg INTEGER, persistent INTEGER, status VARCHAR(24) NOT NULL,
	stage VARCHAR(16) NOT NULL, reason TEXT NOT NULL, budget_verdict VARCHAR(24), model_smem_bytes INTEGER,
	smem_bytes INTEGER, smem_limit_bytes INTEGER, registers INTEGER, spill_bytes INTEGER, binary VARCHAR(64),
	err_out FLOAT, err_lse FLOAT, err_bound FLOAT, lse_bound FLOAT, ragged_err_out FLOAT, ragged_err_lse FLOAT,
	ms FLOAT, host_us FLOAT, timer VARCHAR(16), tflops FLOAT, flash_ms FLOAT, cudnn_ms FLOAT, pct_flash FLOAT,
	pct_cudnn FLOAT, device_index INTEGER, device_name VARCHAR(128), device_uuid VARCHAR(64), host VARCHAR(128),
	check_s FLOAT, time_s FLOAT, created_at DATETIME NOT NULL,
	PRIMARY KEY (id), UNIQUE (study, target, gpu, shape, config), FOREIGN KEY(run_id) REFERENCES fa2_runs (id)
);
CREATE TABLE fa2_runs (
	id INTEGER NOT NULL, study VARCHAR(128) NOT NULL, target VARCHAR(16) NOT NULL, gpu VARCHAR(128) NOT NULL,
	sampler VARCHAR(16) NOT NULL, command TEXT NOT NULL, torch_version VARCHAR(64) NOT NULL,
	triton_version VARCHAR(64) NOT NULL, driver VARCHAR(64) NOT NULL, started_at DATETIME NOT NULL,
	finished_at DATETIME, status VARCHAR(32) NOT NULL,
	PRIMARY KEY (id)
);
CREATE TABLE fa2_studies (
	name VARCHAR(128) NOT NULL, fingerprint VARCHAR(64) NOT NULL, path TEXT NOT NULL, created_at DATETIME NOT NULL,
	PRIMARY KEY (name)
);
CREATE INDEX ix_fa2_baselines_run_id ON fa2_baselines (run_id);
CREATE INDEX ix_fa2_finalists_run_id ON fa2_finalists (run_id);
CREATE INDEX ix_fa2_finalists_study ON fa2_finalists (study);
CREATE INDEX ix_fa2_profiles_study ON fa2_profiles (study);
CREATE INDEX ix_fa2_results_run_id ON fa2_results (run_id);
CREATE INDEX ix_fa2_results_status ON fa2_results (status);
CREATE INDEX ix_fa2_results_study ON fa2_results (study);
CREATE INDEX ix_fa2_runs_study ON fa2_runs (study);
"""
# One shape's finalists, made up (the fixture holds none): 5 rounds each, the runner-up
# within the noise of the winner, so the emitted list keeps both.
FINALIST_SHAPE = "B4 H8 Nq4096 Nk4096 D64 bf16 causal"
FINALIST_FACTORS = ((1.00, 1.01, 0.99, 1.00, 1.02), (1.004, 0.995, 1.01, 1.00, 1.00), (1.06, 1.05, 1.07, 1.06, 1.06))


def _sql_value(value):
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        return value.replace("T", " ")           # SQLAlchemy's SQLite datetime text
    return value


def _insert(connection, table: str, row: dict) -> None:
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    connection.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", [_sql_value(v) for v in row.values()])


def _finalists(results: list[dict]) -> list[dict]:
    timed = sorted((r for r in results if r["shape"] == FINALIST_SHAPE and r["status"] == "timed"),
                   key=lambda r: (r["ms"], r["config"]))[:len(FINALIST_FACTORS)]
    rows = []
    for rank, (row, factors) in enumerate(zip(timed, FINALIST_FACTORS), start=1):
        times = [round(timed[0]["ms"] * f, 6) for f in factors]      # all near the fastest: a close race
        median = sorted(times)[2]
        rows.append(dict(run_id=row["run_id"], study="article", target="sm_90", gpu=GPU, shape=FINALIST_SHAPE,
                         config=row["config"], rank=rank, rounds=5, median_ms=median, min_ms=min(times),
                         max_ms=max(times), spread=(max(times) - min(times)) / median, times=json.dumps(times),
                         timer="cuda_graph", flash_ms=0.2950, cudnn_ms=0.1830,
                         created_at="2026-11-30T11:00:00.000000"))
    return rows


# Knob variants made up from the D=128 rows, stored under the hopper_knobs study: config key
# suffix -> (its knob columns, the factor on its time, which tiles get it).
KNOB_VARIANTS = {"_tma": (dict(tma=1), 0.93, lambda r: True),
                 "_tma_p2": (dict(tma=1, persistent=2), 0.90, lambda r: r["block_m"] == 128),
                 "_r168": (dict(maxnreg=168), 0.905, lambda r: r["num_warps"] >= 16),
                 "_tma_ws_p1": (dict(tma=1, warp_specialize=1, persistent=1), 0.95, lambda r: r["num_warps"] == 8)}


def _knob_rows(results: list[dict]) -> list[dict]:
    rows, next_id = [], max(r["id"] for r in results) + 1
    for row in results:
        if row["study"] != "head_dim_128":
            continue
        for suffix, (knobs, factor, applies) in KNOB_VARIANTS.items():
            if not applies(row):
                continue
            copy = dict(row, id=next_id, study="hopper_knobs", config=row["config"] + suffix, **knobs)
            next_id += 1
            if copy["ms"]:
                copy.update(ms=row["ms"] * factor, tflops=row["tflops"] / factor, pct_flash=row["pct_flash"] / factor,
                            pct_cudnn=row["pct_cudnn"] / factor, binary=None)
            rows.append(copy)
    return rows


def build_store_before(path: Path, with_finalists: bool = True) -> str:
    """A SQLite store of the schema before issue 21 holding the H200 fixture's rows; its URL."""
    with gzip.open(FIXTURES / "h200_results.json.gz", "rt") as handle:
        data = json.load(handle)
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA_BEFORE)
        for run in data["runs"]:
            _insert(connection, "fa2_runs", run)
        for row in data["results"] + _knob_rows(data["results"]):
            _insert(connection, "fa2_results", row)
        if with_finalists:
            for row in _finalists(data["results"]):
                _insert(connection, "fa2_finalists", row)
    return f"sqlite:///{path}"


def emitted_texts(url: str) -> dict[str, str]:
    from tuner import emit
    from tuner.gpus import GpuSpec
    from tuner.store import Store
    from tuner.study import load

    db = Store(url, create=False)
    target = GpuSpec.from_name("sm_90")
    return {name: emit.emit(db, load(name), target, None, 12 if name == "hopper_knobs" else 3,
                            COMMAND.replace("article", name)).text
            for name in ("article", "head_dim_128", "hopper_knobs")}


def summary_text(url: str) -> str:
    from tuner.gpus import GpuSpec
    from tuner.records import RunContext
    from tuner.report import summary
    from tuner.store import Store
    from tuner.study import load
    from tuner.winners import verdicts_of

    db = Store(url, create=False)
    ctx = RunContext(study=load("article"), target=GpuSpec.from_name("sm_90"), gpu_label=GPU, run_id=2,
                     env={"torch": "2.11.0+cu130", "triton": "3.6.0", "driver": "580.159.04",
                          "date": "2026-11-30 10:38 UTC"})
    rows = db.results("article", "sm_90", GPU)
    return summary(ctx, rows, Counter({"timed": 3}), None, verdicts_of(db, "article", "sm_90", GPU))


def fingerprints() -> dict[str, str]:
    from tuner.study import load, shipped

    return {name: load(name).fingerprint for name in shipped()}


def budget_model(article_space, knobs_space) -> dict[str, dict[str, list]]:
    """Model-only verdicts: target/head dim -> config key -> [verdict, model bytes, limit, reason]."""
    from tuner import budget
    from tuner.gpus import GpuSpec
    from tuner.problem import Problem

    configs = list(dict.fromkeys(article_space.all_configs() + knobs_space.all_configs()))
    table = {}
    for target in ("sm_80", "sm_89", "sm_90"):
        gpu = GpuSpec.from_name(target)
        for head_dim in (64, 128):
            problem = Problem(head_dim=head_dim)
            results = [budget.verdict(c, problem, gpu, None) for c in configs]
            table[f"{target} D{head_dim}"] = {c.key: [str(r.verdict), r.model_bytes, r.limit_bytes, r.reason]
                                              for c, r in zip(configs, results)}
    return table


def optuna_params(spaces: dict) -> dict[str, dict[str, str]]:
    from optuna.distributions import distribution_to_json

    from tuner import search

    return {f"{name} {sampler}": {param: distribution_to_json(dist) for param, dist in
                                  search.distributions(space, sampler).items()}
            for name, space in spaces.items() for sampler in ("tpe", "grid")}


# ------------------------------------------------------------------------------ the tests


@pytest.fixture(scope="module")
def store_before(tmp_path_factory) -> str:
    return build_store_before(tmp_path_factory.mktemp("before") / "h200.db")


@pytest.mark.parametrize("study", ["article", "head_dim_128", "hopper_knobs"])
def test_emit_writes_the_same_list_byte_for_byte(store_before, study):
    assert emitted_texts(store_before)[study] == (GOLDEN / f"emit_{study}_sm_90.py.txt").read_text()


def test_the_summary_reads_the_same(store_before):
    assert summary_text(store_before) == (GOLDEN / "summary_article.txt").read_text()


def test_a_store_written_before_opens_with_its_rows_and_gains_the_new_columns(store_before):
    from sqlalchemy import inspect

    from tuner.store import Result, Store

    db = Store(store_before, create=False)
    assert len(db.results("article")) == 1500 and len(db.finalists("article", "sm_90")) == 3
    present = {c["name"] for c in inspect(db.engine).get_columns("fa2_results")}
    assert {c.name for c in Result.__table__.columns} <= present


def _postgresql_schema_before() -> list[str]:
    """:data:`SCHEMA_BEFORE` as the code before issue 21 made it on PostgreSQL (SERIAL ids, TIMESTAMP)."""
    text = (SCHEMA_BEFORE.replace("\tid INTEGER NOT NULL,", "\tid SERIAL NOT NULL,")
            .replace("DATETIME", "TIMESTAMP WITHOUT TIME ZONE").replace("FLOAT", "DOUBLE PRECISION")
            .replace(" binary VARCHAR", ' "binary" VARCHAR'))                  # a reserved word there
    statements = [s.strip() for s in text.split(";") if s.strip()]
    return sorted(statements, key=lambda s: not s.startswith("CREATE TABLE fa2_runs"))   # referred to by the rest


def test_a_postgresql_store_written_before_widens_its_config_keys_and_gains_the_columns():
    """PostgreSQL enforces VARCHAR lengths: the migration widens ``config`` (32 before) and adds the
    new columns; the rows stay. Needs FA2_TUNER_TEST_PG (scripts/pg_throwaway.sh), else skips."""
    import os
    import uuid

    from sqlalchemy import create_engine, inspect, text

    server = os.environ.get("FA2_TUNER_TEST_PG")
    if not server:
        pytest.skip("no PostgreSQL server: set FA2_TUNER_TEST_PG (scripts/pg_throwaway.sh prints one)")
    pytest.importorskip("psycopg")
    from tuner.store import CONFIG_KEY_LENGTH, Result, Store

    name = f"fa2_before_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    url = server.rsplit("/", 1)[0] + f"/{name}"
    try:
        before = create_engine(url)
        with before.begin() as connection:
            for statement in _postgresql_schema_before():
                connection.exec_driver_sql(statement)
            connection.exec_driver_sql(
                "INSERT INTO fa2_runs (study, target, gpu, sampler, command, torch_version, triton_version, driver, "
                "started_at, status) VALUES ('x', 'sm_90', 'g', 'grid', '', '', '', '', now(), 'finished')")
        before.dispose()
        db = Store(url, create=False)
        columns = {c["name"]: c for c in inspect(db.engine).get_columns("fa2_results")}
        assert columns["config"]["type"].length == CONFIG_KEY_LENGTH and {"kernel", "pass_", "params"} <= set(columns)
        long_key = "128x128_w8_s3_tma_ws_r168_p2" + "_x" * 20          # longer than 32
        db.add(Result(run_id=db.runs()[0].id, study="x", target="sm_90", gpu="g", torch_version="", triton_version="",
                      driver="", shape="s", batch=1, heads=1, n_q=16, n_k=16, head_dim=16, dtype="fp32",
                      causal=False, config=long_key, block_m=16, block_n=16, num_warps=1, num_stages=1,
                      status="timed", stage="time"))
        assert [r.config for r in db.results("x")] == [long_key]
        db.engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


def test_every_shipped_study_keeps_its_fingerprint():
    """Every study shipped before the change keeps its fingerprint (studies added since have none to keep)."""
    before = json.loads((GOLDEN / "fingerprints.json").read_text())
    now = fingerprints()
    assert {name: now.get(name) for name in before} == before


def test_the_budget_model_judges_every_config_as_before():
    from tuner.study import load

    with gzip.open(GOLDEN / "budget_model.json.gz", "rt") as handle:
        expected = json.load(handle)
    got = budget_model(load("article").space, load("hopper_knobs").space)
    assert got.keys() == expected.keys()
    for case, verdicts in expected.items():
        differ = [key for key in verdicts if got[case].get(key) != verdicts[key]]
        assert not differ and got[case].keys() == verdicts.keys(), (case, differ[:5])


def test_optuna_is_asked_for_the_same_parameters():
    from tuner.study import load

    spaces = {name: load(name).space for name in ("article", "hopper_knobs")}
    assert optuna_params(spaces) == json.loads((GOLDEN / "optuna_params.json").read_text())


def write_golden(folder: Path = GOLDEN) -> None:       # pragma: no cover (run once, by hand, on the old code)
    """``python -c "from tests.tuner.test_unchanged import write_golden; write_golden()"``, on the old code."""
    import tempfile

    from tuner.study import load

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        url = build_store_before(Path(scratch) / "h200.db")
        for name, text in emitted_texts(url).items():
            (folder / f"emit_{name}_sm_90.py.txt").write_text(text)
        (folder / "summary_article.txt").write_text(summary_text(url))
    (folder / "fingerprints.json").write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
    with gzip.GzipFile(folder / "budget_model.json.gz", "wb", mtime=0) as handle:
        handle.write(json.dumps(budget_model(load("article").space, load("hopper_knobs").space),
                                sort_keys=True).encode())
    spaces = {name: load(name).space for name in ("article", "hopper_knobs")}
    (folder / "optuna_params.json").write_text(json.dumps(optuna_params(spaces), indent=1, sort_keys=True) + "\n")
