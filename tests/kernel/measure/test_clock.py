"""The SM clock (a fake NVML), the adaptive re-timing's stopping rules, and the figure that decides:
the ratio to SDPA replayed alternately in the same window where every config has it, cycles where
every measurement has its clock, the ratio to SDPA of the same round otherwise."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import types
from types import SimpleNamespace

import pytest

from kernel.measure import clock
from kernel.measure.retime import (
    CYCLES,
    MS,
    PAIRED,
    PAIRED_CYCLES,
    SDPA_RATIO,
    Rounds,
    Sample,
    adaptive_rounds,
    decided,
    figures,
)
from tuner.finalists import finalist_rows, judge_rounds
from tuner.outcome import SDPA_KEYS


class FakeNvml(types.ModuleType):
    """``pynvml`` as far as :mod:`kernel.measure.clock` uses it: one GPU whose SM clock the test sets."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self, mhz: float = 1900.0, fail: bool = False):
        super().__init__("pynvml")
        self.mhz, self.fail, self.reads = mhz, fail, 0

    def nvmlInit(self):
        if self.fail:
            raise self.NVMLError("driver not loaded")

    UUID = "GPU-6f1c2b7e-0a4d-4c8e-9b1a-2d3e4f5a6b7c"     # what NVML names the GPU; torch's lacks "GPU-"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != self.UUID:          # as NVML: only its own spelling, the "GPU-" prefix included
            raise self.NVMLError(f"NVML_ERROR_NOT_FOUND: {uuid}")
        return ("uuid", uuid)

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("index", index)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == self.NVML_CLOCK_SM
        self.reads += 1
        return self.mhz


@pytest.fixture
def nvml(monkeypatch):
    """Install a fake ``pynvml``; the clock module forgets what it opened before and after."""
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    clock.reset()
    yield fake
    clock.reset()


def test_the_clock_is_read_through_nvml_and_missing_nvml_or_a_driver_error_gives_none(nvml, monkeypatch):
    opened = clock.sm_clock()
    assert opened is not None and opened.mhz() == 1900.0
    nvml.mhz = 1740.0
    assert clock.sm_clock() is opened and opened.mhz() == 1740.0          # opened once, read each time
    monkeypatch.setitem(sys.modules, "pynvml", None)                        # nvidia-ml-py not installed
    clock.reset()
    assert clock.sm_clock() is None
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail=True))         # installed, no driver
    clock.reset()
    assert clock.sm_clock() is None
    assert clock.sample_while(lambda: True, None) is None                   # no clock: no reading, no wait


def test_the_clock_is_averaged_over_the_readings_taken_while_the_gpu_works(nvml):
    opened = clock.sm_clock()
    readings = iter([1700.0, 1800.0, 1900.0])
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: next(readings)
    busy = iter([True, True, False])
    assert clock.sample_while(lambda: next(busy), opened, 0.0) == pytest.approx(1800.0)
    assert clock.cycles(0.5, 1800.0) == pytest.approx(900_000.0) and clock.cycles(0.5, None) is None


class FakeCandidate:
    """A config (or SDPA) of a fixed cycle count, measured while the fake clock runs at the MHz its
    ``clock_of`` says for that round: ms = cycles / clock. ``nvml`` None: no clock is read."""

    def __init__(self, kcycles: float, clock_of, nvml: FakeNvml | None, noise=lambda r: 0.0):
        self.kcycles, self.clock_of, self.nvml, self.noise, self.round = kcycles, clock_of, nvml, noise, 0
        self.settled = 0.0

    def settle(self, ms: float) -> None:
        self.settled += ms

    def measure(self, rep_ms: float) -> Sample:
        mhz = self.clock_of(self.round)
        ms = self.kcycles / mhz * (1 + self.noise(self.round))
        self.round += 1
        if self.nvml is None:
            return Sample(ms)
        self.nvml.mhz = mhz
        return Sample(ms, clock.sample_while(lambda: False, clock.sm_clock()))


