"""Finalists: which configs are re-timed, in which order, and when the winner is really ahead."""

from __future__ import annotations

import pytest

from tuner.finalists import judge, round_orders, select_finalists
from tuner.store import Result


def _row(config: str, shape: str, ms: float | None, status: str = "timed") -> Result:
    return Result(config=config, shape=shape, ms=ms, status=status)


def test_select_takes_each_shapes_top_k_plus_the_best_overall():
    rows = [_row("a", "s1", 1.0), _row("b", "s1", 1.1), _row("c", "s1", 1.2), _row("d", "s1", 3.0),
            _row("a", "s2", 9.0), _row("b", "s2", 8.0), _row("c", "s2", 2.0), _row("d", "s2", 2.1),
            _row("e", "s1", 0.5, "incorrect"), _row("e", "s2", 0.5, "incorrect")]
    chosen = select_finalists(rows, top=2)
    # c is best across shapes (geometric mean of best/time: a 0.47, b 0.50, c 0.91, d 0.58)
    assert chosen == {"s1": ["a", "b", "c"], "s2": ["c", "d"]}
    assert "e" not in sum(chosen.values(), [])                      # never an untimed config


def test_rounds_rotate_so_no_config_is_always_first():
    orders = round_orders(["a", "b", "c"], 5)
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"], ["b", "c", "a"]]
    assert round_orders([], 3) == []


def test_judge_ranks_by_median_and_reports_gap_and_noise():
    verdict = judge("s", {"slow": [1.10, 1.11, 1.10, 1.12, 1.10], "fast": [1.00, 1.01, 1.00, 1.00, 1.02]})
    assert verdict.winner.config == "fast" and verdict.runner_up.config == "slow"
    assert verdict.gap == pytest.approx(0.10)
    assert verdict.noise == pytest.approx(0.02)                     # the larger spread of the two (fast's)
    assert verdict.separated and verdict.kept == ["fast"]
    assert verdict.sentence() == "winner fast, runner-up slow, 10.0% apart, noise 2.0%"


def test_a_gap_inside_the_noise_keeps_both():
    verdict = judge("s", {"a": [1.00, 1.05, 0.99, 1.00, 1.00], "b": [1.01, 1.01, 1.02, 1.01, 1.01]})
    assert not verdict.separated and verdict.kept == ["a", "b"]
    assert verdict.sentence().endswith("(within the noise: both are kept)")


def test_a_lone_finalist_is_its_own_winner():
    verdict = judge("s", {"a": [2.0, 2.0]})
    assert verdict.runner_up is None and verdict.separated and verdict.kept == ["a"]


def test_the_winner_is_the_best_median_not_the_best_single_round():
    verdict = judge("s", {"lucky": [0.90, 1.10, 1.10, 1.10, 1.10], "steady": [1.00, 1.00, 1.01, 1.00, 1.00]})
    assert verdict.winner.config == "steady" and verdict.runner_up.config == "lucky"
