"""The finalists' power check (kernel.measure.retime.power_check): the configs close to the leader run alone
until the power cap acts, and the figure that decides is the clock-free one at the clock each holds
there (``sustained``). Fake candidates: a config's cycles are fixed, its clock in the paired windows
is the same for all, its clock alone is its own."""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace

import pytest
from conftest import ROOT

from kernel.measure.retime import (
    PAIRED,
    POWER,
    SUSTAINED,
    Rounds,
    Sample,
    adaptive_rounds,
    all_figures,
    power_check,
)
from tuner.finalists import judge_rounds, protocol
from tuner.outcome import SDPA_KEYS

WINDOW_MHZ = 1965.0             # every config's clock in the short paired windows (issue 24, round 5)


class Captured:
    """A captured candidate: in a window its replays alternate with the partner's at WINDOW_MHZ;
    alone (``alone_mhz``: None, not a config the cap tells apart) it runs at its own clock."""

    pairs = True

    def __init__(self, kcycles: float, alone_mhz: float | None = None):
        self.kcycles, self.alone_mhz, self.alone_calls = kcycles, alone_mhz, []

    def settle(self, ms: float) -> None:
        return None

    def measure(self, rep_ms: float, partner=None) -> Sample:
        own = self.kcycles / WINDOW_MHZ
        if partner is None:
            return Sample(own, WINDOW_MHZ)
        return Sample(own, WINDOW_MHZ, partner.kcycles / WINDOW_MHZ, self.kcycles / partner.kcycles)

    def alone(self, settle_ms: float, timed_ms: float) -> Sample:
        self.alone_calls.append((settle_ms, timed_ms))
        return Sample(self.kcycles / self.alone_mhz, self.alone_mhz) if self.alone_mhz else Sample(1.0)


def _rounds(candidates, power=POWER):
    candidates = {**candidates, SDPA_KEYS["cudnn"]: Captured(1200.0, 1900.0)}
    contenders = [name for name in candidates if name not in SDPA_KEYS.values()]
    return adaptive_rounds(candidates, contenders, list(SDPA_KEYS.values()), (0.0, 50.0, 3, 3), power)


def test_a_config_with_fewer_cycles_but_clocked_lower_alone_loses_on_the_sustained_figure():
    # issue 24's pair at B4 H8 N4096 causal: 64x64_w4_s4 needs 2% fewer cycles, the cap holds it at 1890 MHz
    hungry, frugal = Captured(1000.0, 1890.0), Captured(1020.0, 1980.0)
    rounds = _rounds({"64x64_w4_s4": hungry, "128x64_w8_s3": frugal})
    assert set(rounds.alone) == {"64x64_w4_s4", "128x64_w8_s3"}          # SDPA is not checked
    assert hungry.alone_calls == frugal.alone_calls == [POWER[:2]]
    verdict = judge_rounds("s", rounds)
    assert verdict.figure == SUSTAINED and verdict.winner.config == "128x64_w8_s3"
    assert verdict.gap == pytest.approx((1000 / 1890) / (1020 / 1980) - 1)    # as ms alone would say
    assert "at the clock each holds alone" in verdict.sentence()
    # without the check the same rounds pick the one with fewer cycles (what the windows see)
    plain = judge_rounds("s", Rounds(rounds.samples, rounds.stopped))
    assert plain.figure != SUSTAINED and plain.winner.config == "64x64_w4_s4"


def test_only_configs_within_the_margin_of_the_leader_are_checked_at_most_the_setting_s_number():
    close = {f"c{i}": Captured(1000.0 * (1 + 0.01 * i), 1900.0 + i) for i in range(5)}   # 0-4% behind
    far = Captured(1100.0, 2100.0)                                                    # 10% behind
    rounds = _rounds({**close, "far": far}, (120.0, 120.0, 0.04, 3))
    assert list(rounds.alone) == ["c0", "c1", "c2"] and not far.alone_calls            # best first, three
    sustained = all_figures(rounds.samples, list(SDPA_KEYS.values()), rounds.alone)[SUSTAINED]
    middle = statistics.median([1900.0, 1901.0, 1902.0])
    assert sustained["c1"][0] == pytest.approx(1010.0 / 1200.0 * middle / 1901.0)
    assert sustained["far"][0] == pytest.approx(1100.0 / 1200.0)                      # unchecked: as it was