def test_a_config_faster_in_ms_only_because_its_clock_was_higher_loses_on_cycles(nvml):
    # steady: 1000 kcycles, always measured at 1740 MHz; lucky: 2% more cycles, at 1935 MHz (10% less ms)
    candidates = {"steady": FakeCandidate(1000.0, lambda r: 1740.0, nvml),
                  "lucky": FakeCandidate(1020.0, lambda r: 1935.0, nvml)}
    rounds = adaptive_rounds(candidates, ["steady", "lucky"], protocol=(300.0, 50.0, 3, 10))
    assert rounds.samples["lucky"][0].ms < rounds.samples["steady"][0].ms          # faster in ms
    verdict = judge_rounds("s", rounds)
    assert verdict.figure == CYCLES and verdict.winner.config == "steady" and verdict.gap == pytest.approx(0.02)
    assert verdict.winner.clock_mhz == 1740.0 and "(on cycles)" in verdict.sentence()
    assert rounds.stopped == "separated" and rounds.rounds == 3                    # decided at the least rounds
    assert all(c.settled == pytest.approx(150.0) for c in candidates.values())     # settled once, shared


class PairingCandidate(FakeCandidate):
    """A captured candidate: its replays can alternate with a partner's, whose ms the window also
    gives, both under the window's own clock, which here moves within a round (``window_clock``)."""

    pairs = True

    def __init__(self, kcycles: float, window_clock, noise=lambda r: 0.0):
        super().__init__(kcycles, lambda r: 0.0, None, noise)
        self.window_clock, self.windows, self.partners = window_clock, 0, []

    def measure(self, rep_ms: float, partner=None) -> Sample:
        mhz = self.window_clock(self.windows)
        self.windows += 1
        self.partners.append(partner)
        own = self.kcycles / mhz * (1 + self.noise(self.windows))
        return Sample(own, None, partner.kcycles / mhz if partner is not None else None)


def test_configs_alternate_with_sdpa_and_the_paired_ratio_decides_where_ms_would_not():
    # the clock moves from window to window, within rounds too; each config's window carries SDPA's ms
    clocks = [1935.0, 1740.0, 1800.0, 1900.0, 1760.0, 1850.0, 1700.0]
    window = lambda w: clocks[w % len(clocks)]
    fast, slow = PairingCandidate(1000.0, window), PairingCandidate(1030.0, lambda w: window(w + 3))
    sdpa = PairingCandidate(1100.0, window)
    candidates = {"fast": fast, "slow": slow, SDPA_KEYS["flash"]: sdpa}
    rounds = adaptive_rounds(candidates, ["fast", "slow"], list(SDPA_KEYS.values()), (0.0, 50.0, 3, 10))
    assert all(p is sdpa for p in fast.partners + slow.partners) and set(sdpa.partners) == {None}   # alone itself
    verdict = judge_rounds("s", rounds)
    assert verdict.figure == PAIRED and verdict.winner.config == "fast" and "alternately" in verdict.sentence()
    assert verdict.winner.figures == pytest.approx([1000 / 1100] * rounds.rounds)    # the clock cancels
    assert verdict.gap == pytest.approx(0.03) and verdict.noise == pytest.approx(0.0)
    assert max(s.ms for s in rounds.samples["fast"]) > min(s.ms for s in rounds.samples["slow"])  # ms overlap


def test_sdpa_that_was_not_captured_leaves_the_configs_measured_alone():
    fast, slow = PairingCandidate(1000.0, lambda w: 1800.0), PairingCandidate(1030.0, lambda w: 1800.0)
    uncaptured = FakeCandidate(1100.0, lambda r: 1800.0, None)        # no ``pairs``: do_bench, not a graph
    rounds = adaptive_rounds({"fast": fast, "slow": slow, SDPA_KEYS["flash"]: uncaptured}, ["fast", "slow"],
                             list(SDPA_KEYS.values()), (0.0, 50.0, 3, 10))
    assert set(fast.partners) == {None} and judge_rounds("s", rounds).figure == SDPA_RATIO


