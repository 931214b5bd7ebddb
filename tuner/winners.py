"""A shape's winner, decided in one place.

The rule: where a shape's finalists were re-timed together, their verdict decides (the
winner, and the runner-up too when the two are within the noise,
:attr:`tuner.finalists.ShapeVerdict.kept`); elsewhere the fastest timed row does.

The figure that decides is normalised for the SM clock, which wanders by about 10% on an
H200 at its power cap: cycles (ms x MHz, the clock read through NVML while the config ran)
wherever every measurement has its clock; where NVML is missing, the finalists' ratio to
SDPA timed in the same round (a clock that moves between rounds moves both); else ms
(:func:`kernel.measure.retime.figures`, :func:`tuner.records.fastest_first`). Rows
are those of one GPU (:func:`measured_on`): configs measured on two GPUs never race each
other. The end-of-run summary, the emitted list, ``--verify``, the profile's choice of
kernels, the benchmarks and the dashboards' titles all ask here, so they never name
different bests for one shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kernel.measure.retime import MS
from tuner.finalists import ShapeVerdict, judge
from tuner.records import fastest_first, timed_on
from tuner.status import Status
from tuner.store import Result, Store

__all__ = ["Choice", "choice", "measured_on", "ranked", "verdicts_of", "winner", "winner_rows"]


def measured_on(rows: list[Result], gpu_used: str | None = None) -> tuple[str | None, list[Result]]:
    """(GPU, its rows): the rows measured on one GPU (never the budget-only "none"), ``gpu_used``
    or else the GPU with the most timed rows.

    Raises:
        ValueError: ``gpu_used`` measured none of the rows; the message lists those that did.
    """
    rows = [r for r in rows if r.gpu != "none"]
    gpus = sorted({r.gpu for r in rows}, key=lambda g: -sum(r.gpu == g and r.status == Status.TIMED for r in rows))
    if gpu_used is not None:
        if gpu_used not in gpus:
            raise ValueError(f"--gpu-used {gpu_used!r}: the store has {gpus or 'no GPU measurements'}")
        gpus = [gpu_used]
    return (gpus[0], [r for r in rows if r.gpu == gpus[0]]) if gpus else (None, [])


def verdicts_of(db: Store, study: str, target: str, gpu: str) -> dict[str, ShapeVerdict]:
    """The stored finalists of each shape, judged again from their stored times."""
    times: dict[str, dict[str, list[float]]] = {}
    figures: dict[str, dict[str, list[float]]] = {}
    clocks: dict[str, dict[str, list[float | None]]] = {}
    meta: dict[str, tuple] = {}
    for finalist in db.finalists(study, target, gpu):
        times.setdefault(finalist.shape, {})[finalist.config] = json.loads(finalist.times)
        if finalist.figures:          # older stores: no figures, decided on ms as they were
            figures.setdefault(finalist.shape, {})[finalist.config] = json.loads(finalist.figures)
        if finalist.clocks:
            clocks.setdefault(finalist.shape, {})[finalist.config] = json.loads(finalist.clocks)
        meta[finalist.shape] = ({"flash": finalist.flash_ms, "cudnn": finalist.cudnn_ms},
                                finalist.figure or MS, finalist.stopped)
    return {shape: judge(shape, per_config, meta[shape][0], meta[shape][1], figures.get(shape),
                         clocks.get(shape), meta[shape][2]) for shape, per_config in times.items()}


@dataclass(frozen=True)
class Choice:
    """A shape's winner: the configs to keep (the winner first), and the verdict that chose them
    (None: not re-timed, the fastest timed row)."""

    keys: tuple[str, ...]
    verdict: ShapeVerdict | None = None

    @property
    def winner(self) -> str:
        return self.keys[0]


def choice(rows: list[Result], shape: str, verdict: ShapeVerdict | None = None, eligible=None) -> Choice | None:
    """The rule (module doc), among ``eligible`` config keys (default all; the emitted list takes
    only configs timed on every shape). None: nothing eligible was timed on the shape."""
    if verdict is not None and all(eligible is None or key in eligible for key in verdict.kept):
        return Choice(tuple(verdict.kept), verdict)
    timed = fastest_first(timed_on(rows, shape, eligible))
    return Choice((timed[0].config,)) if timed else None


def winner(rows: list[Result], shape: str, verdict: ShapeVerdict | None = None, eligible=None) -> str | None:
    """The winning config's key on ``shape`` (:func:`choice`), or None."""
    chosen = choice(rows, shape, verdict, eligible)
    return chosen.winner if chosen else None


def winner_rows(rows: list[Result], verdicts: dict[str, ShapeVerdict]) -> dict[str, Result]:
    """Shape -> the winning config's row on it, for every shape with a timed row."""
    winners = {}
    for shape in dict.fromkeys(r.shape for r in rows):
        key = winner(rows, shape, verdicts.get(shape))
        row = next((r for r in timed_on(rows, shape) if r.config == key), None)
        if row is not None:
            winners[shape] = row
    return winners


def ranked(rows: list[Result], shape: str, verdict: ShapeVerdict | None = None, top: int | None = None) -> list[str]:
    """The shape's configs best first: its finalists by their verdict where it was re-timed, else
    its timed configs by time."""
    keys = [t.config for t in verdict.ranked] if verdict else [r.config for r in fastest_first(timed_on(rows, shape))]
    return keys[:top]
