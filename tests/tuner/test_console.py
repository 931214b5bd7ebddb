"""tuner.console: a command's streams never end it for their own sake (a pipe closed early, a C locale,
a closed stderr): each case is a real process, as a shell would start it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

from tuner.console import BROKEN_PIPE


def _program(body: str) -> str:
    return "from tuner.console import run\n\ndef main():\n" + textwrap.indent(textwrap.dedent(body), "    ") + \
        "\n\nrun(main)\n"


def _env(**extra) -> dict:
    return os.environ | {"PYTHONPATH": str(ROOT)} | extra


def test_a_reader_that_stops_early_ends_the_command_quietly_with_the_pipes_exit_code():
    program = _program("for i in range(200000):\n    print(i, 'a line long enough to fill the pipe quickly')")
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=_env())
    assert process.stdout.readline() == b"0 a line long enough to fill the pipe quickly\n"
    process.stdout.close()                       # `| head -1`
    err = process.stderr.read().decode()
    assert process.wait(60) == BROKEN_PIPE and "Traceback" not in err and "BrokenPipeError" not in err, err


def test_an_output_that_cannot_encode_a_character_prints_a_stand_in():
    # escaped: the command line itself is ASCII in a C locale
    program = _program("print('host \\u00b5s per call: 13.2')\nimport sys\n"
                       "print('\\u00b5 on stderr', file=sys.stderr)\nreturn 0")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60,
                          env=_env(LANG="C", LC_ALL="C", PYTHONCOERCECLOCALE="0", PYTHONUTF8="0",
                                   PYTHONIOENCODING=""))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"host ?s per call: 13.2\n" and done.stderr == b"? on stderr\n"


def test_a_closed_stderr_is_dev_null_for_the_command_and_the_processes_it_starts():
    program = _program("""
        import subprocess, sys
        print('to stderr', file=sys.stderr)
        sys.stderr.write('again\\n')
        child = subprocess.run([sys.executable, '-c', 'import os; os.write(2, b"child\\\\n"); print("child ran")'],
                               stdout=subprocess.PIPE)
        print(child.stdout.decode().strip(), child.returncode)
        return 3
    """)
    done = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" 2>&-', program], capture_output=True,
                          timeout=60, env=_env())
    assert done.returncode == 3 and done.stdout == b"child ran 0\n", done


def test_every_command_module_ends_through_the_console_runner():
    """python -m tuner.<command> for each command, python -m tuner and the dashboard's package form."""
    from tuner.commands import COMMANDS

    modules = [module for module, _, _ in COMMANDS.values()] + ["tuner.__main__", "tuner.dashboard.__main__"]
    for module in modules:
        path = ROOT / (module.replace(".", "/") + ".py")
        if module == "tuner.dashboard._cli":
            path = ROOT / "tuner/dashboard/__main__.py"
        assert "run(main)" in path.read_text(), module


def test_the_pipe_is_handled_in_a_real_command():
    process = subprocess.Popen([sys.executable, "-m", "tuner.budget", "--gpu", "sm_89", "--head-dim", "16",
                                "--dtype", "fp32", "--model-only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=_env(TRITON_INTERPRET="1"), cwd=ROOT)
    process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(120) in (0, BROKEN_PIPE) and "Traceback" not in err, err


def test_a_database_locked_past_the_timeout_is_one_line_of_error(capsys):
    from tuner.console import call

    class OperationalError(Exception):
        pass

    def locked():
        raise OperationalError("(sqlite3.OperationalError) database is locked\n[SQL: INSERT INTO fa2_studies]")

    assert call(locked) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the database is locked by another process") and "INSERT" not in err

    def other():
        raise OperationalError("no such table: studies")

    try:
        call(other)
    except OperationalError:
        pass
    else:
        raise AssertionError("another database error must reach the caller")


def test_a_ctrl_c_no_handler_took_ends_the_command_with_one_line_and_130(capsys):
    from tuner.console import INTERRUPTED, call

    def compiling():
        raise KeyboardInterrupt

    assert call(compiling) == INTERRUPTED == 130
    assert capsys.readouterr().err.strip() == "interrupted (Ctrl-C)"


def test_a_ctrl_c_while_the_sweep_still_imports_ends_it_quietly(tmp_path):
    """SIGINT to the process group 0.3 s in: the sweep is importing torch and Triton (seconds)."""
    import signal
    import time

    from conftest import TINY_STUDY

    study = tmp_path / "tiny.toml"
    study.write_text(TINY_STUDY)
    process = subprocess.Popen([sys.executable, "-m", "tuner.sweep", "--gpu", "sm_89", "--study", str(study),
                                "--device", "cpu", "--storage", f"sqlite:///{tmp_path / 'c.db'}", "--no-outputs"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=ROOT,
                               env=_env(TRITON_INTERPRET="1"), text=True)
    time.sleep(0.3)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert "interrupted (Ctrl-C) while starting" in err and not (tmp_path / "c.db").exists()


def test_a_reader_of_stdout_and_stderr_that_stops_early_ends_the_command_with_the_pipes_exit_code():
    """``2>&1 | head -1`` (the 2026-12-04 evening battery: the sweep exited 120): the command's stderr is the
    closed pipe too, and its error line stays buffered there; Python's flush of it at exit failed (120)."""
    program = _program("import sys\nfor i in range(200000):\n"
                       "    print(i, 'a line long enough to fill the pipe quickly', file=sys.stderr)")
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=_env(PYTHONUNBUFFERED=""))
    assert process.stdout.readline() == b"0 a line long enough to fill the pipe quickly\n"
    process.stdout.close()                       # `2>&1 | head -1`
    assert process.wait(60) == BROKEN_PIPE


FULL = "/dev/full"      # every write fails with ENOSPC, as on a full disk
needs_dev_full = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full on this system")


@needs_dev_full
@pytest.mark.parametrize("lines, unbuffered", [(3, ""), (200000, ""), (3, "1")])
def test_an_output_on_a_full_disk_is_one_line_of_error_and_exit_1(lines, unbuffered):
    """``>/dev/full`` (the 2026-12-04 evening battery: an OSError traceback, exit 1 or 120): a few lines fail at
    the last flush, many inside the command, unbuffered ones at the first print."""
    program = _program(f"for i in range({lines}):\n    print(i, 'a line of output')\nreturn 0")
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-c", program], stdout=full, stderr=subprocess.PIPE, timeout=60,
                              env=_env(PYTHONUNBUFFERED=unbuffered), text=True)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: cannot write the output (stdout): No space left on device; it is "
                                  "incomplete") and done.stderr.count("\n") == 1, done.stderr


