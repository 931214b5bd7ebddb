"""Finalists: after the search, each shape's best configs are re-timed together.

A search times each config once, so two configs a few percent apart can swap places
from one run to the next. The finalists of a shape (its top K by time, plus the best
config overall) are therefore timed again side by side, in interleaved rounds whose
order rotates, until the leader is known (:func:`kernel.measure.retime.adaptive_rounds`; or the
fixed protocol, :func:`kernel.measure.timing.interleaved_rounds`), and the winner is the best
*median* over rounds of the deciding figure (:func:`kernel.measure.retime.figures`): the ratio to SDPA
replayed alternately with the config in the same window, else cycles (ms x SM clock) where NVML
read the clock, else the ratio to SDPA timed in the same round, else ms. Everything here is a pure
function of timings; the worker measures, :mod:`tuner.driver` stores, :mod:`tuner.winners` reads the verdicts back.
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kernel.measure.clock import cycles
from kernel.measure.retime import (
    ADAPTIVE,
    ALONE_NOISE,
    CYCLES,
    MS,
    PAIRED,
    PAIRED_CYCLES,
    POWER,
    SDPA_RATIO,
    SUSTAINED,
    Rounds,
    figures as round_figures,
    spread,
)
from kernel.measure.timing import round_orders
from tuner.outcome import SDPA_KEYS
from tuner.records import best_across_shapes, fastest_first, timed_on
from tuner.store import Finalist, Result

__all__ = ["FinalistTiming", "ShapeVerdict", "covers", "judge", "judge_rounds", "round_orders", "select_finalists"]


RETIMES = ("adaptive", "fixed")     # the finalists' protocols (the sweep's --retime)
FIXED_ROUNDS = 5


def protocol(retime: str = "adaptive", rounds: int | None = None) -> tuple:
    """The re-timing a worker is asked for (:meth:`tuner.runner.WorkerBench.retime`): adaptive with
    ``rounds`` as its most (:data:`kernel.measure.retime.ADAPTIVE`), ending with the power check
    (:data:`kernel.measure.retime.POWER`), or fixed with ``rounds`` (default 5)."""
    if retime == "fixed":
        return "fixed", rounds or FIXED_ROUNDS
    settle_ms, rep_ms, least, most = ADAPTIVE
    most = rounds or most
    return "adaptive", (settle_ms, rep_ms, min(least, most), most, POWER)


def select_finalists(rows: list[Result], top: int = 5) -> dict[str, list[str]]:
    """Shape label -> config keys to re-time: the shape's ``top`` fastest, plus the best
    config across shapes (by :func:`tuner.records.scores`) wherever it was timed."""
    best_overall = best_across_shapes(rows)
    chosen: dict[str, list[str]] = {}
    for shape in dict.fromkeys(r.shape for r in rows):
        timed = fastest_first(timed_on(rows, shape))
        keys = [r.config for r in timed[:top]]
        if best_overall and best_overall not in keys and any(r.config == best_overall for r in timed):
            keys.append(best_overall)
        if keys:
            chosen[shape] = keys
    return chosen


def covers(chosen: dict[str, list[str]], stored: dict[str, ShapeVerdict]) -> bool:
    """The stored verdicts judge exactly these finalists: the same shapes, the same configs at each
    (a re-run that timed nothing new takes them as they are, :meth:`tuner.driver.Sweep.retime_finalists`)."""
    return bool(chosen) and set(chosen) == set(stored) and all(
        {t.config for t in stored[label].ranked} == set(keys) for label, keys in chosen.items())


@dataclass(frozen=True)
class FinalistTiming:
    """One config's times over the rounds (ms), and the figure that decides per round
    (:func:`kernel.measure.retime.figures`: cycles, or the ratio to SDPA of the same round; empty: the ms)."""

    config: str
    times: tuple[float, ...]
    figures: tuple[float, ...] = ()
    clocks: tuple[float | None, ...] = ()

    @property
    def decided_by(self) -> tuple[float, ...]:
        return self.figures or self.times

    @property
    def median(self) -> float:
        """The median ms over rounds (what the summary and the emitted list report)."""
        return statistics.median(self.times)

    @property
    def score(self) -> float:
        """The median of the deciding figure (lower is better): what the configs are ranked on."""
        return statistics.median(self.decided_by)

    @property
    def spread(self) -> float:
        """(max - min) / median of the deciding figure: how far apart its own rounds were."""
        return spread(self.decided_by)

    @property
    def ms_spread(self) -> float:
        return spread(self.times)

    @property
    def clock_mhz(self) -> float | None:
        known = [c for c in self.clocks if c]
        return statistics.median(known) if known else None


@dataclass(frozen=True)
class ShapeVerdict:
    """A shape's finalists ranked by the median of the deciding figure (``figure``: one of
    :data:`kernel.measure.retime.PREFERENCE`), and whether the winner is ahead by more than the noise."""

    shape: str
    ranked: tuple[FinalistTiming, ...]
    flash_ms: float | None = None       # SDPA's backends, median over the same rounds (None: not re-timed)
    cudnn_ms: float | None = None
    figure: str = MS
    stopped: str | None = None          # why the rounds stopped (kernel.measure.retime.Rounds.stopped), None: unknown

    def sdpa_ms(self, row: Result) -> tuple[float | None, float | None]:
        """(flash, cuDNN) ms to compare this shape's re-timed finalists with: SDPA re-timed in
        the same rounds where it was, else ``row``'s start-of-run baseline."""
        return self.flash_ms or row.flash_ms, self.cudnn_ms or row.cudnn_ms

    @property
    def winner(self) -> FinalistTiming:
        return self.ranked[0]

    @property
    def runner_up(self) -> FinalistTiming | None:
        return self.ranked[1] if len(self.ranked) > 1 else None

    @property
    def gap(self) -> float:
        """How much worse the runner-up's median figure is than the winner's (0.02 = 2%)."""
        return self.runner_up.score / self.winner.score - 1 if self.runner_up else float("inf")

    @property
    def noise(self) -> float:
        """The larger spread of the two that are compared, on the deciding figure; on ``sustained``
        plus :data:`kernel.measure.retime.ALONE_NOISE` (each one's clock alone was read once, and its
        rounds' spread does not hold that reading's own noise)."""
        return max(t.spread for t in self.ranked[:2]) + (ALONE_NOISE if self.figure == SUSTAINED else 0.0)

    @property
    def separated(self) -> bool:
        """The winner is ahead by more than the noise (always, with a single finalist)."""
        return self.runner_up is None or self.gap > self.noise

    @property
    def kept(self) -> list[str]:
        """The configs an emitted list must hold for this shape: the winner, and the
        runner-up too when the two are not separated by more than the noise."""
        return [self.winner.config] + ([] if self.separated else [self.runner_up.config])

    def sentence(self) -> str:
        """``winner X, runner-up Y, Z% apart, noise W%``, and what that means."""
        on = "" if self.figure == MS else f" (on {FIGURE_WORDS[self.figure]})"
        if self.runner_up is None:
            return f"winner {self.winner.config} (the only finalist), noise {100 * self.noise:.1f}%{on}"
        text = (f"winner {self.winner.config}, runner-up {self.runner_up.config}, {100 * self.gap:.1f}% apart, "
                f"noise {100 * self.noise:.1f}%{on}")
        return text + ("" if self.separated else " (within the noise: both are kept)")