@pytest.mark.parametrize("case", ["no check", "one close config", "no clock alone", "not captured"])
def test_where_the_check_tells_nothing_the_paired_figure_decides(case):
    a, b = Captured(1000.0, 1890.0), Captured(1100.0 if case == "one close config" else 1010.0, 1980.0)
    if case == "no clock alone":
        a.alone_mhz = b.alone_mhz = None
    if case == "not captured":
        a.alone = b.alone = lambda settle_ms, timed_ms: None
    rounds = _rounds({"a": a, "b": b}, None if case == "no check" else POWER)
    assert rounds.alone == {}
    assert judge_rounds("s", rounds).figure not in (SUSTAINED,)


def test_the_finalists_ask_the_worker_for_the_check_and_the_fixed_protocol_does_not():
    kind, setting = protocol("adaptive", 6)
    assert kind == "adaptive" and setting[3] == 6 and setting[4] == POWER
    assert protocol("fixed", 4) == ("fixed", 4)
    assert power_check({}, {"a": [1.0]}, ["a"]) == {}                   # one contender: nothing to check


def test_the_stability_report_shows_the_clock_each_held_alone():
    from benchmarks.search import stability_report

    hungry, frugal = Captured(1000.0, 1890.0), Captured(1020.0, 1980.0)
    rounds = _rounds({"hungry": hungry, "frugal": frugal})
    every = all_figures(rounds.samples, list(SDPA_KEYS.values()), rounds.alone)
    assert list(every)[0] == SUSTAINED and PAIRED in every
    lines = stability_report(judge_rounds("s", rounds), every, rounds.alone)
    assert "spread on sustained (decides)" in lines[0] and "MHz alone" in lines[0]
    assert "| 1890 |" in next(line for line in lines if "| hungry |" in line)


def test_the_power_trace_bins_the_clock_after_a_switch():
    from benchmarks import power

    start = time.perf_counter()
    gpu = SimpleNamespace(nvml=SimpleNamespace(nvmlDeviceGetPowerUsage=lambda handle: 650_000), handle=None,
                          mhz=lambda: 1980.0 if time.perf_counter() - start < 0.1 else 1890.0)
    graph = SimpleNamespace(replay_for=lambda ms: time.sleep(ms / 1000))
    bins = power.transient(graph, 0.35, gpu)
    assert [b[0] for b in bins] == [0, 10, 25, 50, 75, 100, 150, 200, 300]
    assert bins[0][1] == 1980.0 and bins[-1][1] == 1890.0 and bins[-1][2] == pytest.approx(650.0)


def test_every_deciding_figure_s_name_fits_the_store_s_column():
    from kernel.measure.retime import PREFERENCE
    from tuner.store import Finalist

    width = Finalist.__table__.c.figure.type.length
    assert all(len(name) <= width for name in PREFERENCE), (width, PREFERENCE)


def test_the_device_script_s_close_pair_study_holds_issue_24_s_pair_plain():

    from tuner.study import load

    study = load(str(ROOT / "scripts" / "power_pair.toml"))
    keys = {config.key for config in study.configs()}
    assert {"64x64_w4_s4", "128x64_w8_s3"} <= keys and study.kernel_name == "triton"
    assert {shape.causal for shape in study.shapes} == {False, True}


def test_a_winner_on_the_sustained_figure_by_less_than_one_clock_reading_s_noise_keeps_the_runner_up():
    from kernel.measure.retime import ALONE_NOISE

    # 1% fewer cycles, clocked 0.5% lower alone: 0.5% ahead on sustained, under ALONE_NOISE
    rounds = _rounds({"a": Captured(1000.0, 1970.0), "b": Captured(1010.0, 1980.0)})
    verdict = judge_rounds("s", rounds)
    assert verdict.figure == SUSTAINED and verdict.winner.config == "a" and verdict.gap < ALONE_NOISE
    assert verdict.noise == pytest.approx(ALONE_NOISE) and verdict.kept == ["a", "b"]
    # the pair of issue 24, 2.6% apart on sustained: separated
    assert judge_rounds("s", _rounds({"a": Captured(1000.0, 1890.0), "b": Captured(1020.0, 1980.0)})).kept == ["b"]
