"""Pins the finalists' bookkeeping: when stored verdicts cover exactly the finalists chosen, the figure a
verdict says it was decided on, the adaptive protocol's round counts, and the store rows' ranks and cycles."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel.measure.retime import ADAPTIVE, CYCLES, MS
from tuner.finalists import covers, finalist_rows, judge, protocol

CTX = SimpleNamespace(run_id=1, study=SimpleNamespace(name="hand"), target=SimpleNamespace(name="sm_90"),
                      gpu_label="NVIDIA H200 (sm_90)")


def _stored(**shapes: tuple[str, ...]) -> dict:
    return {label: judge(label, {key: [1.0 + i, 1.0 + i] for i, key in enumerate(keys)})
            for label, keys in shapes.items()}


def test_stored_verdicts_of_exactly_the_chosen_finalists_cover_them():
    assert covers({"s1": ["a", "b"], "s2": ["c"]}, _stored(s1=("b", "a"), s2=("c",)))


@pytest.mark.parametrize("chosen, stored", [
    ({"s1": ["a"]}, _stored(s1=("a", "b"))),                       # a stored config no longer chosen
    ({"s1": ["a", "b"]}, _stored(s1=("a",))),                      # a chosen config not re-timed
    ({"s1": ["a"]}, _stored(s1=("a",), s2=("c",))),                # a stored shape no longer chosen
    ({"s1": ["a"], "s2": ["c"]}, _stored(s1=("a",))),              # a chosen shape not re-timed
    ({}, {}),                                                      # nothing chosen: nothing to take as it is
])
def test_stored_verdicts_that_differ_from_the_chosen_finalists_do_not_cover_them(chosen, stored):
    assert not covers(chosen, stored)


def test_a_verdict_without_per_round_figures_says_it_was_decided_on_ms():
    times = {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]}
    verdict = judge("s", times, figure=CYCLES)
    assert verdict.figure == MS and "(on" not in verdict.sentence()
    decided = judge("s", times, figure=CYCLES, figures={"a": [3.0, 3.0, 3.0], "b": [1.0, 1.0, 1.0]})
    assert decided.figure == CYCLES and decided.winner.config == "b" and decided.sentence().endswith("(on cycles)")


@pytest.mark.parametrize("rounds", [1, 2])
def test_adaptive_rounds_capped_below_the_usual_least_stop_within_the_cap(rounds):
    name, (settle_ms, rep_ms, least, most, power) = protocol("adaptive", rounds)
    assert name == "adaptive" and most == rounds and least == rounds <= ADAPTIVE[2]


def test_adaptive_rounds_by_default():
    assert protocol("adaptive")[1][2:4] == ADAPTIVE[2:4]


def test_the_stored_finalists_are_ranked_from_one_the_winner_first():
    verdict = judge("s", {"slow": [2.0, 2.0], "fast": [1.0, 1.0], "mid": [1.5, 1.5]})
    rows = finalist_rows(CTX, verdict, "cuda_graph")
    assert [(r.config, r.rank) for r in rows] == [("fast", 1), ("mid", 2), ("slow", 3)]


def test_median_cycles_are_stored_only_where_every_round_read_the_clock():
    times = {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]}
    verdict = judge("s", times, clocks={"a": [1500.0, None, 1500.0], "b": [1000.0, 1000.0, 1000.0]})
    by_config = {r.config: r for r in finalist_rows(CTX, verdict, "cuda_graph")}
    assert by_config["a"].cycles is None and by_config["a"].clock_mhz == 1500.0
    assert by_config["b"].cycles == pytest.approx(2.0 * 1000.0 * 1e3)
