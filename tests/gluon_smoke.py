"""The verdict of a Gluon kernel's smoke run in a subprocess (tests/test_gluon.py, tests/test_gluon_bwd.py):
each GPU test file runs its kernel's smoke cases first, with a timeout, so that a kernel that
deadlocks on its barriers fails its tests at once, naming the case, instead of hanging the suite."""

from __future__ import annotations

import json
import subprocess


def smoke_verdict(run: subprocess.Popen, timeout_s: float, shown: int = 1) -> str | None:
    """None for a smoke run (JSON lines, one per case) whose cases all passed, else what went wrong:
    a hang is killed and reported with the last case answered; else the first ``shown`` bad cases."""
    try:
        stdout, stderr = run.communicate(timeout=timeout_s)
        hung = False
    except subprocess.TimeoutExpired:
        run.kill()
        stdout, stderr = run.communicate()
        hung = True
    cases = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if hung:
        return f"hung (no answer in {timeout_s} s) after {len(cases)} smoke cases, the last {cases[-1:]}"
    bad = [case for case in cases if not case["ok"]]
    if bad or run.returncode != 0 or not cases:
        return f"smoke run failed: {bad[:shown] or stderr[-1500:]}"
    return None
