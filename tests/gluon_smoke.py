"""The Gluon kernels' tests' subprocesses (tests/kernel/gluon/fwd/test_gluon.py,
tests/kernel/gluon/bwd/test_gluon_bwd.py).

* :func:`smoke_verdict`: each GPU test file runs its kernel's smoke cases first, with a timeout,
  so that a kernel that deadlocks on its barriers fails its tests at once, naming the case,
  instead of hanging the suite.
* :func:`cross_compile_in_processes`: the compile tests' cross-compiles, outside Triton's
  interpreter (the CPU tests run under TRITON_INTERPRET=1, which Gluon's compiler cannot work under).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cross_compile_in_processes(module: str, payload: list, extra_env: dict | None = None) -> list:
    """``python -m <module>`` (a cross-compiler reading JSON cases on stdin) on ``payload``, split over
    up to 4 processes: its reports, in the payload's order."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | (extra_env or {})
    workers = max(1, min(4, os.cpu_count() or 1, len(payload)))
    chunks = [payload[i::workers] for i in range(workers)]
    runs = [subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
            for _ in chunks]
    outputs = [run.communicate(json.dumps(chunk), timeout=900) for run, chunk in zip(runs, chunks)]
    for run, (_, stderr) in zip(runs, outputs):
        assert run.returncode == 0, stderr[-4000:]
    reports = [json.loads(stdout) for stdout, _ in outputs]
    return [reports[i % workers][i // workers] for i in range(len(payload))]


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


def spill_allowance() -> int:
    """Stack bytes a Gluon binary may have: 0 under the ptxas of Triton 3.6 and 3.8 (CUDA 12.x). Triton
    3.9 compiles sm_90 with ptxas 13.x and passes it ``--regAllocOptLevel=2`` (a workaround of its own
    for a ptxas bug), under which the ws kernels spill up to 168 B (cross-compiled on 2026-12-03,
    docs/results/2026-12-03-gluon-triton-releases.md): allowed up to 256 B there, so that more fails."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        major = int(get_ptxas(90).version.split(".")[0])
    except (ImportError, RuntimeError, ValueError, AttributeError):
        return 0
    return 256 if major >= 13 else 0