@needs_dev_full
@pytest.mark.parametrize("code", [0, 2])
def test_a_stderr_on_a_full_disk_loses_what_it_says_not_the_command(code):
    """``2>/dev/full`` (the 2026-12-05 battery: a sweep and a refusal both ended 1, the first line to stderr raising):
    the command ends as it would, stdout whole; a process it starts after stderr failed writes to /dev/null."""
    program = _program(f"""
        import subprocess, sys
        print('progress', file=sys.stderr)
        print('x' * 10000, file=sys.stderr)
        child = subprocess.run([sys.executable, '-c', 'import os; os.write(2, b"child\\\\n"); print("child ran")'],
                               stdout=subprocess.PIPE)
        print(child.stdout.decode().strip(), child.returncode)
        return {code}
    """)
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=full, timeout=60,
                              env=_env(), text=True)
    assert done.returncode == code and done.stdout == "child ran 0\n", done


@needs_dev_full
def test_a_gpu_worker_process_writing_to_a_stderr_on_a_full_disk_goes_on(tmp_path):
    """The GPU worker (tuner.spawn) inherits the command's stderr: a line it writes there (a warning, a progress
    line) must not end it with an OSError before it answers. (The compile workers send theirs to the compile log.)"""
    (tmp_path / "say_then_answer.py").write_text(textwrap.dedent("""
        import sys

        def target(conn):
            print("a line for the terminal " * 100, file=sys.stderr)
            conn.send("answered")
    """))
    program = textwrap.dedent("""
        from tuner.spawn import spawn_worker
        if __name__ == "__main__":
            import say_then_answer
            process, conn = spawn_worker(say_then_answer.target, (), None)
            print(conn.recv() if conn.poll(120) else "no answer")
            process.join(30)
    """)
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=full, timeout=180,
                              env=_env(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}"), text=True)
    assert done.returncode == 0 and done.stdout == "answered\n", done


@needs_dev_full
def test_a_failed_write_the_command_let_pass_still_fails_it():
    program = _program("try:\n    print('x' * 100000)\nexcept OSError:\n    pass\nreturn 0")
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-c", program], stdout=full, stderr=subprocess.PIPE, timeout=60,
                              env=_env(), text=True)
    assert done.returncode == 1 and done.stderr.startswith("error: cannot write the output (stdout)"), done.stderr


@needs_dev_full
@pytest.mark.parametrize("command", [["tuner.kernels"], ["tuner", "--help"],
                                     ["tuner.budget", "--gpu", "sm_89", "--head-dim", "16", "--dtype", "fp32",
                                      "--model-only"]])
def test_a_real_command_on_a_full_disk_says_so_in_one_line(command):
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-m", *command], stdout=full, stderr=subprocess.PIPE, timeout=300,
                              env=_env(TRITON_INTERPRET="1"), cwd=ROOT, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: cannot write the output (stdout): No space left")


def test_an_os_error_that_is_not_the_outputs_reaches_the_caller(capsys):
    """A full disk under a file the command writes is its own to report: not blamed on stdout."""
    from tuner.console import call

    def writes_a_file():
        print("fine")
        raise OSError(28, "No space left on device", "results.json")

    with pytest.raises(OSError, match="results.json"):
        call(writes_a_file)
    assert capsys.readouterr().out == "fine\n"
