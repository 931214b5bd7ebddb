"""Adaptive re-timing: candidates side by side in rounds, until the leader is known.

The fixed protocol (:func:`kernel.measure.timing.interleaved_rounds` with :data:`kernel.measure.timing.RETIME`)
builds a CUDA graph and settles the clock for 100 ms before every one of its 200 ms
measurements, for 5 rounds whatever the timings say: 8 shapes x 6 configs x 5 rounds took
74 s of a 151 s main job on the H200. Here, per shape:

* each candidate's graph is captured once (:class:`Candidate`), and replayed in every round;
* the clock is settled once, by replaying every candidate in turn, not before each measurement;
* each measurement is :data:`ADAPTIVE` ``rep_ms`` of replays, with the SM clock read as it
  runs (:mod:`kernel.measure.clock`), in rounds whose order rotates; a config's replays alternate with
  those of SDPA (the first of its backends that was captured), four of the config's to one of
  SDPA's, so that each window gives the config's ms and SDPA's under the same clock, in a power
  state that is mostly the config's own (:meth:`Candidate.measure`);
* after ``min_rounds`` the rounds stop (:func:`decided`) once the leader's gap to the runner-up
  is outside the noise, or once every candidate's noise is at most 0.5% (nvbench's stopping
  noise), or at ``max_rounds``;
* then, where asked (:data:`POWER`), the configs close to the leader each run alone long enough
  for the board's power cap to act, and their clock is read (:func:`power_check`).

What a round's figure is (:func:`figures`, in the order of :data:`PREFERENCE`): where the power
check ran, the figure below it at the clock each config holds alone (``sustained``: a config that
spends more energy per cycle is clocked lower under the cap, and is slower in ms, though the
windows' figures cancel the clock); else the ratio to SDPA
replayed alternately in the same window, cycle by cycle (``paired_cycles``: the median over the
window's cycles of each cycle's ratio, :func:`cycle_ratio`) where every config's measurement has
it; else the same ratio window by window (``paired``: the window's median ms over SDPA's); else
cycles (ms x MHz) where every measurement has a clock; else the ratio to SDPA timed in the same
round; else ms. Why the paired ratios come first, measured on the H200 (power-capped, its clock
wandering 1740-1935 MHz), and why cycle by cycle before window by window (over three re-timings
of the top 5, 0.28% against 2.95%): docs/results/2026-12-01-h200-tuner-speed.md.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kernel.measure.clock import cycles

PAIRED, CYCLES, SDPA_RATIO, MS = "paired", "cycles", "sdpa_ratio", "ms"
PAIRED_CYCLES = "paired_cycles"                   # the paired figure cycle by cycle (cycle_ratio)
SUSTAINED = "sustained"                           # a clock-free figure at each config's clock alone (power_check)
PREFERENCE = (SUSTAINED, PAIRED_CYCLES, PAIRED, CYCLES, SDPA_RATIO, MS)   # the first a re-timing has decides
CLOCK_FREE = (PAIRED_CYCLES, PAIRED, CYCLES)      # the figures that cancel the clock (what sustained scales)
QUIET = 0.005                 # every candidate's noise at or under 0.5%: more rounds would not tell more
# (settle_ms once per shape, rep_ms per measurement, min_rounds, max_rounds)
ADAPTIVE = (300.0, 50.0, 3, 10)
# The power check (settle_ms and timed_ms alone per config, margin, most configs): those within
# ``margin`` of the leader, at most ``most``. A config switched to alone moves its clock over
# 75-150 ms on the H200, then holds it within about 1% (python -m benchmarks.power --trace;
# issue 24): two such configs at B4 H8 N4096 causal held 1890-1905 and 1965-1980 MHz.
POWER = (120.0, 120.0, 0.04, 3)
# How far a config's clock alone, read once, may be from the clock it holds: about 1% after the
# switch settles (the same trace). A winner on ``sustained`` ahead by less keeps the runner-up too.
ALONE_NOISE = 0.01


@dataclass(frozen=True)
class Sample:
    """One measurement: GPU ms per call, the mean SM clock while it ran (None: not read), the ms
    per call of the reference its replays alternated with (None: measured alone), and the median
    over the window's cycles of its ms over the reference's in that cycle (:func:`cycle_ratio`;
    None: not kept)."""

    ms: float
    mhz: float | None = None
    ref_ms: float | None = None
    ratio: float | None = None


def cycle_ratio(own: Sequence[float], theirs: Sequence[float]) -> float:
    """The median over a paired window's cycles of the mean of a cycle's own replays over the
    partner's replay that follows them (``own`` holds ``len(own) // len(theirs)`` per cycle). Each
    ratio compares replays milliseconds apart, so a clock dip within the window moves both sides
    of the few ratios it covers, and the median sets those aside; the window's paired figure
    (``median(own) / median(theirs)``) compares replays up to a window apart. Over three re-timings
    of the top 5 on the H200 this one spread 0.28% at most, that one 2.95% (issue 24): this decides."""
    share = len(own) // len(theirs)
    return statistics.median(statistics.fmean(own[c * share:(c + 1) * share]) / theirs[c] for c in range(len(theirs)))


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how far apart a candidate's own rounds are."""
    return (max(values) - min(values)) / statistics.median(values)