FIGURE_WORDS = {SUSTAINED: "the ratio to SDPA replayed alternately with it, cycle by cycle, at the clock each "
                "holds alone under the power cap",
                PAIRED_CYCLES: "the ratio to SDPA replayed alternately with it, cycle by cycle",
                PAIRED: "the ratio to SDPA replayed alternately with it", CYCLES: "cycles",
                SDPA_RATIO: "the ratio to SDPA in the same round", MS: "ms"}


def judge(shape: str, times: dict[str, list[float]], sdpa: dict[str, float | None] | None = None,
          figure: str = MS, figures: dict[str, list[float]] | None = None,
          clocks: dict[str, list[float | None]] | None = None, stopped: str | None = None) -> ShapeVerdict:
    """Rank a shape's finalists by the median of ``figures`` (the deciding figure per round; default
    their ms); ``sdpa`` holds SDPA's medians over the same rounds (``{"flash": ms, "cudnn": ms}``)."""
    figures, clocks, sdpa = figures or {}, clocks or {}, sdpa or {}
    timings = [FinalistTiming(key, tuple(ms), tuple(figures.get(key, ())), tuple(clocks.get(key, ())))
               for key, ms in times.items() if ms]
    return ShapeVerdict(shape, tuple(sorted(timings, key=lambda t: (t.score, t.config))),
                        sdpa.get("flash"), sdpa.get("cudnn"), figure if figures else MS, stopped)


