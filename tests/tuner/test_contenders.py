"""The gate's edge shapes for contenders only (tuner.contenders): who is checked, what a failure
there does, what the rows of an unchecked config say, and that they never reach the finalists,
the winners or the emitted list. The sweeps run in the interpreter with the edge step forced on
(the interpreter's kernels share one binary with their edge shapes, so a CPU sweep defers nothing
of itself)."""

from __future__ import annotations

import functools
from concurrent.futures import Future

import pytest

from tuner import contenders, driver, finalists, sweep
from tuner.budget import CompilePool
from tuner.gate import EDGE_UNCHECKED, edges_checked
from tuner.gpus import GpuSpec
from tuner.outcome import NamedError, ShapeOutcome, TrialOutcome
from tuner.pre_gpu_stages import Compiled, Rejection, compile_plan, edge_plan
from tuner.runner import FAULT_ENV, GpuWorker
from tuner.status import Stage, Status
from tuner.store import Store
from tuner.study import load


def _timed(**ms) -> TrialOutcome:
    return TrialOutcome(Status.TIMED, "", {label: ShapeOutcome(label, True, ms=value) for label, value in ms.items()})


def test_a_config_is_a_contender_within_the_margin_of_the_best_at_some_shape():
    gate = contenders.Contenders(margin=1.3)
    assert gate.ratio(_timed(a=5.0, b=9.0)) == 1.0          # nothing timed yet: a contender
    gate.record(_timed(a=1.0, b=2.0))
    gate.record(_timed(a=1.5, b=1.0))                       # the best per shape: a 1.0, b 1.0
    assert gate.best == {"a": 1.0, "b": 1.0}
    assert gate.ratio(_timed(a=1.2, b=3.0)) == pytest.approx(1.2)
    gate.record(TrialOutcome(Status.INCORRECT, "wrong", {"a": ShapeOutcome("a", False, ms=0.1)}))
    assert gate.best["a"] == 1.0                            # a failed config never sets the best


def test_no_contender_keeps_its_times_and_says_its_edges_were_not_checked():
    gate = contenders.Contenders(margin=1.3)
    gate.record(_timed(a=1.0))
    never = pytest.fail
    slow = gate.edges(_timed(a=1.4), lambda: never("compiled"), lambda: never("checked"))
    assert slow.status == Status.TIMED and slow.shapes["a"].ms == 1.4
    assert slow.reason.startswith(EDGE_UNCHECKED) and "1.40x" in slow.reason and "--edge-gate all" in slow.reason


def test_a_contender_is_compiled_then_checked_and_its_failure_is_the_outcome():
    gate = contenders.Contenders(margin=1.3)
    gate.record(_timed(a=1.0))
    calls = []
    failed = TrialOutcome(Status.INCORRECT, "gate one-key (97x33): out err 1.0", check_s=2.0)
    outcome = gate.edges(_timed(a=1.1), lambda: calls.append("compile"), lambda: calls.append("check") or failed)
    assert calls == ["compile", "check"] and outcome.status == Status.INCORRECT and "one-key" in outcome.reason
    refused = Rejection(Status.OVER_SMEM, Stage.COMPILE, "the gate's edge shapes: 300000 B > 232448 B")
    outcome = gate.edges(_timed(a=1.1), lambda: refused, lambda: pytest.fail("checked"))
    assert outcome.status == Status.OVER_SMEM and "edge shapes" in outcome.reason


def test_a_contender_that_passes_keeps_its_times_with_the_edge_errors():
    gate = contenders.Contenders()
    edge_errors = (NamedError("out", 3e-3),)
    checked = TrialOutcome(Status.TIMED, "", {"a": ShapeOutcome("a", True, gate_errors=edge_errors)}, check_s=1.5)
    timed = _timed(a=1.0)
    timed.check_s = 0.5
    outcome = gate.edges(timed, lambda: None, lambda: checked)
    assert outcome.status == Status.TIMED and outcome.reason == "" and outcome.shapes["a"].ms == 1.0
    assert outcome.shapes["a"].gate_errors == edge_errors and outcome.check_s == 2.0


def test_the_edge_binary_is_left_out_of_the_first_compiles_only_when_asked():
    h200 = GpuSpec.from_name("sm_90")
    for study in (load("autotune_race_200"), load("hopper_bwd")):   # both Triton kernels specialise on lengths
        config = study.kernel.config_type(*(a.default[0] for a in study.kernel.config_type.tiles()))
        every = compile_plan(config, study, h200, h200)
        first = compile_plan(config, study, h200, h200, edges=False)
        later = edge_plan(config, study, h200)
        assert later and every == first + later and not set(first) & set(later)
        assert edge_plan(config, study, None) == []          # no GPU present: nothing compiles for the gate


