"""A warm re-run of the same sweep emits the same config list and measures nothing (issue 42).

The GPU worker is faked in this process (:meth:`tuner.runner.GpuWorker.request`): trials get fixed
times, and every re-timing of the finalists gets fresh noise that swaps close configs, as a real
re-timing does; so a second run that re-timed them would emit another list.
"""

from __future__ import annotations

import random

import pytest

from kernel.measure.retime import Rounds, Sample
from tuner import sweep
from tuner.outcome import NamedError, ShapeOutcome, TrialOutcome
from tuner.runner import GpuWorker
from tuner.status import Status


def ms_of(key: str, label: str) -> float:     # ~1 ms, configs 0.5% apart: within a re-timing's noise
    return 1.0 + 0.005 * (sum(map(ord, key + label)) % 7)


@pytest.fixture
def fake_worker(monkeypatch):
    """Every request the sweep makes of a worker, answered here and logged (kind, argument)."""
    log: list[tuple[str, object]] = []
    noise = random.Random()         # a fresh draw each re-timing, never seeded: runs differ

    def request(self, kind, argument=None, timeout_s=None):
        log.append((kind, argument))
        labels = [p.label for p in self.shapes]
        if kind == "device_info":
            return {"device_name": "fake", "device_uuid": None}
        if kind == "baselines":
            return {label: dict(flash_ms=1.0, cudnn_ms=1.0, flash_host_us=1.0, cudnn_host_us=1.0, timer="wall_clock")
                    for label in labels}
        if kind in ("trial", "trial_without_edges", "check"):
            config = argument if kind == "check" else argument[0]      # a trial's: (config, bounds)
            shapes = {label: ShapeOutcome(label, True, errors=(NamedError("out", 0.0, 1.0),),
                                          ms=ms_of(config.key, label), timer="wall_clock") for label in labels}
            return TrialOutcome(Status.TIMED, "", shapes)
        if kind == "retime":
            finalists, _protocol = argument
            return {label: Rounds({c.key: [Sample(ms_of(c.key, label) * (1 + noise.uniform(-0.02, 0.02)))
                                           for _ in range(5)] for c in configs}, "cap")
                    for label, configs in finalists.items()}
        raise AssertionError(f"unexpected request {kind}")

    monkeypatch.setattr(GpuWorker, "request", request)
    return log


def test_a_warm_rerun_emits_the_same_file_and_measures_nothing(tiny, tmp_path, fake_worker, capsys):
    out = tmp_path / "out"
    args = ["--gpu", "sm_89", "--study", str(tiny), "--out", str(out), "--device", "cpu", "--sampler", "grid",
            "--finalists", "3"]
    emitted = out / "configs" / "tiny_sm_89_configs.py"
    assert sweep.main(args) == 0
    first = emitted.read_bytes()
    kinds = {kind for kind, _ in fake_worker}
    assert {"trial", "retime", "baselines"} <= kinds         # the first run measured
    trials = [argument for kind, argument in fake_worker if kind in ("trial", "trial_without_edges")]
    assert trials[0][1] == {}                                 # the first trial: nothing to bound it by
    *before, (_, last) = trials                               # the last: 1.3x the best of those before
    assert last and all(ms == pytest.approx(1.3 * min(ms_of(c.key, label) for c, _ in before))
                        for label, ms in last.items())
    fake_worker.clear()
    assert sweep.main(args) == 0
    assert fake_worker == []                                 # nothing measured: no trial, re-timing nor SDPA
    assert emitted.read_bytes() == first
    assert "their stored verdicts stand" in capsys.readouterr().err
    # asked for, the finalists are re-timed (and only they: the search has nothing new)
    assert sweep.main(args + ["--retime-finalists"]) == 0
    assert {kind for kind, _ in fake_worker} == {"retime"}
