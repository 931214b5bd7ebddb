"""The sweep's last figures add up to the whole process: start-up, the run and the outputs (issue 42)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

LINE = re.compile(r"process wall time ([\d.]+) s: start-up ([\d.]+) s \(.*\), the run ([\d.]+) s, outputs ([\d.]+) s")


def test_the_parts_add_up_to_the_total():
    from tuner import STARTED
    from tuner.report import process_line

    line = process_line(STARTED + 2.0, STARTED + 5.5, STARTED + 6.3)
    assert tuple(map(float, LINE.search(line).groups())) == (6.3, 2.0, 3.5, 0.8)


def test_a_budget_only_sweep_accounts_for_its_whole_process(tiny, tmp_path):
    """Run as a user runs it: the process line's total is the process's wall time, less the interpreter's start."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tuner.sweep", "--gpu", "sm_89", "--study", str(tiny), "--storage",
                           f"sqlite:///{tmp_path / 't.db'}", "--out", str(tmp_path / "out"), "--jobs", "1"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    found = LINE.search(done.stdout)
    assert found, done.stdout[-2000:]
    total, start, run, outputs = map(float, found.groups())
    assert abs(start + run + outputs - total) <= 0.15
    assert wall - 3.0 <= total <= wall, (total, wall)     # only the interpreter's start and exit are outside it