def all_figures(samples: Mapping[str, Sequence[Sample]], reference: Sequence[str] = (),
                alone: Mapping[str, Sample] | None = None) -> dict[str, dict[str, list]]:
    """Every figure these samples allow, in the order of :data:`PREFERENCE`: figure -> name -> its
    figure per round. ``sustained`` where ``alone`` (:func:`power_check`) holds two clocks or more:
    the first of :data:`CLOCK_FREE` times the median of those clocks over the config's own (a config
    not checked keeps its figure, as if at that median clock). ``paired_cycles`` and ``paired``
    (over the names not in ``reference``) where each of their measurements alternated with SDPA's
    (the first where each kept its cycles' ratio, :attr:`Sample.ratio`); ``cycles`` where every
    measurement read the clock; ``sdpa_ratio``: each round's ms over the first of ``reference``
    that has every round; ``ms``."""
    out: dict[str, dict[str, list]] = {}
    configs = {name: runs for name, runs in samples.items() if name not in reference}
    if configs and all(s.ref_ms and s.ratio is not None for runs in configs.values() for s in runs):
        out[PAIRED_CYCLES] = {name: [s.ratio for s in runs] for name, runs in configs.items()}
    if configs and all(s.ref_ms for runs in configs.values() for s in runs):
        out[PAIRED] = {name: [s.ms / s.ref_ms for s in runs] for name, runs in configs.items()}
    if samples and all(s.mhz for runs in samples.values() for s in runs):
        out[CYCLES] = {name: [cycles(s.ms, s.mhz) for s in runs] for name, runs in samples.items()}
    rounds = max((len(runs) for runs in samples.values()), default=0)
    base = next((samples[name] for name in reference if len(samples.get(name, ())) == rounds), None)
    if base is not None and rounds:
        out[SDPA_RATIO] = {name: [s.ms / b.ms for s, b in zip(runs, base)] for name, runs in samples.items()}
    out[MS] = {name: [s.ms for s in runs] for name, runs in samples.items()}
    clock_free = next((out[name] for name in CLOCK_FREE if name in out), None)
    clocks = {name: s.mhz for name, s in (alone or {}).items() if s.mhz}
    if clock_free is not None and len(clocks) >= 2:
        middle = statistics.median(clocks.values())
        out = {SUSTAINED: {name: [v * middle / clocks[name] for v in values] if name in clocks else list(values)
                           for name, values in clock_free.items()}, **out}
    return out


def figures(samples: Mapping[str, Sequence[Sample]], reference: Sequence[str] = (),
            alone: Mapping[str, Sample] | None = None) -> tuple[str, dict[str, list]]:
    """(which figure, name -> its figure per round) that the candidates are compared on: the first
    of :func:`all_figures`. The paired ratios: a config's replays and SDPA's alternate within one
    window, so a clock, a temperature or a power draw that moves over seconds moves both. Cycles:
    a config faster in ms only because the clock was higher during its rounds is not faster. The
    ratio to SDPA of the same round: a clock that moves between rounds moves both. Else ms."""
    return next(iter(all_figures(samples, reference, alone).items()))


def decided(per_round: Mapping[str, Sequence[float]], contenders: Sequence[str]) -> str | None:
    """Why the rounds may stop now, or None: ``"separated"`` (the leader's gap to the runner-up,
    by median, is larger than the larger spread of the two), ``"quiet"`` (every contender's
    spread is at most :data:`QUIET`), else None. One contender is separated."""
    ranked = sorted(contenders, key=lambda name: statistics.median(per_round[name]))
    if len(ranked) < 2:
        return "separated"
    leader, runner = (per_round[name] for name in ranked[:2])
    gap = statistics.median(runner) / statistics.median(leader) - 1
    if gap > max(spread(leader), spread(runner)):
        return "separated"
    if all(spread(per_round[name]) <= QUIET for name in contenders):
        return "quiet"
    return None


