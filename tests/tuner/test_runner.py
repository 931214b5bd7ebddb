"""The isolated worker: every kind of fault becomes a recorded outcome, and the worker carries on."""

from __future__ import annotations

import pytest

from tuner.kernels.triton_fwd import FwdConfig as Config
from tuner.problem import Problem
from tuner.runner import FAULT_ENV, GpuWorker
from tuner.status import Status

SHAPES = [Problem(batch=1, heads=2, n_q=64, n_k=64, head_dim=16, dtype="fp32"),
          Problem(batch=1, heads=2, n_q=64, n_k=64, head_dim=16, dtype="fp32", causal=True)]


def test_worker_survives_crash_hang_raise_and_wrong_answers(monkeypatch):
    good, crash, hang, wrong, raises = (Config(16, 16, 1, 1), Config(32, 16, 1, 1), Config(32, 32, 1, 1),
                                        Config(16, 16, 1, 2), Config(32, 16, 1, 2))
    monkeypatch.setenv(FAULT_ENV, f"{crash.key}:crash,{hang.key}:hang,{wrong.key}:wrong,{raises.key}:raise")
    with GpuWorker(SHAPES, (1, 1), timeout_s=15, device="cpu") as worker:
        assert worker.trial(good).status == Status.TIMED
        crashed = worker.trial(crash)
        assert crashed.status == Status.CRASHED and "exit code 77" in crashed.reason
        hung = worker.trial(hang)
        assert hung.status == Status.TIMEOUT and "15 s" in hung.reason
        incorrect = worker.trial(wrong)
        assert incorrect.status == Status.INCORRECT and "out rel err" in incorrect.reason
        raised = worker.trial(raises)
        assert raised.status == Status.CRASHED and raised.error_type == "RuntimeError"
        assert "injected failure" in raised.reason
        after = worker.trial(good)
        assert after.status == Status.TIMED and all(s.ms and s.correct for s in after.shapes.values())
        assert worker.restarts == 2


@pytest.mark.parametrize("fault, where", [("wrong-lse", "lse rel err"), ("wrong-gate", "gate ragged")])
def test_faults_that_touch_only_lse_or_only_the_gate_shapes_are_caught(monkeypatch, fault, where):
    config = Config(16, 16, 1, 1)
    monkeypatch.setenv(FAULT_ENV, f"{config.key}:{fault}")
    with GpuWorker(SHAPES, (1, 1), timeout_s=60, device="cpu") as worker:
        outcome = worker.trial(config)
    assert outcome.status == Status.INCORRECT and where in outcome.reason, outcome.reason
    shape = outcome.shapes[SHAPES[0].label]
    assert not shape.correct and all(e.bound for e in shape.errors) and [e.name for e in shape.errors] == ["out", "lse"]


def test_a_correct_config_records_every_error_and_bound():
    with GpuWorker(SHAPES, (1, 1), timeout_s=60, device="cpu") as worker:
        outcome = worker.trial(Config(32, 16, 1, 1))
    assert outcome.status == Status.TIMED
    for shape in outcome.shapes.values():
        assert all(e.error <= e.bound for e in shape.errors) and len(shape.errors) == 2
        out = next(e for e in shape.errors if e.name == "out")
        gate = {e.name: e.error for e in shape.gate_errors}
        assert gate["out"] is not None and gate["out"] <= out.bound * 10 and gate["lse"] is not None
        assert shape.timer == "wall_clock" and shape.ms > 0


def test_retime_runs_every_config_once_per_round():
    a, b = Config(16, 16, 1, 1), Config(32, 16, 1, 1)
    with GpuWorker(SHAPES, (1, 1), timeout_s=60, device="cpu") as worker:
        fixed = worker.retime({SHAPES[0].label: [a, b]}, ("fixed", 3))
        adaptive = worker.retime({SHAPES[0].label: [a, b]}, ("adaptive", (0.0, 1.0, 3, 3)))
    for times in (fixed, adaptive):
        assert set(times) == {SHAPES[0].label}
        assert {key: len(runs) for key, runs in times[SHAPES[0].label].samples.items()} == {a.key: 3, b.key: 3}


def test_each_worker_is_pinned_to_its_own_visible_gpu(monkeypatch):
    from tuner.runner import visible_device

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [visible_device(i) for i in range(3)] == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4, 6")      # the parent's own restriction is respected
    assert [visible_device(i) for i in range(2)] == ["4", "6"]
