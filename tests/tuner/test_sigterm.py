"""SIGTERM (``kill``, a service manager, a batch scheduler) is taken as Ctrl-C is (issue 43): the sweep
finishes the trials in flight, marks the run interrupted and ends with 143; its workers are the sweep's
to stop, never ended mid-trial by a SIGTERM sent to the whole group, and end quietly when it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

from tuner import spawn
from tuner.console import INTERRUPTED, TERMINATED, call
from tuner.store import Store


def _env(**extra) -> dict:
    return os.environ | {"PYTHONPATH": str(ROOT)} | extra


def test_a_sigterm_no_handler_took_ends_the_command_with_one_line_and_143(capsys):
    def waiting():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    assert call(waiting) == TERMINATED == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("terminated (SIGTERM): stopping"), err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL         # the handler is the command's alone


def test_a_command_that_takes_ctrl_c_itself_takes_sigterm_too_and_ends_143():
    stopped = []

    def handles_ctrl_c():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        except KeyboardInterrupt:
            stopped.append("kept what was done")
            return INTERRUPTED
        return 0

    assert call(handles_ctrl_c) == TERMINATED and stopped


def _waits(conn) -> None:
    conn.send("started")
    time.sleep(60)


def test_a_worker_outlives_a_sigterm_from_anyone_but_its_parent():
    process, conn = spawn._start(_waits, (), None)
    try:
        assert conn.poll(120) and conn.recv() == "started"
        subprocess.run(["kill", "-TERM", str(process.pid)], check=True)      # as `kill -TERM -PGID` would
        process.join(2)
        assert process.is_alive()
        process.terminate()                       # its parent's SIGTERM (multiprocessing's own) ends it
        process.join(10)
        assert process.exitcode == -signal.SIGTERM
    finally:
        process.kill()
        conn.close()


PARENT = """
import sys, time
from tuner import spawn

def answers(conn):
    conn.send("started")
    while True:
        time.sleep(0.05)
        conn.send("x" * 100000)                   # a reply the parent is gone for: a broken pipe

if __name__ == "__main__":
    process, conn = spawn._start(answers, (), None)
    print(conn.recv(), process.pid, flush=True)
    time.sleep(60)
"""


def test_a_worker_whose_parent_is_killed_ends_quietly(tmp_path):
    (tmp_path / "parent.py").write_text(textwrap.dedent(PARENT))
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    started, child = parent.stdout.readline().split()
    assert started == "started"
    parent.kill()                                  # kill -9: the worker's pipe breaks under it
    parent.wait(10)
    err = parent.stderr.read()                     # to its end: when the worker, which shares it, is gone too
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(int(child), 0)
            time.sleep(0.1)


@pytest.mark.parametrize("to", ["the group", "the sweep alone"])
def test_sigterm_marks_the_run_interrupted_keeps_the_trials_in_flight_and_ends_143(tiny, tmp_path, to):
    from test_bad_inputs import _wait_for

    db = tmp_path / "c.db"
    argv = ["--gpu", "sm_89", "--study", str(tiny), "--storage", f"sqlite:///{db}", "--no-outputs", "--device", "cpu",
            "--sampler", "grid", "--finalists", "0"]
    process = subprocess.Popen([sys.executable, "-m", "tuner.sweep", *argv], stderr=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, start_new_session=True,
                               env=_env(TRITON_INTERPRET="1"), cwd=ROOT)
    lines: list[str] = []
    _wait_for(process.stderr, "worker 0 ready", lines)
    (os.killpg if to == "the group" else os.kill)(process.pid, signal.SIGTERM)
    _, rest = process.communicate(timeout=300)
    err = "".join(lines) + rest
    assert process.returncode == TERMINATED, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err.count("terminated (SIGTERM): stopping") == 1 and "Resume with the same command" in err
    store = Store(f"sqlite:///{db}", create=False)
    assert [r.status for r in store.runs()] == ["interrupted"]
    # the worker was not ended mid-trial by the group's SIGTERM: no config is stored crashed for it
    assert {r.status for r in store.results()} <= {"timed", "restricted"}, [r.reason for r in store.results()]