@dataclass
class Rounds:
    """What an adaptive re-timing measured, and why it stopped (``"cap"``: at ``max_rounds``);
    ``alone``: the configs the power check ran alone, each one's :class:`Sample` there."""

    samples: dict[str, list[Sample]] = field(default_factory=dict)
    stopped: str = "cap"
    alone: dict[str, Sample] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return min((len(runs) for runs in self.samples.values()), default=0)


def rotate(names: Sequence[str], round_index: int) -> list[str]:
    """Round ``round_index``'s order: rotated by one each round, so no candidate is always first."""
    names = list(names)
    shift = round_index % len(names) if names else 0
    return names[shift:] + names[:shift]


def adaptive_rounds(candidates: Mapping[str, object], contenders: Sequence[str], reference: Sequence[str] = (),
                    protocol: tuple[float, float, int, int] = ADAPTIVE, power: tuple | None = None) -> Rounds:
    """Time ``candidates`` (name -> a :class:`Candidate`, or anything with ``settle(ms)`` and
    ``measure(rep_ms) -> Sample``) in rotating rounds until :func:`decided` says the
    ``contenders`` (the configs; ``reference``: SDPA's backends) are judged, or ``max_rounds``.

    The clock is settled once, before the first round: ``settle_ms`` shared among the candidates.
    Each contender's measurement alternates with the first reference that can pair (a captured
    graph: :attr:`Candidate.pairs`); the references are measured alone too. ``power``: the power
    check's setting (:data:`POWER`) to end with, None: none."""
    settle_ms, rep_ms, min_rounds, max_rounds = protocol
    names = list(candidates)
    partner = next((candidates[r] for r in reference if r in candidates and getattr(candidates[r], "pairs", False)),
                   None)
    for name in names:
        candidates[name].settle(settle_ms / max(1, len(names)))
    result = Rounds({name: [] for name in names})
    for index in range(max_rounds):
        for name in rotate(names, index):
            paired = partner is not None and name in contenders and getattr(candidates[name], "pairs", False)
            result.samples[name].append(candidates[name].measure(rep_ms, partner) if paired
                                        else candidates[name].measure(rep_ms))
        if index + 1 >= min_rounds:
            stopped = decided(figures(result.samples, reference)[1], [c for c in contenders if c in names])
            if stopped:
                result.stopped = stopped
                break
    if power is not None:
        result.alone = power_check(candidates, figures(result.samples, reference)[1],
                                   [c for c in contenders if c in names], power)
    return result


def power_check(candidates: Mapping[str, object], per_round: Mapping[str, Sequence[float]],
                contenders: Sequence[str], setting: tuple = POWER) -> dict[str, Sample]:
    """The contenders within ``margin`` of the leader (by median of ``per_round``; at most ``most``,
    best first), each replayed alone for ``settle_ms`` and then ``timed_ms`` with its clock read
    (:meth:`Candidate.alone`): name -> that :class:`Sample`. Empty where fewer than two are close,
    or fewer than two read a clock (nothing to tell apart)."""
    settle_ms, timed_ms, margin, most = setting
    scores = {name: statistics.median(per_round[name]) for name in contenders if per_round.get(name)}
    ranked = sorted(scores, key=lambda name: (scores[name], name))
    close = [name for name in ranked if scores[name] <= scores[ranked[0]] * (1 + margin)][:most] if ranked else []
    if len(close) < 2:
        return {}
    alone = {}
    for name in close:
        sample = getattr(candidates[name], "alone", lambda *_: None)(settle_ms, timed_ms)
        if sample is not None and sample.mhz:
            alone[name] = sample
    return alone if len(alone) >= 2 else {}


def fixed_rounds(candidates: Mapping[str, object], rounds: int, pins: Mapping | None = None, clock=None,
                 warmup_ms: int = 10) -> Rounds:
    """The protocol before :func:`adaptive_rounds`: ``rounds`` rotating rounds in which every
    measurement builds its graph, settles the clock and times (:data:`kernel.measure.timing.RETIME`), the
    clock read as it runs. ``candidates``: name -> calls, or name -> a function giving ms (the
    interpreter's wall clock)."""
    from kernel.measure.timing import RETIME, gpu_time, interleaved_rounds

    def sample(calls) -> Sample:
        if callable(calls):
            return Sample(calls())
        timing = gpu_time(calls, RETIME[0], warmup_ms, RETIME[1], clock)
        return Sample(timing.ms, timing.mhz)

    return Rounds(interleaved_rounds(candidates, rounds, pins=pins, measure=sample), "fixed")


