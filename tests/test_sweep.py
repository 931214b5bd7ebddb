"""The sweep: study files, bad input, the isolated worker, resume after kill -9, the store.

Without a GPU the sweep's check-and-time stages run in Triton's interpreter
(``--device cpu``, a test-only switch): the numbers are meaningless, the plumbing is
the real one. The budget and compile stages cross-compile for sm_89 as they would
anywhere. The GPU test at the end runs a small sweep on the device.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
import torch

from tuner import search, store as storage, sweep
from tuner._budget import CompileInfo, CompilePool, Problem
from tuner.runner import FAULT_ENV, GpuWorker, gate_shape
from tuner.space import Config
from tuner.study import StudyError, load

ROOT = Path(__file__).resolve().parent.parent

TINY = """
name = "tiny"
[problem]
batch = 1
heads = 2
n = 64
head_dim = 16
dtype = "fp32"
causal = [false, true]
[space]
block_m = [16, 32]
block_n = [16, 32]
num_warps = [1]
num_stages = [1, 2]
restrictions = ["block_m >= block_n"]
[timing]
warmup_ms = 1
rep_ms = 1
"""
TINY_CONFIGS = 8          # 2 x 2 x 1 x 2
TINY_RESTRICTED = 2       # 16x32 at two stage counts


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def _sweep_args(study: Path, db: Path, *extra: str) -> list[str]:
    return ["--gpu", "sm_89", "--study", str(study), "--storage", f"sqlite:///{db}", "--no-outputs",
            "--device", "cpu", "--trial-timeout", "120", *extra]


def _query(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


# ----------------------------------------------------------------------------- studies


@pytest.mark.parametrize("name", ["article", "head_dim_128", "long_context"])
def test_shipped_studies_load(name):
    study = load(name)
    assert study.shapes and study.configs()
    # The gate shape must run the binary that is timed (same JIT specialisation).
    from tuner._budget import specialisation

    assert all(specialisation(gate_shape(s)) == specialisation(s) for s in study.shapes)


def test_article_study_is_the_article_table():
    study = load("article")
    assert {(s.n_q, s.causal) for s in study.shapes} == {(n, c) for n in (512, 1024, 2048, 4096)
                                                         for c in (False, True)}
    assert {(s.batch, s.heads, s.head_dim, s.dtype) for s in study.shapes} == {(4, 8, 64, "bf16")}
    assert len(study.space.all_configs()) == 750
    assert len(study.variants()) == 2     # one binary per causal flag for all four lengths


@pytest.mark.parametrize("body, expected", [
    ("[problem]\ndtype = 'bf32'", ["[problem] dtype = 'bf32'", "fp32, fp16, bf16"]),
    ("[problem]\nhead_dim = 96", ["head_dim = 96", "(16, 32, 64, 128, 256)"]),
    ("[problem]\nbatchsize = 4", ["unknown field 'batchsize'", "batch, heads"]),
    ("[problem]\nn = 64\nn_q = 64", ["either n, or n_q and n_k"]),
    ("[problem]\ncausal = 'yes'", ["causal = 'yes'", "true or false"]),
    ("[problem]\n[space]\nblock_m = [48]", ["[space] block_m value 48", "[16, 32, 64, 128, 256]"]),
    ("[problem]\n[space]\nrestrictions = [\"__import__('os')\"]", ["restriction", "Call"]),
    ("[problem]\n[space]\nrestrictions = ['block_k > 1']", ["names 'block_k'", "block_m"]),
    ("[problem]\n[space]\nrestrictions = ['block_m > 1000']", ["leave no config"]),
    ("[problem]\n[objective]\nmetric = 'fast'", ["metric = 'fast'", "speedup_vs_flash"]),
    ("[problem]\n[timing]\nrep_ms = 0", ["[timing] rep_ms = 0", "1 to 10000"]),
    ("name = 'x'", ["[problem] is missing"]),
    ("[problem\n", ["not valid TOML"]),
])
def test_bad_study_names_file_field_and_allowed_values(tmp_path, body, expected):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(StudyError) as info:
        load(str(path))
    message = str(info.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message, message


def test_restrictions_are_applied(tiny):
    study = load(str(tiny))
    assert len(study.configs()) == TINY_CONFIGS - TINY_RESTRICTED
    assert all(c.block_m >= c.block_n for c in study.configs())


# ------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("args, fragment", [
    (["--gpu", "sm_77"], "valid: sm_80"),
    (["--gpu", "sm_89", "--sampler", "bayes"], "tpe, grid, random"),
    (["--gpu", "sm_89", "--study", "no_such_study"], "available: article"),
    (["--gpu", "sm_89", "--trials", "0"], "--trials 0"),
    (["--gpu", "sm_89", "--timeout", "-5"], "--timeout -5"),
    (["--gpu", "sm_89", "--storage", "not a url"], "not a database URL"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, fragment):
    db = tmp_path / "never.db"
    storage_args = [] if "--storage" in args else ["--storage", f"sqlite:///{db}"]
    assert sweep.main(args + storage_args) == 2
    assert fragment in capsys.readouterr().err
    assert not db.exists()


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as info:
        sweep.main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "--sampler grid" in text and "resume" in text.lower()


# ------------------------------------------------------------------------------ store


def test_store_session_rolls_back_and_reraises(tmp_path):
    db = storage.Store(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(RuntimeError):
        with db.session() as session:
            session.add(storage.Run(study="x", target="sm_89", gpu="none", sampler="grid", command="",
                                    torch_version="", triton_version="", driver=""))
            session.flush()
            raise RuntimeError("boom")
    assert db.runs() == []


# ----------------------------------------------------------------------------- worker


def test_worker_survives_crash_hang_and_wrong_answers(monkeypatch):
    good, crash, hang, wrong = (Config(16, 16, 1, 1), Config(32, 16, 1, 1), Config(32, 32, 1, 1),
                                Config(16, 16, 1, 2))
    monkeypatch.setenv(FAULT_ENV, f"{crash.key}:crash,{hang.key}:hang,{wrong.key}:wrong")
    shapes = [Problem(batch=1, heads=2, n_q=64, n_k=64, head_dim=16, dtype="fp32")]
    with GpuWorker(shapes, (1, 1), timeout_s=40, device="cpu") as worker:
        assert worker.trial(good).status == "timed"
        crashed = worker.trial(crash)
        assert crashed.status == "crashed" and "exit code 77" in crashed.reason
        hung = worker.trial(hang)
        assert hung.status == "timeout" and "40 s" in hung.reason
        incorrect = worker.trial(wrong)
        assert incorrect.status == "incorrect" and "rel err" in incorrect.reason
        after = worker.trial(good)
        assert after.status == "timed" and all(s.ms and s.correct for s in after.shapes.values())
        assert worker.restarts == 2


# ------------------------------------------------------------------------------ sweeps


def test_grid_sweep_times_every_config_once_and_a_rerun_times_nothing(tiny, tmp_path, capsys):
    db = tmp_path / "t.db"
    assert sweep.main(_sweep_args(tiny, db, "--sampler", "grid")) == 0
    out = capsys.readouterr().out
    assert "best config per shape" in out and "wall time" in out
    rows = _query(db, "select config, shape, status, run_id, err_out, ms from fa2_results")
    assert len(rows) == TINY_CONFIGS * 2 and len({r[0] for r in rows}) == TINY_CONFIGS
    statuses = {}
    for config, _, status, _, err, ms in rows:
        statuses.setdefault(status, set()).add(config)
        if status == "timed":
            assert err is not None and err < 1e-3 and ms > 0
    assert len(statuses["restricted"]) == TINY_RESTRICTED
    assert len(statuses["timed"]) == TINY_CONFIGS - TINY_RESTRICTED
    # the rerun resumes a finished study: nothing new is timed or stored
    assert sweep.main(_sweep_args(tiny, db, "--sampler", "grid")) == 0
    assert _query(db, "select count(*) from fa2_results where run_id = 2") == [(0,)]
    assert _query(db, "select count(*), min(state), max(state) from trials") == [(TINY_CONFIGS, "COMPLETE",
                                                                                  "COMPLETE")]


def test_kill_9_loses_only_the_trial_in_flight_and_the_rerun_repeats_nothing(tiny, tmp_path):
    db = tmp_path / "k.db"
    command = [sys.executable, "-m", "tuner.sweep", *_sweep_args(tiny, db, "--sampler", "grid", "--batch", "2")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    deadline = time.time() + 240
    committed = 0
    while time.time() < deadline and process.poll() is None:
        time.sleep(0.5)
        if db.exists():
            try:
                committed = _query(db, "select count(distinct config) from fa2_results where status = 'timed'")[0][0]
            except sqlite3.OperationalError:
                continue
            if committed >= 2:
                break
    assert process.poll() is None, f"the sweep ended before it could be killed: {process.stderr.read()[-2000:]}"
    os.killpg(process.pid, signal.SIGKILL)        # the sweep, its worker and its compilers
    process.wait()
    before = {config: run for config, run in _query(db, "select config, run_id from fa2_results")}
    assert before and _query(db, "select count(*) from trials where state = 'RUNNING'")[0][0] >= 1

    assert sweep.main(_sweep_args(tiny, db, "--sampler", "grid")) == 0
    rows = _query(db, "select config, shape, run_id from fa2_results")
    assert len(rows) == TINY_CONFIGS * 2 and len(set((c, s) for c, s, _ in rows)) == len(rows)
    for config, _, run in rows:     # what was committed before the kill is kept, not redone
        if config in before:
            assert run == before[config]
    assert _query(db, "select state, count(*) from trials group by state") == [("COMPLETE", TINY_CONFIGS)]
    told = _query(db, "select value_json from trial_user_attributes where key = 'config'")
    assert len(told) == len(set(told)) == TINY_CONFIGS


def test_configs_with_one_binary_are_timed_once(tiny, tmp_path, monkeypatch):
    real_submit = CompilePool.submit

    def same_binary(self, task):
        future = real_submit(self, task)
        info = future.result()
        future_same = type(future)()
        future_same.set_result(CompileInfo(**{**info.__dict__, "binary": "one-binary"}))
        return future_same

    monkeypatch.setattr(CompilePool, "submit", same_binary)
    db = tmp_path / "b.db"
    assert sweep.main(_sweep_args(tiny, db, "--sampler", "grid")) == 0
    rows = _query(db, "select config, reason, time_s from fa2_results where status = 'timed'")
    timed = {c for c, reason, t in rows if not reason}
    copied = {c for c, reason, t in rows if reason.startswith("same binary as")}
    assert len(timed) == 1 and len(copied) == TINY_CONFIGS - TINY_RESTRICTED - 1
    assert all(t == 0.0 for c, reason, t in rows if c in copied)


def test_tpe_search_reuses_known_configs_and_stops_at_trials(tiny, tmp_path):
    db = tmp_path / "p.db"
    assert sweep.main(_sweep_args(tiny, db, "--sampler", "tpe", "--trials", "10", "--seed", "1")) == 0
    trials = _query(db, "select count(*) from trials where state = 'COMPLETE'")[0][0]
    assert trials == 10
    # TPE may ask for a config twice; it is never timed twice
    per_config = _query(db, "select config, count(*) from fa2_results group by config, shape")
    assert all(count == 1 for _, count in per_config)
    study = optuna.load_study(study_name="tiny@sm_89-interpreter", storage=f"sqlite:///{db}")
    assert study.best_value > 0 and study.user_attrs["metric"] == "speedup_vs_flash"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_cuda_the_sweep_runs_the_budget_stage_and_says_why_it_stops(tiny, tmp_path, capsys):
    db = tmp_path / "n.db"
    args = [a for a in _sweep_args(tiny, db) if a not in ("--device", "cpu")]
    assert sweep.main(args) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU here" in out and "budget stage" in out
    statuses = dict(_query(db, "select status, count(distinct config) from fa2_results group by status"))
    assert statuses == {"pending": TINY_CONFIGS - TINY_RESTRICTED, "restricted": TINY_RESTRICTED}
    assert _query(db, "select count(*) from fa2_results where status = 'pending' and smem_bytes is null") == [(0,)]


def test_orphans_are_found_only_for_dead_processes(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize")
    dists = search.distributions(load("article").space)
    alive = study.ask(dists)
    alive.set_user_attr(search.OWNER_ATTR, search.owner())
    dead = study.ask(dists)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead.set_user_attr(search.OWNER_ATTR, f"{search.owner().rpartition(':')[0]}:{child.pid}")
    orphans, foreign = search.orphaned_trials(study)
    assert [o.number for o in orphans] == [dead.number] and foreign == 1


# -------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_small_sweep_on_the_gpu(tmp_path, capsys):
    study = tmp_path / "gpu.toml"
    study.write_text(textwrap.dedent("""
        name = "gpu-smoke"
        [problem]
        batch = 2
        heads = 4
        n = [1024, 2048]
        head_dim = 64
        dtype = "bf16"
        causal = [false, true]
        [space]
        block_m = [64, 128]
        block_n = [32, 64]
        num_warps = [4, 8]
        num_stages = [2, 3]
    """))
    db = tmp_path / "g.db"
    args = ["--gpu", "auto", "--study", str(study), "--storage", f"sqlite:///{db}", "--sampler", "grid",
            "--no-outputs"]
    assert sweep.main(args) == 0
    print(capsys.readouterr().out)
    rows = _query(db, "select status, pct_flash, err_out, err_bound, ragged_err_out from fa2_results")
    timed = [r for r in rows if r[0] == "timed"]
    assert len(rows) == 16 * 4 and len(timed) >= 8
    assert all(p > 0 and err <= bound and ragged is not None for _, p, err, bound, ragged in timed)


def test_tpe_encoding_is_ordinal_and_decodes_to_configs():
    space = load("article").space
    dists = search.distributions(space, "tpe")
    assert {type(d).__name__ for d in dists.values()} == {"IntDistribution"}
    assert (dists["log2_block_m"].low, dists["log2_block_m"].high) == (4, 8)
    config = search.config_of({"log2_block_m": 8, "log2_block_n": 6, "log2_num_warps": 4, "stages": 3})
    assert config == Config(256, 64, 16, 3)
    assert search.config_of({"block_m": 256, "block_n": 64, "num_warps": 16, "num_stages": 3}) == config


def test_a_config_between_the_study_values_is_restricted(tmp_path):
    path = tmp_path / "gaps.toml"
    path.write_text("[problem]\nhead_dim = 16\n[space]\nblock_m = [16, 64]\nnum_stages = [1, 3]\n")
    study = load(str(path))
    ctx = sweep.Context(study=study, target=__import__("tuner").GpuSpec.from_name("sm_89"), present=None,
                        gpu_label="none", env={}, run_id=0, store=None)
    verdict, reason, _ = sweep.budget_stage(Config(32, 16, 1, 1), ctx)
    assert verdict == sweep.RESTRICTED and "block_m" in reason
    assert sweep.budget_stage(Config(16, 16, 1, 3), ctx) is None


def test_a_target_other_than_the_gpu_present_is_compiled_for_both():
    from tuner import GpuSpec

    study = load("article")
    config = Config(64, 64, 4, 3)
    on_h200 = sweep.Context(study=study, target=GpuSpec.from_name("sm_89"), present=GpuSpec.from_name("sm_90"),
                            gpu_label="NVIDIA H200 (sm_90)", env={}, run_id=0, store=None)
    tasks = sweep.compile_tasks(config, on_h200)
    # the target's budget from a cross-compile; the binary to run through the JIT of the GPU present
    assert [(t[2], len(t) == 4 and t[3]) for t in tasks] == [(89, False), (89, False), (90, True), (90, True)]
    same = sweep.Context(study=study, target=GpuSpec.from_name("sm_90"), present=GpuSpec.from_name("sm_90"),
                         gpu_label="NVIDIA H200 (sm_90)", env={}, run_id=0, store=None)
    assert [(t[2], t[3]) for t in sweep.compile_tasks(config, same)] == [(90, True), (90, True)]


def test_stability_report_flags_swaps_beyond_the_noise_band():
    from tuner.bench_search import stability_report

    steady = {"a": [1.00, 1.01, 1.00, 1.00, 1.01], "b": [1.10, 1.11, 1.10, 1.09, 1.10]}
    lines, ok = stability_report(steady)
    assert ok and "| 1 | a |" in lines[2] and "5/5" in lines[2]
    within_noise = {"a": [1.00, 1.03, 0.99, 1.00, 1.00], "b": [1.01, 1.00, 1.02, 1.01, 1.01]}
    assert stability_report(within_noise)[1]          # they swap, by less than the spread
    # medians 10% apart, spreads about 5%: the one round b wins is a swap beyond the noise
    beyond = {"a": [1.00, 1.00, 1.00, 1.00, 1.05], "b": [1.10, 1.10, 1.10, 1.10, 1.04]}
    lines, ok = stability_report(beyond)
    assert not ok and "NOT consistent" in lines[-1]