def judge_rounds(shape: str, rounds: Rounds) -> ShapeVerdict:
    """The verdict of a re-timing (:class:`kernel.measure.retime.Rounds`, SDPA's backends under
    :data:`SDPA_KEYS`): decided on :func:`kernel.measure.retime.figures` (at the clock each holds alone where the
    power check ran: the paired ratio to SDPA, cycles,
    the ratio to SDPA of the same round, or ms, the first that every measurement allows)."""
    reference = [SDPA_KEYS["flash"], SDPA_KEYS["cudnn"]]
    figure, per_round = round_figures(rounds.samples, reference, rounds.alone)
    sdpa = {backend: statistics.median(s.ms for s in rounds.samples[key])
            for backend, key in SDPA_KEYS.items() if rounds.samples.get(key)}
    configs = {key: s for key, s in rounds.samples.items() if key not in SDPA_KEYS.values()}
    return judge(shape, {key: [x.ms for x in s] for key, s in configs.items()}, sdpa, figure,
                 {key: per_round[key] for key in configs}, {key: [x.mhz for x in s] for key, s in configs.items()},
                 rounds.stopped)


def timer_of(rows: list[Result], label: str) -> str | None:
    """The timer of a shape's timed rows (what its finalists were timed with, too)."""
    return next((r.timer for r in rows if r.shape == label and r.timer), None)


def finalist_rows(ctx, verdict: ShapeVerdict, timer: str | None) -> list[Finalist]:
    """The store's rows for a shape's re-timed finalists (``ctx``: the run's :class:`RunContext`)."""
    return [Finalist(run_id=ctx.run_id, study=ctx.study.name, target=ctx.target.name, gpu=ctx.gpu_label,
                     shape=verdict.shape, config=timing.config, rank=rank, rounds=len(timing.times),
                     median_ms=timing.median, min_ms=min(timing.times), max_ms=max(timing.times),
                     spread=timing.spread, times=json.dumps(list(timing.times)), timer=timer,
                     flash_ms=verdict.flash_ms, cudnn_ms=verdict.cudnn_ms, figure=verdict.figure,
                     figures=json.dumps(list(timing.figures)) if timing.figures else None,
                     clocks=json.dumps(list(timing.clocks)) if any(timing.clocks) else None,
                     clock_mhz=timing.clock_mhz, cycles=_median_cycles(timing), stopped=verdict.stopped)
            for rank, timing in enumerate(verdict.ranked, start=1)]


def _median_cycles(timing: FinalistTiming) -> float | None:
    both = [cycles(ms, mhz) for ms, mhz in zip(timing.times, timing.clocks) if mhz]
    return statistics.median(both) if both and len(both) == len(timing.times) else None


def split_sdpa(times: dict[str, list[float]]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """A shape's re-timing split into the configs' times and SDPA's medians over the rounds."""
    sdpa = {backend: statistics.median(times[key]) for backend, key in SDPA_KEYS.items() if times.get(key)}
    return {key: ms for key, ms in times.items() if key not in SDPA_KEYS.values()}, sdpa


def retime_on_devices(workers: list, chosen: dict[str, list], protocol: tuple) -> dict[str, Rounds]:
    """Each shape's finalists together on one device (never compared across GPUs), shapes dealt
    out over ``workers`` (:class:`tuner.runner.GpuWorker`)."""
    share = [{label: configs for i, (label, configs) in enumerate(chosen.items()) if i % len(workers) == index}
             for index in range(len(workers))]
    times: dict[str, Rounds] = {}
    with ThreadPoolExecutor(len(workers)) as threads:
        parts = [threads.submit(worker.retime, share[i], protocol) for i, worker in enumerate(workers) if share[i]]
        for part in parts:
            times.update(part.result())
    return {label: times[label] for label in chosen if label in times}
