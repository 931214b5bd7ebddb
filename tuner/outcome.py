"""What the worker reports for a config: its outcome on each shape, and on all of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.status import Status

__all__ = ["SDPA_KEYS", "NamedError", "ShapeOutcome", "TrialOutcome", "WorkerFailed"]

# In a re-timing's results (shape -> key -> ms per round), SDPA's backends timed in the same rounds.
SDPA_KEYS = {"flash": "sdpa:flash", "cudnn": "sdpa:cudnn"}


@dataclass(frozen=True)
class NamedError:
    """One output's error against the reference (the forward's ``out``, ``lse``; the backward's
    ``dq``, ``dk``, ``dv``), and the most it may be (None: no bound, or not known)."""

    name: str
    error: float | None
    bound: float | None = None


@dataclass(frozen=True)
class ShapeOutcome:
    """One config on one study shape (and its gate shapes).

    ``errors`` are the study shape's, with their bounds; ``gate_errors`` the worst of the gate
    shapes per name (None where one was not finite)."""

    shape: str
    correct: bool
    reason: str = ""
    errors: tuple[NamedError, ...] = ()
    gate_errors: tuple[NamedError, ...] = ()
    ms: float | None = None
    host_us: float | None = None
    timer: str | None = None
    mhz: float | None = None               # mean SM clock while it was timed (None: NVML absent)


@dataclass
class TrialOutcome:
    """One config on all shapes of a study. ``status`` is TIMED only if every shape passed."""

    status: Status
    reason: str
    shapes: dict[str, ShapeOutcome] = field(default_factory=dict)
    check_s: float = 0.0
    time_s: float = 0.0
    error_type: str | None = None          # the exception's type, when the worker raised or died on one


class WorkerFailed(RuntimeError):
    """The worker died, raised or did not answer in time.

    Attributes:
        status: ``Status.CRASHED`` or ``Status.TIMEOUT``.
        reason: what happened, for the stored row.
        error_type: the exception's type name when the worker raised one.
    """

    def __init__(self, status: Status, reason: str, error_type: str | None = None):
        super().__init__(reason)
        self.status, self.reason, self.error_type = status, reason, error_type