def test_the_worker_checks_the_edge_shapes_apart(tiny, monkeypatch):
    study = load(str(tiny))
    config = study.kernel.config_type(16, 16, 1, 1)
    monkeypatch.setenv(FAULT_ENV, f"{config.key}:wrong-edge")
    with GpuWorker(study.shapes, (1, 1), 120.0, "cpu") as worker:
        assert worker.trial(config, edges=False).status == Status.TIMED       # the ragged gate is not an edge
        checked = worker.check(config)
        assert checked.status == Status.INCORRECT and "gate one-key" in checked.reason
        assert worker.trial(config).status == Status.INCORRECT


@pytest.fixture
def forced(monkeypatch):
    """Every config of a CPU sweep gets an edge step, its 'binary' compiled at once."""
    edge = object()
    submit = CompilePool.submit

    def instant(self, task, urgent=False):
        if task is not edge:
            return submit(self, task, urgent)
        assert urgent                     # a contender's edge binary goes ahead of the queue
        done = Future()
        done.set_result(None)
        return done

    judge = driver.compile_stage
    monkeypatch.setattr(driver, "edge_plan", lambda config, study, present: [edge])
    monkeypatch.setattr(CompilePool, "submit", instant)
    monkeypatch.setattr(driver, "compile_stage", lambda config, study, target, present, tasks, infos: (
        Compiled({}) if tasks == [edge] else judge(config, study, target, present, tasks, infos)))
    return lambda margin: monkeypatch.setattr(driver, "Contenders", functools.partial(contenders.Contenders, margin))


def _rows(db):
    return Store(f"sqlite:///{db}", create=False).results()


def test_a_sweep_catches_a_contenders_edge_bug_after_timing_it(tiny, tmp_path, monkeypatch, sweep_args, forced):
    forced(float("inf"))                  # every config is a contender
    study = load(str(tiny))
    bad = study.kernel.config_type(32, 16, 1, 2).key
    monkeypatch.setenv(FAULT_ENV, f"{bad}:wrong-edge")
    db = tmp_path / "c.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")) == 0
    rows = _rows(db)
    assert {r.status for r in rows if r.config == bad} == {Status.INCORRECT}
    assert all("gate one-key" in r.reason for r in rows if r.config == bad)
    timed = [r for r in rows if r.status == Status.TIMED]
    assert timed and all(edges_checked(r) for r in timed)


def test_a_sweep_leaves_no_contender_unchecked_and_never_chooses_it(tiny, tmp_path, monkeypatch, sweep_args, forced):
    forced(0.0)                           # no config is a contender: none is checked on its edge shapes
    study = load(str(tiny))
    bad = study.kernel.config_type(32, 16, 1, 2).key
    monkeypatch.setenv(FAULT_ENV, f"{bad}:wrong-edge")
    db = tmp_path / "u.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")) == 0
    timed = [r for r in _rows(db) if r.status == Status.TIMED]
    assert {r.config for r in timed} >= {bad} and all(r.reason.startswith(EDGE_UNCHECKED) for r in timed)
    assert finalists.select_finalists(timed) == {}


def test_edge_gate_all_checks_every_config_in_its_trial(tiny, tmp_path, monkeypatch, sweep_args):
    monkeypatch.setattr(driver, "edge_plan", lambda *args: pytest.fail("--edge-gate all defers nothing"))
    study = load(str(tiny))
    bad = study.kernel.config_type(32, 16, 1, 2).key
    monkeypatch.setenv(FAULT_ENV, f"{bad}:wrong-edge")
    db = tmp_path / "a.db"
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0", "--edge-gate", "all")) == 0
    assert {r.status for r in _rows(db) if r.config == bad} == {Status.INCORRECT}


def test_the_bounds_are_the_margin_over_each_shapes_best_timed_config():
    from tuner.contenders import Contenders
    from tuner.outcome import ShapeOutcome, TrialOutcome

    contenders = Contenders(margin=1.3)
    assert contenders.bounds() == {}                   # nothing timed: every shape timed whole
    contenders.record(TrialOutcome(Status.TIMED, "", {"a": ShapeOutcome("a", True, ms=2.0),
                                                      "b": ShapeOutcome("b", True, ms=1.0)}))
    contenders.record(TrialOutcome(Status.TIMED, "", {"a": ShapeOutcome("a", True, ms=1.0),
                                                      "b": ShapeOutcome("b", True, ms=3.0)}))
    contenders.record(TrialOutcome(Status.INCORRECT, "", {"a": ShapeOutcome("a", False, ms=0.1)}))
    assert contenders.bounds() == pytest.approx({"a": 1.3, "b": 1.3})
