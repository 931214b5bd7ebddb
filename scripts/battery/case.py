"""A case of the battery, what running it gave, and the verdict, mechanically.

A :class:`Case` is a shell command line (run by ``bash -o pipefail -c`` in a fresh folder) with its
expectations written beside it: the exit codes it may end with, and a regular expression a line of stderr
(on a non-zero exit) or stdout (on exit 0) must match, e.g. the line that names the bad flag and its value.
A call that exits 2 (bad input: "nothing written", as the README promises) must leave its folder unchanged;
other exits (130 and 143 for signals, 141 for a closed pipe, 1 for a failure) may have written. Tokens in
the command, the environment and the read-only paths are replaced when the case runs (:data:`TOKENS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# what the runner puts in place of each token: the case's folders, the repository, the battery's Python
TOKENS = ("@DIR@", "@CWD@", "@HOME@", "@REPO@", "@FIX@", "@PY@")

# the verdicts, the good one first, the rest in the order classify() tests them
VERDICTS = ("ok", "timeout", "traceback", "wrong-answer", "wrong-exit", "unclear", "changed-files")
BAD = VERDICTS[1:]
WRONG_ANSWER = "BATTERY WRONG ANSWER"      # what the kernel probe prints when the kernel disagrees with float64
TRACEBACK = "Traceback (most recent call last)"
REFUSED = 2          # the commands' exit code for bad input, which promises that nothing was written


@dataclass(frozen=True)
class FollowUp:
    """Advice: commands found in a case's output by ``pattern`` (group 1), each run as printed, in the same
    folder, with its own expectation. ``skip`` returns why a found command is not run (None: run it)."""

    pattern: str
    expect: tuple[int, ...] = (0,)
    stderr_re: str | None = None
    skip: Callable[[str], str | None] | None = None
    rewrite: Callable[[str], str] | None = None     # what a placeholder in the advice becomes (said in the note)
    source: str = "output"                           # "output", or a file glob under the working folder


@dataclass(frozen=True)
class Signal:
    """Send ``name`` (SIGINT, SIGTERM, SIGKILL) to the case's process group once stderr matches ``after``,
    ``delay`` seconds later; ``again``: a second one that much later still."""

    name: str
    after: str
    delay: float = 0.5
    again: float | None = None


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    command: str
    expect: tuple[int, ...] = (0,)
    stderr_re: str | None = None          # on a non-zero exit, a line of stderr must match (re.search per line)
    stdout_re: str | None = None          # on exit 0, a line of stdout must match
    setup: tuple[Callable, ...] = ()      # each called with the runner's Context before the first hash
    env: dict = field(default_factory=dict)   # None: unset
    readonly: tuple[str, ...] = ()        # paths (tokens allowed) bind-mounted read-only while it runs
    timeout: float = 180.0
    signal: Signal | None = None
    then: tuple[FollowUp, ...] = ()
    skip: str | None = None               # not run, with this reason
    note: str = ""


@dataclass
class Outcome:
    """One command's run: what the classifier reads."""

    command: str
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    changed: list[str] = field(default_factory=list)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def key_line(text: str) -> str:
    """The line that says what went wrong: a traceback's last line, else the first ``error`` line, else the
    last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if any(TRACEBACK in line for line in lines):
        return lines[-1]
    return next((line for line in lines if "error" in line.lower()), lines[-1])


def _matches(pattern: str | None, text: str) -> bool:
    return pattern is None or any(re.search(pattern, line) for line in text.splitlines())


def classify(expect: tuple[int, ...], outcome: Outcome, stderr_re: str | None = None,
             stdout_re: str | None = None) -> tuple[str, str]:
    """(verdict, why) of one run against its expectation; see the module's docstring."""
    if outcome.timed_out:
        return "timeout", f"ran past {outcome.seconds:.0f} s"
    both = outcome.stderr + "\n" + outcome.stdout
    if TRACEBACK in both:
        return "traceback", key_line(outcome.stderr if TRACEBACK in outcome.stderr else outcome.stdout)
    if WRONG_ANSWER in both:
        return "wrong-answer", next(line for line in both.splitlines() if WRONG_ANSWER in line)
    if outcome.rc not in expect:
        return "wrong-exit", f"exit {outcome.rc}, expected {'/'.join(map(str, expect))}"
    if outcome.rc != 0 and not _matches(stderr_re, outcome.stderr):
        return "unclear", f"no stderr line matches {stderr_re!r}"
    if outcome.rc == 0 and not _matches(stdout_re, outcome.stdout):
        return "unclear", f"no stdout line matches {stdout_re!r}"
    if outcome.rc == REFUSED and outcome.changed:
        return "changed-files", f"refused (exit 2) but changed {', '.join(outcome.changed[:4])}"
    return "ok", ""


def refusal(flag: str, value: str | None = None) -> str:
    """The regex of a one-line refusal that names ``flag``, or ``value`` where it says something (three
    characters or more, not a bare number): ``--gpu 'foo'`` or ``unknown GPU 'foo'`` both name it."""
    names = re.escape(flag)
    if value and len(value.strip()) >= 3 and not value.strip().lstrip("-").replace(".", "").isdigit():
        names += "|" + re.escape(value)
    return rf"(error|refused|invalid).*({names})|({names}).*(error|invalid|must|not|give|cannot)"