class Candidate:
    """One candidate's calls, captured once as a CUDA graph (under ``pin``, SDPA's backend, where
    given: the backend is chosen at capture) and replayed for each measurement; where the calls
    cannot be captured, ``do_bench`` times them each time (:func:`kernel.measure.timing.gpu_time`)."""

    def __init__(self, calls: Sequence[Callable[[], object]], pin: Callable | None = None, clock=None):
        from kernel.measure.timing import capture_graph

        self.calls, self.pin, self.clock = calls, pin or contextlib.nullcontext, clock
        with self.pin():
            try:
                self.graph = capture_graph(calls)
            except RuntimeError:
                import torch

                torch.cuda.synchronize()
                self.graph = None

    def settle(self, ms: float) -> None:
        if self.graph is not None:
            self.graph.replay_for(ms)

    def alone(self, settle_ms: float, timed_ms: float) -> Sample | None:
        """Replayed alone for ``settle_ms`` (the power cap acts), then ``timed_ms`` timed with the
        clock read; None where it was not captured."""
        if self.graph is None:
            return None
        self.settle(settle_ms)
        return self.measure(timed_ms)

    @property
    def pairs(self) -> bool:
        """Whether its replays can alternate with another's (it was captured)."""
        return self.graph is not None

    def measure(self, rep_ms: float, partner: Candidate | None = None) -> Sample:
        """About ``rep_ms`` of its calls; with ``partner`` (both captured), its replays and the
        partner's alternating, the partner's median ms in :attr:`Sample.ref_ms`."""
        if self.graph is None:
            from kernel.measure.timing import gpu_time

            with self.pin():
                timing = gpu_time(self.calls, rep_ms, clock=self.clock)
            return Sample(timing.ms, timing.mhz)
        if partner is not None and partner.pairs:
            own, theirs, mhz = self.graph.timed_pair(partner.graph, rep_ms, self.clock)
            return Sample(statistics.median(own), mhz, statistics.median(theirs), cycle_ratio(own, theirs))
        per_call, mhz = self.graph.timed(rep_ms, self.clock)
        return Sample(statistics.median(per_call), mhz)

    @property
    def method(self) -> str:
        from kernel.measure.timing import DO_BENCH, GRAPH

        return GRAPH if self.graph is not None else DO_BENCH


class WallCandidate:
    """A candidate timed by the wall clock, one call per measurement (the interpreter on the CPU:
    its times mean nothing, and it has no SM clock)."""

    def __init__(self, measure_ms: Callable[[], float]):
        self.measure_ms = measure_ms

    def settle(self, ms: float) -> None:
        return None

    def measure(self, rep_ms: float) -> Sample:
        return Sample(self.measure_ms())


TOGETHER_ROUNDS = 5     # time_together's rounds


def time_together(calls: Mapping[str, Sequence[Callable[[], object]]], pins: Mapping | None = None,
                  rounds: int = TOGETHER_ROUNDS) -> dict[str, float]:
    """The benchmarks' one way to compare candidates: median GPU ms per call of each (name -> its
    calls over the input sets) over ``rounds`` rounds that measure every candidate once, the order
    rotating, each graph captured once and the clock settled once, 50 ms windows
    (:func:`adaptive_rounds` with its stopping rules off, no pairing). Timed one after another
    instead, two rows of one kernel and config once came out 10% apart in one run.
    ``pins``: name -> the SDPA backend's pin its calls are captured under."""
    return paired_together(calls, pins, None, rounds)[0]


def paired_together(calls: Mapping[str, Sequence[Callable[[], object]]], pins: Mapping | None = None,
                    reference: str | None = "cudnn", rounds: int = TOGETHER_ROUNDS) -> tuple[dict, dict]:
    """The rounds of :func:`time_together`, each candidate's replays alternating with ``reference``'s
    (an SDPA backend among ``calls``; None or absent: no pairing) in every window: (name -> median
    ms, name -> median over its windows of the reference's ms over its own, taken cycle by cycle where
    kept (:func:`cycle_ratio`), above 1 faster than the reference).
    A bar stated against SDPA is judged on the second: two rows of one kernel timed together unpaired
    came out 4-8% apart on the H200 (clock wandering under its power cap), the paired ratio's spread
    was 0.5% (issue 24)."""
    captured = {name: Candidate(c, (pins or {}).get(name)) for name, c in calls.items()}
    others = [name for name in captured if name != reference]
    measured = adaptive_rounds(captured, others, [reference] if reference in captured else [],
                               (300.0, 50.0, rounds, rounds))
    ms = {name: statistics.median(s.ms for s in samples) for name, samples in measured.samples.items()}
    versus = {name: statistics.median(1 / s.ratio if s.ratio else s.ref_ms / s.ms for s in samples)
              for name, samples in measured.samples.items() if samples and all(s.ref_ms for s in samples)}
    return ms, versus
