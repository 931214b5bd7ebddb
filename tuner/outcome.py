"""What the worker reports for a config: its outcome on each shape, and on all of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.status import Status

__all__ = ["ShapeOutcome", "TrialOutcome"]


@dataclass(frozen=True)
class ShapeOutcome:
    """One config on one study shape (and its gate shapes)."""

    shape: str
    correct: bool
    reason: str = ""
    err_out: float | None = None
    err_lse: float | None = None
    bound_out: float | None = None
    bound_lse: float | None = None
    gate_err_out: float | None = None      # the worst of the gate shapes
    gate_err_lse: float | None = None
    ms: float | None = None
    host_us: float | None = None
    timer: str | None = None


@dataclass
class TrialOutcome:
    """One config on all shapes of a study. ``status`` is TIMED only if every shape passed."""

    status: Status
    reason: str
    shapes: dict[str, ShapeOutcome] = field(default_factory=dict)
    check_s: float = 0.0
    time_s: float = 0.0
    error_type: str | None = None          # the exception's type, when the worker raised or died on one
