"""Rows and scores: the value told to Optuna, and the ranking across shapes."""

from __future__ import annotations

import math

import pytest

from tuner.records import fully_timed, objective, scores
from tuner.store import Result


def _row(config, shape, ms, pct_flash=None, status="timed"):
    return Result(config=config, shape=shape, ms=ms, pct_flash=pct_flash, pct_cudnn=pct_flash, tflops=ms and 100 / ms,
                  status=status)


def test_objective_is_the_geometric_mean_of_the_metric_and_zero_unless_all_timed():
    rows = [_row("a", "s1", 1.0, 200.0), _row("a", "s2", 1.0, 50.0)]
    assert objective(rows, "speedup_vs_flash") == pytest.approx(1.0)          # sqrt(2 x 0.5)
    assert objective(rows, "tflops") == pytest.approx(100.0)
    assert objective(rows[:1] + [_row("a", "s2", None, None, "incorrect")], "speedup_vs_flash") == 0.0
    assert objective([], "tflops") == 0.0


def test_scores_count_each_shape_against_its_own_best():
    rows = [_row("a", "small", 0.010), _row("a", "big", 1.00),
            _row("b", "small", 0.020), _row("b", "big", 0.90)]
    result = scores(rows)
    assert result["a"] == pytest.approx(math.sqrt(1.0 * 0.9))                 # best at small, 10% off at big
    assert result["b"] == pytest.approx(math.sqrt(0.5 * 1.0))
    assert max(result, key=result.get) == "a"


def test_scores_rank_as_the_objective_does_for_any_per_shape_baseline():
    rows = [_row(c, s, ms, 100 * base / ms) for c, s, ms, base in
            [("a", "x", 1.0, 3.0), ("a", "y", 5.0, 2.0), ("b", "x", 1.2, 3.0), ("b", "y", 4.0, 2.0),
             ("c", "x", 0.9, 3.0), ("c", "y", 6.5, 2.0)]]
    by_score = sorted(scores(rows), key=scores(rows).get)
    by_objective = sorted("abc", key=lambda c: objective([r for r in rows if r.config == c], "speedup_vs_flash"))
    assert by_score == by_objective


def test_configs_timed_on_only_some_shapes_are_not_candidates():
    rows = [_row("a", "s1", 1.0), _row("a", "s2", 1.0), _row("b", "s1", 0.5),
            _row("c", "s1", 0.4), _row("c", "s2", 0.4, status="crashed")]
    assert set(fully_timed(rows)) == {"a"} and set(scores(rows)) == {"a"}
