"""The value told to Optuna for every metric a study may name, and the percentages it is made
of, against the times they derive from (each with a value of its own, so a column read in
another's place shows)."""

from __future__ import annotations

import math

import pytest

from tuner.gpus import GpuSpec
from tuner.outcome import ShapeOutcome, TrialOutcome
from tuner.records import METRIC_COLUMNS, RunContext, objective, result_rows
from tuner.status import Stage, Status
from tuner.store import Result
from tuner.study import METRICS, load


def test_every_metric_a_study_offers_has_a_column():
    assert set(METRIC_COLUMNS) == set(METRICS)


def _rows(*per_shape):
    """Timed rows, one per (pct_flash, pct_cudnn, tflops)."""
    return [Result(config="a", shape=f"s{i}", status="timed", ms=1.0, pct_flash=f, pct_cudnn=c, tflops=t)
            for i, (f, c, t) in enumerate(per_shape)]


@pytest.mark.parametrize("metric, expected", [
    ("speedup_vs_flash", math.sqrt(2.0 * 0.5)),        # pct 200 and 50: x2 and x0.5
    ("speedup_vs_cudnn", math.sqrt(0.8 * 0.2)),        # pct 80 and 20
    ("tflops", math.sqrt(300.0 * 12.0)),
])
def test_the_objective_is_the_geometric_mean_of_its_own_metric(metric, expected):
    rows = _rows((200.0, 80.0, 300.0), (50.0, 20.0, 12.0))
    assert objective(rows, metric) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("metric", METRICS)
def test_the_objective_is_zero_when_its_metric_is_missing_or_a_row_is_not_timed(metric):
    column = METRIC_COLUMNS[metric]
    good = _rows((200.0, 80.0, 300.0), (50.0, 20.0, 12.0))
    assert objective(good, metric) > 0
    for bad in (None, 0.0):
        rows = _rows((200.0, 80.0, 300.0), (50.0, 20.0, 12.0))
        setattr(rows[1], column, bad)
        assert objective(rows, metric) == 0.0
    rows = _rows((200.0, 80.0, 300.0), (50.0, 20.0, 12.0))
    rows[0].status = "incorrect"
    assert objective(rows, metric) == 0.0


TWO_SHAPES = """
name = "two"
[problem]
batch = 2
heads = 3
n = [64, 128]
head_dim = 32
dtype = "fp16"
causal = false
"""


@pytest.fixture
def context(tmp_path):
    path = tmp_path / "two.toml"
    path.write_text(TWO_SHAPES)
    study = load(str(path))
    baselines = {study.shapes[0].label: dict(flash_ms=0.030, cudnn_ms=0.020),
                 study.shapes[1].label: dict(flash_ms=0.090, cudnn_ms=0.050)}
    env = dict(torch="t", triton="r", driver="d")
    return RunContext(study, GpuSpec.from_name("sm_90"), "G", env, 7, baselines,
                      dict(device_index=1, device_name="G", device_uuid="u", host="h"))


def _outcome(study, times):
    shapes = {shape.label: ShapeOutcome(shape.label, True, ms=ms, host_us=host, timer="cuda_graph")
              for shape, (ms, host) in zip(study.shapes, times)}
    return TrialOutcome(Status.TIMED, "", shapes, check_s=1.5, time_s=2.5)


def test_each_row_derives_its_percentages_and_tflops_from_its_own_shapes_times(context):
    study = context.study
    config = study.kernel.config_type.parse("64x32_w4_s2")
    rows = result_rows(config, context, Status.TIMED, Stage.TIME, "", {}, _outcome(study, [(0.015, 11.0),
                                                                                             (0.060, 13.0)]), 4)
    assert [r.shape for r in rows] == [s.label for s in study.shapes]
    for row, shape, ms, host, flash, cudnn in zip(rows, study.shapes, (0.015, 0.060), (11.0, 13.0),
                                                   (0.030, 0.090), (0.020, 0.050)):
        assert (row.ms, row.host_us, row.flash_ms, row.cudnn_ms) == (ms, host, flash, cudnn)
        assert row.pct_flash == pytest.approx(100 * flash / ms) and row.pct_cudnn == pytest.approx(100 * cudnn / ms)
        assert row.tflops == pytest.approx(study.kernel.flops(shape) / (ms * 1e-3) / 1e12)
        assert (row.n_q, row.batch, row.heads, row.dtype) == (shape.n_q, 2, 3, "fp16")
        assert (row.device_index, row.host, row.run_id, row.optuna_trial, row.gpu) == (1, "h", 7, 4, "G")
    assert objective(rows, "speedup_vs_flash") == pytest.approx(math.sqrt(2.0 * 1.5))
    assert objective(rows, "speedup_vs_cudnn") == pytest.approx(math.sqrt((0.020 / 0.015) * (0.050 / 0.060)))


def test_a_rejected_config_has_rows_without_times_or_device(context):
    config = context.study.kernel.config_type.parse("64x32_w4_s2")
    rows = result_rows(config, context, Status.OVER_SMEM, Stage.BUDGET, "too big", {"smem_bytes": 1})
    for row in rows:
        assert (row.ms, row.pct_flash, row.pct_cudnn, row.tflops, row.device_index) == (None,) * 5
        assert (row.status, row.reason, row.smem_bytes) == ("over_smem", "too big", 1)
    assert objective(rows, "tflops") == 0.0
