"""The sweep end to end: the CLI's checks, and whole sweeps in the interpreter (``--device cpu``).

Without a GPU the check-and-time stages run in Triton's interpreter: the numbers are
meaningless, the plumbing is the real one. The budget and compile stages cross-compile
for sm_89 as they would anywhere. The GPU test at the end runs a small sweep on the device.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import optuna
import pytest
import torch
from conftest import ROOT

from tuner import sweep
from tuner.budget import CompileInfo, CompilePool
from tuner.runner import FAULT_ENV
from tuner.study import load

# ------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("args, fragment", [
    (["--gpu", "sm_77"], "valid: sm_80"),
    (["--gpu", "sm_89", "--sampler", "bayes"], "tpe, grid, random"),
    (["--gpu", "sm_89", "--study", "no_such_study"], "available: article"),
    (["--gpu", "sm_89", "--trials", "0"], "--trials 0"),
    (["--gpu", "sm_89", "--timeout", "-5"], "--timeout -5"),
    (["--gpu", "sm_89", "--storage", "not a url"], "not a database URL"),
    (["--gpu", "sm_89", "--storage", "sqlite://"], "in-memory database"),
    (["--gpu", "sm_89", "--rounds", "1"], "--rounds 1 must be at least 2"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, fragment):
    db = tmp_path / "never.db"
    storage_args = [] if "--storage" in args else ["--storage", f"sqlite:///{db}"]
    assert sweep.main(args + storage_args + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert not db.exists() and not (tmp_path / "out").exists()


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as info:
        sweep.main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "--sampler grid" in text and "resume" in text.lower()


def test_a_different_study_under_a_stored_name_is_refused(tiny, tmp_path, capsys, sweep_args, query):
    db = tmp_path / "n.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "random", "--trials", "1", "--finalists", "0")) == 0
    rows = query(db, "select count(*) from fa2_results")
    other = tmp_path / "other.toml"
    other.write_text(tiny.read_text().replace("n = 64", "n = 48"))
    assert sweep.main(sweep_args(other, db)) == 2
    err = capsys.readouterr().err
    assert "already holds a different study" in err and str(other) in err and str(tiny) in err
    assert query(db, "select count(*) from fa2_results") == rows


# ------------------------------------------------------------------------------ sweeps


def test_grid_sweep_times_every_config_once_and_a_rerun_times_nothing(tiny, tmp_path, capsys, sweep_args, query):
    db = tmp_path / "t.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid")) == 0
    out = capsys.readouterr().out
    assert "best config per shape" in out and "wall time" in out and "finalists re-timed together" in out
    assert "SDPA baselines moved" not in out          # the interpreter's times are noise: no drift figure
    rows = query(db, "select config, shape, status, run_id, err_out, ms, timer from fa2_results")
    assert len(rows) == 8 * 2 and len({r[0] for r in rows}) == 8
    statuses = {}
    for config, _, status, _, err, ms, timer in rows:
        statuses.setdefault(status, set()).add(config)
        if status == "timed":
            assert err is not None and err < 1e-5 and ms > 0 and timer == "wall_clock"
    assert len(statuses["restricted"]) == 2 and len(statuses["timed"]) == 6
    finalists = query(db, "select shape, config, rank, rounds, times, figure, stopped from fa2_finalists "
                          "order by shape, rank")
    assert {f[0] for f in finalists} == {r[1] for r in rows}
    # adaptive: at least 3 rounds, at most 10, the same for every config of a shape; no clock, no SDPA: ms
    assert all(3 <= f[3] <= 10 and len(json.loads(f[4])) == f[3] and f[5] == "ms" for f in finalists)
    assert all(f[6] in ("separated", "quiet", "cap") for f in finalists)
    assert len({(f[0], f[3]) for f in finalists}) == len({f[0] for f in finalists})
    # the rerun resumes a finished study: nothing new is timed or stored
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")) == 0
    assert query(db, "select count(*) from fa2_results where run_id = 2") == [(0,)]
    assert query(db, "select count(*), min(state), max(state) from trials") == [(8, "COMPLETE", "COMPLETE")]


def test_failing_trials_are_stored_with_status_stage_reason_and_told_as_infeasible(tiny, tmp_path, monkeypatch,
                                                                                     sweep_args, query):
    faults = {"16x16_w1_s1": "crash", "16x16_w1_s2": "wrong", "32x16_w1_s1": "out-of-resources",
              "32x16_w1_s2": "raise", "32x32_w1_s1": "wrong-gate"}
    monkeypatch.setenv(FAULT_ENV, ",".join(f"{k}:{v}" for k, v in faults.items()))
    db = tmp_path / "f.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")) == 0
    stored = {config: (status, stage, reason) for config, status, stage, reason in
              query(db, "select config, status, stage, reason from fa2_results")}
    expected = {"16x16_w1_s1": ("crashed", "check", "exit code 77"), "16x16_w1_s2": ("incorrect", "check", "rel err"),
                "32x16_w1_s1": ("compile_error", "check", "OutOfResources"),
                "32x16_w1_s2": ("crashed", "check", "injected failure"),
                "32x32_w1_s1": ("incorrect", "check", "gate ragged"), "32x32_w1_s2": ("timed", "time", ""),
                "16x32_w1_s1": ("restricted", "budget", "excluded by the study's restrictions"),
                "16x32_w1_s2": ("restricted", "budget", "excluded by the study's restrictions")}
    for config, (status, stage, fragment) in expected.items():
        assert stored[config][:2] == (status, stage) and fragment in stored[config][2], (config, stored[config])
    study = optuna.load_study(study_name="tiny@sm_89-interpreter", storage=f"sqlite:///{db}")
    for trial in study.trials:
        timed = trial.user_attrs["status"] == "timed"
        assert (trial.value > 0) is timed
        assert trial.system_attrs["constraints:rejected"] == (0.0 if timed else 1.0)
        assert trial.user_attrs["status"] == expected[trial.user_attrs["config"]][0]


def test_kill_9_loses_only_the_trial_in_flight_and_the_rerun_repeats_nothing(tiny, tmp_path, sweep_args, query):
    db = tmp_path / "k.db"
    command = [sys.executable, "-m", "tuner.sweep", *sweep_args(tiny, db, "--sampler", "grid", "--batch", "2")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        time.sleep(0.5)
        if db.exists():
            try:
                committed = query(db, "select count(distinct config) from fa2_results where status = 'timed'")[0][0]
            except sqlite3.OperationalError:
                continue
            if committed >= 2:
                break
    assert process.poll() is None, f"the sweep ended before it could be killed: {process.stderr.read()[-2000:]}"
    os.killpg(process.pid, signal.SIGKILL)        # the sweep, its worker and its compilers
    process.wait()
    before = dict(query(db, "select config, run_id from fa2_results"))
    assert before and query(db, "select count(*) from trials where state = 'RUNNING'")[0][0] >= 1
    assert query(db, "select status from fa2_runs") == [("running",)]     # until the next sweep sees it gone

    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid")) == 0
    rows = query(db, "select config, shape, run_id from fa2_results")
    assert len(rows) == 8 * 2 and len({(c, s) for c, s, _ in rows}) == len(rows)
    for config, _, run in rows:     # what was committed before the kill is kept, not redone
        if config in before:
            assert run == before[config]
    assert query(db, "select state, count(*) from trials group by state") == [("COMPLETE", 8)]
    assert query(db, "select status from fa2_runs order by id") == [("interrupted",), ("finished",)]
    told = query(db, "select value_json from trial_user_attributes where key = 'config'")
    assert len(told) == len(set(told)) == 8


def test_configs_with_one_binary_are_timed_once(tiny, tmp_path, monkeypatch, sweep_args, query):
    real_submit = CompilePool.submit

    def same_binary(self, task):
        info = real_submit(self, task).result()
        future = type(real_submit(self, task))()
        future.set_result(CompileInfo(**{**info.__dict__, "binary": "one-binary"}))
        return future

    monkeypatch.setattr(CompilePool, "submit", same_binary)
    db = tmp_path / "b.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")) == 0
    rows = query(db, "select config, reason, time_s from fa2_results where status = 'timed'")
    timed = {c for c, reason, t in rows if not reason}
    copied = {c for c, reason, t in rows if reason.startswith("same binary as")}
    assert len(timed) == 1 and len(copied) == 6 - 1
    assert all(t == 0.0 for c, reason, t in rows if c in copied)


def test_tpe_search_reuses_known_configs_and_stops_at_trials(tiny, tmp_path, sweep_args, query):
    db = tmp_path / "p.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "tpe", "--trials", "10", "--seed", "1",
                                 "--finalists", "0")) == 0
    # TPE may ask for a config twice; it is never timed twice
    assert all(count == 1 for _, count in query(db, "select config, count(*) from fa2_results group by config, shape"))
    study = optuna.load_study(study_name="tiny@sm_89-interpreter", storage=f"sqlite:///{db}")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    refused = [t for t in complete if t.user_attrs["stage"] == "budget"]     # the study's restriction refuses 2
    assert len(complete) - len(refused) == 10 and len(refused) <= 10      # a refused config costs no trial
    assert all(t.user_attrs["status"] == "restricted" for t in refused)
    assert study.best_value > 0 and study.user_attrs["metric"] == "speedup_vs_flash"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_cuda_the_sweep_runs_the_budget_stage_and_writes_only_under_out(tiny, tmp_path, capsys, query):
    """The main job's defaults from another folder: everything lands in fa2-out/ there."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert sweep.main(["--gpu", "sm_89", "--study", str(tiny)]) == 0
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "No CUDA GPU here" in out and "budget stage" in out
    db = tmp_path / "fa2-out" / "tuning.db"
    statuses = dict(query(db, "select status, count(distinct config) from fa2_results group by status"))
    assert statuses == {"pending": 6, "restricted": 2}
    assert query(db, "select count(*) from fa2_results where status = 'pending' and smem_bytes is null") == [(0,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fa2-out", "tiny.toml"]
    assert (tmp_path / "fa2-out" / "dashboards" / "index.html").exists()


def test_a_config_between_the_study_values_is_restricted(tmp_path):
    from tuner.gpus import GpuSpec
    from tuner.kernels.triton_fwd import FwdConfig as Config
    from tuner.pre_gpu_stages import budget_stage

    path = tmp_path / "gaps.toml"
    path.write_text("[problem]\nhead_dim = 16\n[space]\nblock_m = [16, 64]\nnum_stages = [1, 3]\n")
    study = load(str(path))
    rejection = budget_stage(Config(32, 16, 1, 1), study, GpuSpec.from_name("sm_89"))
    assert rejection.status == "restricted" and rejection.stage == "budget" and "block_m" in rejection.reason
    assert budget_stage(Config(16, 16, 1, 3), study, GpuSpec.from_name("sm_89")) is None


def test_a_target_other_than_the_gpu_present_is_compiled_for_both():
    from tuner.gpus import GpuSpec
    from tuner.kernels.triton_fwd import FwdConfig as Config
    from tuner.pre_gpu_stages import compile_plan

    study = load("article")
    config = Config(64, 64, 4, 3)
    on_h200 = compile_plan(config, study, GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90"))
    # the target's budget from a cross-compile; the binaries to run (and the gate's) through the JIT
    assert [(t.capability, t.via_jit) for t in on_h200] == [(89, False), (89, False), (90, True), (90, True),
                                                            (90, True), (90, True)]
    same = compile_plan(config, study, GpuSpec.from_name("sm_90"), GpuSpec.from_name("sm_90"))
    assert [(t.capability, t.via_jit) for t in same] == [(90, True)] * 4
    assert [(t.capability, t.via_jit) for t in compile_plan(config, study, GpuSpec.from_name("sm_89"), None)] == \
        [(89, False), (89, False)]


# -------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.timing
def test_small_sweep_on_the_gpu(tmp_path, capsys, query):
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
        tma = [false, true]
        persistent = [0]
    """))
    db = tmp_path / "g.db"
    args = ["--gpu", "auto", "--study", str(study), "--storage", f"sqlite:///{db}", "--sampler", "grid",
            "--out", str(tmp_path / "out")]
    assert sweep.main(args) == 0
    print(capsys.readouterr().out)
    rows = query(db, "select status, pct_flash, err_out, err_bound, ragged_err_out, timer, host_us from fa2_results")
    timed = [r for r in rows if r[0] == "timed"]
    assert len(rows) == 32 * 4 and len(timed) >= 16
    assert all(p > 0 and err <= bound and ragged is not None and timer == "cuda_graph" and host > 0
               for _, p, err, bound, ragged, timer, host in timed)
    assert query(db, "select count(*) from fa2_results where status = 'timed' and tma") != [(0,)]
    assert query(db, "select count(distinct shape) from fa2_finalists") == [(4,)]
    # SDPA re-timed in the finalists' own rounds, near its start-of-run baseline
    sdpa = query(db, "select f.cudnn_ms / b.cudnn_ms, f.flash_ms / b.flash_ms from fa2_finalists f "
                     "join fa2_baselines b on b.shape = f.shape and b.phase = 'start'")
    assert sdpa and all(0.7 < c < 1.5 and 0.7 < f < 1.5 for c, f in sdpa)
    # the clock beside every time where NVML is there; the finalists decided on the ratio to SDPA
    # replayed alternately with each config, cycle by cycle (captured graphs on both sides), with or without NVML,
    # at the clock each holds alone where the power check ran (configs within 4% of the leader, with NVML)
    from kernel.measure.clock import sm_clock

    clocked = query(db, "select count(*) from fa2_results where status = 'timed' and clock_mhz > 500 and "
                        "abs(cycles - ms * clock_mhz * 1000) < 1e-6 * cycles")
    decided = {f for (f,) in query(db, "select distinct figure from fa2_finalists")}
    assert clocked == ([(len(timed),)] if sm_clock() is not None else [(0,)])
    assert decided and decided <= ({"paired_cycles", "sustained"} if sm_clock() is not None else {"paired_cycles"})
    assert (tmp_path / "out" / "configs" / "gpu-smoke_sm_90_configs.py").exists()


def test_a_tpe_batch_fills_two_waves_of_the_compile_pool(monkeypatch):
    from tuner.gpus import GpuSpec
    from tuner.pre_gpu_stages import pool_sizes

    study, ada, hopper = load("article"), GpuSpec.from_name("sm_89"), GpuSpec.from_name("sm_90")
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    # the main job on the H200: 2 specialisations for sm_89, 2 for the H200, 2 for the gate's edge shapes
    assert pool_sizes("tpe", 1, study, ada, hopper) == (5, 14)
    assert pool_sizes("tpe", 1, study, hopper, hopper) == (7, 14)      # the target is the GPU present
    assert pool_sizes("tpe", 1, study, ada, None) == (14, 14)          # the budget alone: 2 a config
    assert pool_sizes("grid", 1, study, ada, hopper) == (14, 14)       # at least one a process
    race = load("autotune_race_200")                                   # one shape, non-causal: 2 a config
    assert pool_sizes("grid", 1, race, hopper, hopper) == (14, 14)
    assert pool_sizes("grid", 1, race, hopper, hopper, 30)[0] == 30
    assert pool_sizes("tpe", 1, study, ada, hopper, jobs=3, batch=5) == (5, 3)     # the user's
    assert pool_sizes("tpe", 1, study, hopper, hopper, jobs=60) == (16, 60)        # TPE still learns: 16 at most
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert pool_sizes("tpe", 1, study, ada, hopper) == (4, 2) and pool_sizes("tpe", 3, study, ada, hopper)[0] == 6