def test_without_nvml_the_ratio_to_sdpa_of_the_same_round_decides():
    # the clock moves from round to round; every candidate of a round sees the same clock, NVML is absent
    per_round = [1935.0, 1740.0, 1800.0, 1900.0]
    clock_of = lambda r: per_round[r % 4]
    candidates = {"a": FakeCandidate(1000.0, clock_of, None), "b": FakeCandidate(1030.0, clock_of, None),
                  SDPA_KEYS["flash"]: FakeCandidate(1100.0, clock_of, None)}
    rounds = adaptive_rounds(candidates, ["a", "b"], list(SDPA_KEYS.values()), (0.0, 50.0, 3, 10))
    verdict = judge_rounds("s", rounds)
    assert verdict.figure == SDPA_RATIO and verdict.winner.config == "a"
    assert verdict.winner.figures == pytest.approx([1000 / 1100] * rounds.rounds)  # the clock cancels in the ratio
    assert verdict.flash_ms == pytest.approx(sorted(1100 / c for c in per_round[:rounds.rounds])[rounds.rounds // 2])
    assert verdict.separated and rounds.stopped == "separated"


def test_the_ratio_is_what_decides_where_it_and_ms_disagree():
    samples = {"a": [Sample(1.0), Sample(1.0), Sample(1.3)], "b": [Sample(1.1)] * 3,
               SDPA_KEYS["flash"]: [Sample(0.8), Sample(1.2), Sample(1.2)]}
    verdict = judge_rounds("s", Rounds(samples, "cap"))
    assert verdict.figure == SDPA_RATIO and verdict.winner.config == "b"             # by ms it would be a
    assert figures({"a": samples["a"], "b": samples["b"]})[0] == MS                 # no clock, no SDPA: ms
    mixed = {"a": [Sample(1.0, 1900.0), Sample(1.0)], "b": [Sample(1.0, 1900.0)] * 2}
    assert figures(mixed)[0] == MS                                                   # cycles only with every clock


def test_rounds_stop_when_separated_when_quiet_or_at_the_cap():
    assert decided({"a": [1.0, 1.01, 1.0], "b": [1.1, 1.1, 1.11]}, ["a", "b"]) == "separated"
    assert decided({"a": [1.0, 1.001, 1.0], "b": [1.0, 1.0, 1.002]}, ["a", "b"]) == "quiet"
    assert decided({"a": [1.0, 1.02, 1.0], "b": [1.01, 1.0, 1.01]}, ["a", "b"]) is None
    assert decided({"a": [1.0, 1.5]}, ["a"]) == "separated"
    # SDPA's own noise does not keep the configs' rounds going: only the contenders count
    assert decided({"a": [1.0, 1.001, 1.0], "b": [1.0, 1.0, 1.002], "sdpa": [1, 2, 3]}, ["a", "b"]) == "quiet"
    noisy = lambda r: 0.02 if r % 2 else -0.02
    tie = {"a": FakeCandidate(1000.0, lambda r: 1800.0, None, noisy),
           "b": FakeCandidate(1000.0, lambda r: 1800.0, None, lambda r: -noisy(r))}
    rounds = adaptive_rounds(tie, ["a", "b"], protocol=(0.0, 50.0, 3, 7))
    assert rounds.stopped == "cap" and rounds.rounds == 7
    verdict = judge_rounds("s", rounds)
    assert not verdict.separated and sorted(verdict.kept) == ["a", "b"]            # a tie keeps both


def test_the_deciding_figure_is_stored_and_read_back_by_the_winners(tmp_path, nvml):
    from tuner.store import Store
    from tuner.winners import verdicts_of

    candidates = {"steady": FakeCandidate(1000.0, lambda r: 1740.0, nvml),
                  "lucky": FakeCandidate(1020.0, lambda r: 1935.0, nvml),
                  SDPA_KEYS["cudnn"]: FakeCandidate(900.0, lambda r: 1800.0, nvml)}
    verdict = judge_rounds("s", adaptive_rounds(candidates, ["steady", "lucky"], list(SDPA_KEYS.values())))
    ctx = SimpleNamespace(run_id=1, study=SimpleNamespace(name="x"), target=SimpleNamespace(name="sm_89"),
                          gpu_label="g")
    path = tmp_path / "f.db"
    db = Store(f"sqlite:///{path}")
    db.replace_finalists(finalist_rows(ctx, verdict, "cuda_graph"))
    with sqlite3.connect(path) as connection:
        stored = connection.execute("select config, figure, clock_mhz, cycles, stopped, figures from fa2_finalists "
                                    "order by rank").fetchall()
    assert [s[:5] for s in stored] == [("steady", "cycles", 1740.0, pytest.approx(1e6), "separated"),
                                       ("lucky", "cycles", 1935.0, pytest.approx(1.02e6), "separated")]
    again = verdicts_of(db, "x", "sm_89", "g")["s"]
    assert again.figure == CYCLES and again.winner.config == "steady" and again.cudnn_ms == verdict.cudnn_ms
    assert json.loads(stored[0][5]) == pytest.approx(list(verdict.winner.figures))
    with sqlite3.connect(path) as connection:      # a store written before figures: decided on ms again
        connection.execute("update fa2_finalists set figures = null, figure = null")
    assert verdicts_of(db, "x", "sm_89", "g")["s"].winner.config == "lucky"


@pytest.mark.gpu
@pytest.mark.timing
def test_adaptive_rounds_on_the_gpu_capture_once_read_the_clock_and_decide():
    """Two real configs and SDPA's flash backend, each captured once, in adaptive rounds; the clock is read
    where NVML is installed (every sample then has it); the configs' windows alternate with SDPA's."""
    from kernel.measure.retime import Candidate
    from kernel.measure.timing import sdpa_backends
    from tuner.finalists import judge_rounds
    from tuner.kernels.triton_fwd import KERNEL, FwdConfig
    from tuner.problem import Problem

    problem = Problem(batch=2, heads=4, n_q=1024, n_k=1024, head_dim=64, dtype="bf16", causal=False)
    sets = [KERNEL.inputs(problem, "cuda") for _ in range(4)]
    calls = {key: [KERNEL.call(FwdConfig.parse(key), t, problem) for t in sets]
             for key in ("128x64_w8_s3", "64x32_w4_s2")}
    pin, sdpa = sdpa_backends([(t["q"], t["k"], t["v"]) for t in sets], False)["flash"]
    opened = clock.sm_clock()
    candidates = {key: Candidate(c, None, opened) for key, c in calls.items()}
    candidates[SDPA_KEYS["flash"]] = Candidate(sdpa, pin, opened)
    assert all(c.method == "cuda_graph" for c in candidates.values())
    rounds = adaptive_rounds(candidates, list(calls), [SDPA_KEYS["flash"]], (100.0, 20.0, 3, 6))
    assert 3 <= rounds.rounds <= 6 and rounds.stopped in ("separated", "quiet", "cap")
    samples = [s for runs in rounds.samples.values() for s in runs]
    assert all(s.ms > 0 for s in samples)
    verdict = judge_rounds("gpu", rounds)
    if opened is not None:
        assert all(s.mhz and 300 < s.mhz < 3500 for s in samples)
    else:
        assert all(s.mhz is None for s in samples)
    # each config's windows alternated with SDPA's replays (captured too): the paired ratio decides
    assert all(s.ref_ms and s.ref_ms > 0 and s.ratio and s.ratio > 0 for key in calls for s in rounds.samples[key])
    assert all(s.ref_ms is None for s in rounds.samples[SDPA_KEYS["flash"]]) and verdict.figure == PAIRED_CYCLES
    assert verdict.flash_ms and verdict.winner.config in calls


def test_each_cycle_s_ratio_to_the_partner_s_next_replay_decides_where_every_window_kept_it():
    """A clock dip the partner's replay missed moves one cycle's ratio, which the median sets aside;
    the windows' medians (1.2 against 0.5) would put the config 20% slower in its first round."""
    from kernel.measure.retime import all_figures, cycle_ratio

    own, theirs = [1.0] * 4 + [1.2] * 8, [0.5, 0.5, 0.6]
    assert cycle_ratio(own, theirs) == pytest.approx(2.0)
    samples = {"a": [Sample(1.2, None, 0.5, cycle_ratio(own, theirs)), Sample(1.0, None, 0.5, 2.0)],
               SDPA_KEYS["flash"]: [Sample(0.5), Sample(0.5)]}
    every = all_figures(samples, [SDPA_KEYS["flash"]])
    assert every[PAIRED]["a"] == pytest.approx([2.4, 2.0]) and every[PAIRED_CYCLES]["a"] == pytest.approx([2.0, 2.0])
    assert list(every)[:2] == [PAIRED_CYCLES, PAIRED] and figures(samples, [SDPA_KEYS["flash"]])[0] == PAIRED_CYCLES
    verdict = judge_rounds("s", Rounds(samples, "cap"))
    assert verdict.figure == PAIRED_CYCLES and "cycle by cycle" in verdict.sentence()
    assert verdict.winner.figures == pytest.approx([2.0, 2.0])
    samples["a"][1] = Sample(1.0, None, 0.5)                          # one window without it: the windows decide
    assert PAIRED_CYCLES not in all_figures(samples, [SDPA_KEYS["flash"]])
    assert figures(samples, [SDPA_KEYS["flash"]])[0] == PAIRED


def test_paired_together_reports_the_ratio_to_the_reference_cycle_by_cycle(monkeypatch):
    """The benchmarks' x SDPA-cuDNN: 1 / the cycles' median ratio where kept, else the windows'."""
    from kernel.measure import retime

    rounds = Rounds({"ours": [Sample(1.2, None, 0.5, 2.0)] * 3, "cudnn": [Sample(0.5)] * 3}, "cap")
    monkeypatch.setattr(retime, "Candidate", lambda calls, pin: object())
    monkeypatch.setattr(retime, "adaptive_rounds", lambda *args: rounds)
    ms, versus = retime.paired_together({"ours": [], "cudnn": []})
    assert ms == {"ours": pytest.approx(1.2), "cudnn": pytest.approx(0.5)} and versus == {"ours": pytest.approx(0.5)}
    rounds.samples["ours"] = [Sample(1.2, None, 0.5)] * 3
    assert retime.paired_together({"ours": [], "cudnn": []})[1] == {"ours": pytest.approx(0.5 / 1.2)}


def test_the_stability_report_gives_the_spread_on_every_figure_the_rounds_allow():
    from benchmarks.search import stability_report
    from kernel.measure.retime import all_figures

    samples = {"a": [Sample(1.0, 1900.0, 0.9), Sample(1.05, 1800.0, 0.945), Sample(1.0, 1850.0, 0.9)],
               "b": [Sample(1.1, 1900.0, 0.9), Sample(1.1, 1800.0, 0.9), Sample(1.12, 1850.0, 0.9)],
               SDPA_KEYS["flash"]: [Sample(0.9, 1900.0), Sample(0.95, 1800.0), Sample(0.9, 1850.0)]}
    every = all_figures(samples, list(SDPA_KEYS.values()))
    assert list(every) == [PAIRED, CYCLES, SDPA_RATIO, MS] and SDPA_KEYS["flash"] not in every[PAIRED]
    verdict = judge_rounds("s", Rounds(samples, "cap"))
    lines = stability_report(verdict, every)
    assert "spread on paired (decides)" in lines[0] and "spread on ms" in lines[0]
    row_a = next(line for line in lines if "| a |" in line).split("|")
    assert row_a[6].strip() == "0.00%" and row_a[9].strip() == "5.00%"     # paired: a flat 1/0.9; ms: 5% apart
    largest = next(line for line in lines if line.startswith("Largest spread"))
    assert largest.startswith("Largest spread on paired 1.82%") and "on ms 5.00%" in largest
    # round by round, with each round's clock: b's paired figure moves (1.2222 -> 1.2444), a's does not
    rounds = lines[lines.index("Round by round: paired @ MHz") + 2:]
    assert rounds[2] == "| a | 1.1111 @ 1900 | 1.1111 @ 1800 | 1.1111 @ 1850 |"
    assert rounds[3] == "| b | 1.2222 @ 1900 | 1.2222 @ 1800 | 1.2444 @ 1850 |"


def test_the_power_benchmark_refuses_a_bad_config_naming_the_flag_and_wants_a_gpu(capsys, monkeypatch):
    import torch

    from benchmarks import power

    assert power.config_arg("64x64_w4_s4").as_kwargs() == dict(block_m=64, block_n=64, num_warps=4, num_stages=4)
    with pytest.raises(SystemExit) as stop:
        power.main(["--config", "64x64"])
    assert stop.value.code == 2 and "--config '64x64': config '64x64' must be" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert power.main(["--config", "128x64_w8_s3"]) == 2 and "needs a CUDA GPU" in capsys.readouterr().err


def test_the_power_benchmark_reads_this_process_s_gpu_through_sm_clock_and_skips_missed_readings():
    from benchmarks import power

    readings = iter([1900.0, None, 1880.0] * 50)
    nvml = SimpleNamespace(nvmlDeviceGetPowerUsage=lambda handle: 690_000 if handle == "mine" else 0)
    gpu = SimpleNamespace(nvml=nvml, handle="mine", mhz=lambda: next(readings))
    graph = SimpleNamespace(timed=lambda rep_ms: (time.sleep(0.3), ([0.2, 0.21, 0.22], None))[1])
    ms, watts, mhz = power.sustained(graph, 0.3, gpu)
    assert ms == pytest.approx(0.21) and watts == pytest.approx(690.0) and 1880.0 <= mhz <= 1900.0


def test_a_zero_mhz_reading_is_no_reading(nvml):
    """NVML reads 0 MHz from a GPU it cannot clock (idle, throttled to nothing, a MIG slice): never a clock."""
    opened = clock.sm_clock()
    nvml.mhz = 0
    assert opened.mhz() is None
    readings = iter([0.0, 1800.0, 0.0])
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: next(readings)
    busy = iter([True, True, False])
    assert clock.sample_while(lambda: next(busy), opened, 0.0) == 1800.0       # the zeros skipped, not averaged
    clock.reset()
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: 0
    assert clock.sm_clock() is None                                       # a clock that reads 0 is not opened


def _torch_uuid(monkeypatch, uuid: str) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(uuid=uuid))


def test_the_gpu_is_found_by_torch_s_uuid_with_nvml_s_gpu_prefix(nvml, monkeypatch, recwarn):
    _torch_uuid(monkeypatch, FakeNvml.UUID.removeprefix("GPU-"))         # torch prints it without the prefix
    assert clock.sm_clock().handle == ("uuid", FakeNvml.UUID)
    assert not recwarn.list


def test_a_uuid_torch_gives_with_the_prefix_is_passed_as_it_is(nvml, monkeypatch, recwarn):
    _torch_uuid(monkeypatch, FakeNvml.UUID)                             # a torch that prints NVML's spelling
    assert clock.sm_clock().handle == ("uuid", FakeNvml.UUID)
    assert not recwarn.list


@pytest.mark.parametrize("visible, index", [("3,1", 3), (" 2 , 0", 2), ("", 0), ("GPU-abc,1", 0)])
def test_without_a_uuid_the_first_visible_gpu_is_read(nvml, monkeypatch, visible, index):
    """Torch's device 0 is the first GPU CUDA_VISIBLE_DEVICES lists (a UUID there: NVML's GPU 0, the index
    unknown)."""
    _torch_uuid(monkeypatch, "")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert clock.sm_clock().handle == ("index", index)


def test_a_uuid_nvml_refuses_falls_back_to_the_index_saying_so(nvml, monkeypatch):
    _torch_uuid(monkeypatch, "0badc0de-0000-0000-0000-000000000000")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.warns(RuntimeWarning, match="NVML has no GPU GPU-0badc0de.*NVML's GPU 3 instead"):
        opened = clock.sm_clock()
    assert opened.handle == ("index", 3)
