"""Finalists: after the search, each shape's best configs are re-timed together.

A search times each config once, so two configs a few percent apart can swap places
from one run to the next. The finalists of a shape (its top K by time, plus the best
config overall) are therefore timed again side by side, in interleaved rounds whose
order rotates (:func:`kernel.timing.interleaved_rounds`), and the winner is the best
*median* over rounds. Everything here is a pure function of timings; the worker measures,
:mod:`tuner.driver` stores, :mod:`tuner.winners` reads the verdicts back.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from kernel.timing import round_orders
from tuner.outcome import SDPA_KEYS
from tuner.records import best_across_shapes
from tuner.status import Status
from tuner.store import Finalist, Result

__all__ = ["FinalistTiming", "ShapeVerdict", "judge", "round_orders", "select_finalists"]


def select_finalists(rows: list[Result], top: int = 5) -> dict[str, list[str]]:
    """Shape label -> config keys to re-time: the shape's ``top`` fastest, plus the best
    config across shapes (by :func:`tuner.records.scores`) wherever it was timed."""
    best_overall = best_across_shapes(rows)
    chosen: dict[str, list[str]] = {}
    for shape in dict.fromkeys(r.shape for r in rows):
        timed = sorted((r for r in rows if r.shape == shape and r.status == Status.TIMED and r.ms),
                       key=lambda r: r.ms)
        keys = [r.config for r in timed[:top]]
        if best_overall and best_overall not in keys and any(r.config == best_overall for r in timed):
            keys.append(best_overall)
        if keys:
            chosen[shape] = keys
    return chosen


@dataclass(frozen=True)
class FinalistTiming:
    """One config's times over the rounds."""

    config: str
    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: how far apart its own rounds were."""
        return (max(self.times) - min(self.times)) / self.median


@dataclass(frozen=True)
class ShapeVerdict:
    """A shape's finalists ranked by median, and whether the winner is ahead by more than the noise."""

    shape: str
    ranked: tuple[FinalistTiming, ...]
    flash_ms: float | None = None       # SDPA's backends, median over the same rounds (None: not re-timed)
    cudnn_ms: float | None = None

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
        """How much slower the runner-up's median is than the winner's (0.02 = 2%)."""
        return self.runner_up.median / self.winner.median - 1 if self.runner_up else float("inf")

    @property
    def noise(self) -> float:
        """The larger spread of the two that are compared."""
        return max(t.spread for t in self.ranked[:2])

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
        if self.runner_up is None:
            return f"winner {self.winner.config} (the only finalist), noise {100 * self.noise:.1f}%"
        text = (f"winner {self.winner.config}, runner-up {self.runner_up.config}, {100 * self.gap:.1f}% apart, "
                f"noise {100 * self.noise:.1f}%")
        return text + ("" if self.separated else " (within the noise: both are kept)")


def judge(shape: str, times: dict[str, list[float]], sdpa: dict[str, float | None] | None = None) -> ShapeVerdict:
    """Rank a shape's finalists by their median over rounds; ``sdpa`` holds SDPA's medians
    over the same rounds (``{"flash": ms, "cudnn": ms}``), where they were timed."""
    timings = [FinalistTiming(key, tuple(ms)) for key, ms in times.items() if ms]
    sdpa = sdpa or {}
    return ShapeVerdict(shape, tuple(sorted(timings, key=lambda t: (t.median, t.config))),
                        sdpa.get("flash"), sdpa.get("cudnn"))


def finalist_rows(ctx, verdict: ShapeVerdict, timer: str | None) -> list[Finalist]:
    """The store's rows for a shape's re-timed finalists (``ctx``: the run's :class:`RunContext`)."""
    return [Finalist(run_id=ctx.run_id, study=ctx.study.name, target=ctx.target.name, gpu=ctx.gpu_label,
                     shape=verdict.shape, config=timing.config, rank=rank, rounds=len(timing.times),
                     median_ms=timing.median, min_ms=min(timing.times), max_ms=max(timing.times),
                     spread=timing.spread, times=json.dumps(list(timing.times)), timer=timer,
                     flash_ms=verdict.flash_ms, cudnn_ms=verdict.cudnn_ms)
            for rank, timing in enumerate(verdict.ranked, start=1)]


def split_sdpa(times: dict[str, list[float]]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """A shape's re-timing split into the configs' times and SDPA's medians over the rounds."""
    sdpa = {backend: statistics.median(times[key]) for backend, key in SDPA_KEYS.items() if times.get(key)}
    return {key: ms for key, ms in times.items() if key not in SDPA_KEYS.values()}, sdpa
