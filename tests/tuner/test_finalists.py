"""Finalists: which configs are re-timed, in which order, and when the winner is really ahead."""

from __future__ import annotations

from types import SimpleNamespace

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


def test_sdpa_timed_in_the_rounds_is_split_out_and_kept_with_the_verdict():
    from tuner.finalists import judge, split_sdpa
    from tuner.outcome import SDPA_KEYS

    times = {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.0, 2.0], SDPA_KEYS["cudnn"]: [0.8, 0.9, 5.0],
             SDPA_KEYS["flash"]: [1.5, 1.4, 1.6]}
    configs, sdpa = split_sdpa(times)
    assert set(configs) == {"a", "b"} and sdpa == {"cudnn": 0.9, "flash": 1.5}
    verdict = judge("s", configs, sdpa)
    assert verdict.winner.config == "a" and (verdict.flash_ms, verdict.cudnn_ms) == (1.5, 0.9)
    assert judge("s", configs).cudnn_ms is None


def test_the_summary_compares_a_re_timed_winner_with_sdpa_from_the_same_rounds(hand_store):
    """The winner's re-timed median against SDPA's start-of-run baseline mixes two timing
    regimes; with SDPA re-timed in the same rounds, the summary must use that instead."""
    from collections import Counter
    from types import SimpleNamespace

    from tuner.finalists import judge
    from tuner.gpus import GpuSpec
    from tuner.report import summary

    rows = hand_store().results("hand")
    shape = "B1 H2 Nq128 Nk128 D64 bf16"
    best = min((r for r in rows if r.status == "timed" and r.shape == shape), key=lambda r: r.ms)
    verdict = judge(shape, {best.config: [best.ms * 2] * 3}, {"flash": best.ms * 3, "cudnn": best.ms})
    ctx = SimpleNamespace(study=SimpleNamespace(name="hand"), target=GpuSpec.from_name("sm_90"), gpu_label="x",
                          env={"torch": "t", "triton": "t", "driver": "d", "date": "today"})
    text = summary(ctx, rows, Counter(), None, {shape: verdict})
    line = next(ln for ln in text.splitlines() if ln.startswith(shape + " ") and best.config in ln)
    assert line.split()[-3:-1] == ["150", "50"]           # % flash, % cuDNN from the re-timed SDPA
    plain = summary(ctx, rows, Counter(), None, {shape: judge(shape, {best.config: [best.ms * 2] * 3})})
    line = next(ln for ln in plain.splitlines() if ln.startswith(shape + " ") and best.config in ln)
    assert line.split()[-3] == f"{100 * best.flash_ms / (2 * best.ms):.0f}"   # no re-timed SDPA: the baseline


def test_the_agreement_row_gives_each_winner_s_clock_where_the_rounds_read_it(monkeypatch):
    """A stored winner slower on ms only because it ran at a lower clock: the row says so (its
    median MHz beside today's winner's), and the ratio on ms and on cycles."""
    from benchmarks import finalists as bench
    from kernel.measure.retime import Rounds, Sample
    from tuner.outcome import SDPA_KEYS

    samples = {"a": [Sample(0.2150, 1888.0)] * 5, "b": [Sample(0.2092, 1980.0)] * 5,
               SDPA_KEYS["cudnn"]: [Sample(0.18, 1950.0)] * 5}
    monkeypatch.setattr(bench, "retime_rounds", lambda shape, keys, rounds, protocol: Rounds(samples, "cap"))
    stored = judge("s", {"a": [0.2089] * 3, "b": [0.2117] * 3})
    line, behind = bench._agree_line(SimpleNamespace(label="s"), stored, 5)
    cells = [c.strip() for c in line.split("|")]
    assert cells[3] == "b" and cells[4] == f"{0.2150 / 0.2092:.4f}" and behind == pytest.approx(0.2150 / 0.2092 - 1)
    assert cells[5].startswith("a (cycles)") and cells[6] == "1.0000" and cells[8] == "1888 / 1980"


def test_the_stored_medians_are_medians_where_the_mean_differs():
    """Rounds of 1, 1, 7 ms (mean 3, median 1): every median the store keeps (the config's ms, clock and
    cycles, SDPA's ms over the same rounds) is the middle round's, never the mean."""
    from kernel.measure.retime import Rounds, Sample
    from tuner.finalists import finalist_rows, judge_rounds
    from tuner.outcome import SDPA_KEYS

    rounds = Rounds({"a": [Sample(1.0, 1800.0), Sample(1.0, 1800.0), Sample(7.0, 900.0)],
                     SDPA_KEYS["flash"]: [Sample(2.0), Sample(2.0), Sample(11.0)]}, stopped="cap")
    verdict = judge_rounds("s", rounds)
    assert verdict.flash_ms == 2.0
    ctx = SimpleNamespace(run_id=1, study=SimpleNamespace(name="x"), target=SimpleNamespace(name="sm_90"),
                          gpu_label="g")
    (row,) = finalist_rows(ctx, verdict, "cuda_graph")
    assert (row.median_ms, row.min_ms, row.max_ms, row.flash_ms) == (1.0, 1.0, 7.0, 2.0)
    assert row.clock_mhz == 1800.0
    assert row.cycles == pytest.approx(1.0 * 1800.0 * 1e3)        # median of 1.8e6, 1.8e6, 6.3e6
