"""The gate's edge shapes for contenders only, where they need a binary of their own.

A kernel that specialises on lengths (the Triton backward, the Gluon kernels) checks the gate's
odd-length edge shapes (:func:`tuner.gate.edge_gates`) in another binary than the one timed:
compiling it was half of a grid sweep's compile work. A sweep (``--edge-gate contenders``, the
default) therefore checks a config on the study shapes and the ragged gate (in the timed binary),
times it, and only then, if it timed within :data:`tuner.gate.EDGE_MARGIN` of the best timed so
far at some shape, compiles the edge binary and checks the edge shapes: a failure there makes the
config ``incorrect`` like any other. A config slower than that at every shape keeps its times,
with a reason that says its edge shapes were not checked and why; since the best only falls, it
could never have been chosen, and the finalists, winners and emitted list leave it out anyway
(:func:`tuner.gate.edges_checked`). ``--edge-gate all`` checks every config's edge shapes.

The same margin bounds a trial's timing (:meth:`Contenders.bounds`): at a shape where a config is
past it after the first quarter of its window, a finer figure could change no decision (not the
edge step, not the finalists, not a winner), so the rest of the window is not timed there; the
shape's timer says so (``cuda_graph_short``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from tuner.gate import EDGE_MARGIN, EDGE_UNCHECKED
from tuner.outcome import TrialOutcome
from tuner.status import Status

__all__ = ["EDGE_GATES", "Contenders"]

EDGE_GATES = ("contenders", "all")      # --edge-gate: the first is the default


class Contenders:
    """The best time per shape among this sweep's configs that passed the whole gate, and the
    edge step of a timed config (thread-safe: trials run on several threads)."""

    def __init__(self, margin: float = EDGE_MARGIN):
        self.margin = margin
        self.best: dict[str, float] = {}
        self.lock = threading.Lock()

    def ratio(self, outcome: TrialOutcome) -> float:
        """The outcome's time over the best so far, at the shape where it is closest (1.0 where a
        shape has no best yet: the first configs are all contenders)."""
        with self.lock:
            ratios = [s.ms / self.best[label] if label in self.best else 1.0
                      for label, s in outcome.shapes.items() if s.ms]
        return min(ratios, default=1.0)

    def bounds(self) -> dict[str, float]:
        """Shape label -> the margin over the best so far: the time past which a trial's figure
        there may be coarse (:func:`kernel.measure.timing.gpu_time`'s ``bound_ms``)."""
        with self.lock:
            return {label: best * self.margin for label, best in self.best.items()}

    def record(self, outcome: TrialOutcome) -> None:
        """A timed config's times may be the new best (one left unchecked never is: it is
        slower than the margin allows)."""
        if outcome.status != Status.TIMED:
            return
        with self.lock:
            for label, shape in outcome.shapes.items():
                if shape.ms and shape.ms < self.best.get(label, float("inf")):
                    self.best[label] = shape.ms

    def edges(self, timed: TrialOutcome, compile_edges: Callable[[], object | None],
              check: Callable[[], TrialOutcome]) -> TrialOutcome:
        """The edge step of a config timed without its edge shapes: left unchecked (saying so) if it
        is no contender; else ``compile_edges()`` (None, or the edge binary's
        :class:`tuner.pre_gpu_stages.Rejection`) and ``check()`` (the whole gate, untimed), whose
        failure is the outcome. The sweep records (:meth:`record`) what it returns."""
        ratio = self.ratio(timed)
        if ratio > self.margin:
            timed.reason = (f"{EDGE_UNCHECKED}: {ratio:.2f}x the best timed so far at every shape (they are "
                            f"checked within {self.margin}x; --edge-gate all checks every config)")
            return timed
        refused = compile_edges()
        if refused:
            return TrialOutcome(status=refused.status, reason=refused.reason, check_s=timed.check_s)
        checked = check()
        if checked.status != Status.TIMED:
            checked.check_s += timed.check_s
            return checked
        timed.shapes = {label: replace(shape, gate_errors=checked.shapes[label].gate_errors)
                        if label in checked.shapes else shape for label, shape in timed.shapes.items()}
        timed.check_s += checked.check_s
        return timed
