"""What became of a config: its :class:`Status`, and the :class:`Stage` where that was decided.

Both are ``str`` enums, so a status compares equal to the string stored in the database
(``Status.TIMED == "timed"``) and prints as that string.
"""

from __future__ import annotations

import enum

__all__ = ["LAUNCHABLE", "Stage", "Status"]


class Status(str, enum.Enum):
    """A config's outcome on one shape. Only ``TIMED`` has a time; the rest carry a reason."""

    TIMED = "timed"
    PENDING = "pending"                # passed the budget stage where no GPU could take it further
    RESTRICTED = "restricted"          # outside the study's space or excluded by its restrictions
    FITS = "fits"                      # budget verdicts: the first two can launch
    SPILLS = "spills"
    OVER_SMEM = "over_smem"
    OVER_REGISTERS = "over_registers"
    INVALID = "invalid"
    UNSUPPORTED = "unsupported"        # the target or the Triton version lacks what the config needs
    COMPILE_ERROR = "compile_error"
    INCORRECT = "incorrect"            # failed the correctness gate
    CRASHED = "crashed"                # the worker died or raised
    TIMEOUT = "timeout"                # the worker did not answer in time

    def __str__(self) -> str:
        return self.value


class Stage(str, enum.Enum):
    """The last stage a config reached."""

    BUDGET = "budget"
    COMPILE = "compile"
    CHECK = "check"
    TIME = "time"

    def __str__(self) -> str:
        return self.value


LAUNCHABLE = (Status.FITS, Status.SPILLS)
