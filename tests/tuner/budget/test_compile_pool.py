"""The compile pool's own queue: urgent tasks first, then in order, never more in the processes
than it has (a thread pool stands in for the processes, a recording stub for the compiler)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor

import pytest

from tuner.budget import CompilePool


@pytest.fixture
def stub(monkeypatch):
    """The compiler replaced: each task's name is recorded as it starts; 'hold' waits for the test."""
    started, release, state = [], threading.Event(), {"now": 0, "most": 0}
    lock = threading.Lock()

    def compile_config(task):
        with lock:
            started.append(task)
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        if task == "hold":
            release.wait(10)
        time.sleep(0.01)
        with lock:
            state["now"] -= 1
        return f"info {task}"

    monkeypatch.setattr("tuner.budget._compile.compile_config", compile_config)    # as the pool looks it up
    monkeypatch.setattr("tuner.budget._pool.cached_info", lambda task: None)
    monkeypatch.setattr(CompilePool, "_ensure_executor", lambda self: self.__dict__.setdefault(
        "_executor", None) or self.__dict__.setdefault("_threads", ThreadPoolExecutor(4)))
    return started, release, state


def test_an_urgent_task_is_the_next_one_compiled(stub):
    started, release, _ = stub
    with CompilePool(1) as pool:
        first = pool.submit("hold")
        while not started:                # the one process is busy with it
            time.sleep(0.005)
        queued = [pool.submit(name) for name in ("b1", "b2", "b3")]
        urgent = pool.submit("edge", urgent=True)
        release.set()
        assert [f.result(5) for f in (first, *queued, urgent)] == ["info hold", "info b1", "info b2", "info b3",
                                                                   "info edge"]
    assert started == ["hold", "edge", "b1", "b2", "b3"]


def test_no_more_tasks_run_at_once_than_the_pool_has_processes(stub):
    started, release, state = stub
    release.set()
    with CompilePool(2) as pool:
        assert [f.result(5) for f in [pool.submit(f"t{i}") for i in range(12)]] == [f"info t{i}" for i in range(12)]
    assert state["most"] == 2 and started == [f"t{i}" for i in range(12)]


def test_closing_cancels_what_waits_and_the_pool_can_be_used_again(stub):
    started, release, _ = stub
    pool = CompilePool(1)
    running = pool.submit("hold")
    while not started:
        time.sleep(0.005)
    waiting = pool.submit("never")
    threading.Timer(0.2, release.set).start()
    pool.close()
    assert running.result(5) == "info hold" and "never" not in started
    with pytest.raises(CancelledError):
        waiting.result(5)
    assert pool.submit("again").result(5) == "info again"
    pool.close()


def test_a_compile_worker_runs_at_a_lower_priority_than_the_sweep(tmp_path):
    """The compilers yield the cores to the sweep's process and the GPU worker (tuner.budget._compile)."""
    import os
    import subprocess
    import sys

    out = tmp_path / "nice.txt"      # the worker's stdout goes to the compile log
    script = (f"import os; from tuner.budget import _compile; before = os.nice(0); _compile.worker_init(); "
              f"open({str(out)!r}, 'w').write(f'{{before}} {{os.nice(0)}}')")
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ})
    before, after = map(int, out.read_text().split())
    assert after == min(19, before + 10)


def test_a_compiler_killed_by_a_signal_is_no_verdict_compiled_again_and_never_cached(tmp_path, monkeypatch):
    """Ctrl-C reaches ptxas (which handles it) though the compile workers ignore it: its "error code -2"
    must not become the config's compile_error, in the store or in the cache."""
    from tuner.budget import CompileTask, _compile, compile_config
    from tuner.kernels.triton_fwd import FwdConfig
    from tuner.problem import Problem

    monkeypatch.setenv("FA2_TUNER_CACHE", str(tmp_path))
    calls, kills = [], [_compile.COMPILE_ATTEMPTS]
    killed_info = _compile.CompileInfo(error="PTXASError: PTXAS error: `ptxas` failed with error code -2")
    compiled = _compile.CompileInfo(shared_bytes=4096, registers=64, binary="b")

    def once(unit, capability, via_jit):
        calls.append(capability)
        return killed_info if len(calls) <= kills[0] else compiled

    monkeypatch.setattr(_compile, "_compile_unit_once", once)
    task = CompileTask(FwdConfig(32, 16, 1, 1), Problem(batch=1, heads=1, n_q=64, n_k=64, head_dim=16), 89)
    info = compile_config(task)                         # killed every time: an error, not cached
    assert _compile.killed(info) and len(calls) == _compile.COMPILE_ATTEMPTS
    assert _compile.cached_info(task) is None and not list((tmp_path / "budget").glob("*.json"))
    calls.clear()
    kills[0] = 1                                        # killed once: compiled on the next attempt, cached
    assert compile_config(task).error is None and len(calls) == 2
    assert _compile.cached_info(task).shared_bytes == 4096
    crashed = _compile.CompileInfo(error="PTXASError: ptxas failed with error code 255")
    assert not _compile.killed(crashed)                # the compiler's own refusal is a verdict


def test_a_ctrl_c_while_a_compile_worker_starts_leaves_it_running():
    """A terminal's Ctrl-C reaches the whole process group, the pool's processes too, maybe while they still
    import (seconds, for a spawned process): each must go on, not end in a KeyboardInterrupt traceback (the
    pool would break). The signal is sent to each process the moment it exists, before its imports."""
    import os
    import signal

    pool = CompilePool(jobs=2)
    try:
        pool.start()
        processes = list(pool._executor._processes.values())
        assert len(processes) == 2
        for process in processes:
            os.kill(process.pid, signal.SIGINT)
        pids = {pool._executor.submit(os.getpid).result(timeout=120) for _ in range(6)}
        assert pids <= {p.pid for p in processes} and all(p.is_alive() for p in processes)
    finally:
        pool.close()


def test_a_ctrl_c_while_the_pool_closes_ends_its_processes_at_once(monkeypatch):
    """Ctrl-C twice as the pool starts (the 2026-12-05 battery): the second one interrupts the close's wait; the
    processes, some still starting, are killed before the KeyboardInterrupt goes on, rather than left to fail
    reading their start-up state from a parent that is gone, each with a traceback on the terminal."""
    pool = CompilePool(jobs=2)
    pool.start()
    processes = list(pool._executor._processes.values())

    def interrupted(*_args, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pool._executor, "shutdown", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    deadline = time.monotonic() + 10         # killed: gone within moments (left running: idle for good)
    while any(process.is_alive() for process in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(processes) == 2 and not any(process.is_alive() for process in processes)


forked_by_server = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                      reason="this platform has no compile server (the pool spawns its processes)")


@forked_by_server
def test_compile_processes_are_forked_by_the_server_with_the_pools_environment(monkeypatch):
    """The compile server began before the environment changed (as the sweep begins it first): a
    process it forks still sees the environment of the pool's maker as it was when the pool was made,
    without TRITON_INTERPRET; and it is the server's child, not this process's (nothing forked from here)."""
    import os

    from tuner.spawn import start_compile_server

    start_compile_server()
    monkeypatch.setenv("FA2_TUNER_TEST_LATE", "set after the server began")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with CompilePool(1) as pool:
        executor = pool._ensure_executor()
        assert executor.submit(os.getenv, "FA2_TUNER_TEST_LATE").result(120) == "set after the server began"
        assert executor.submit(os.getenv, "TRITON_INTERPRET").result(30) is None
        assert executor.submit(os.getppid).result(30) != os.getpid()


@forked_by_server
def test_a_forked_compile_process_ends_on_its_pools_sigterm():
    """A compile process takes SIGTERM from the sweep alone (tuner.spawn.ignore_interrupts); forked by the
    server, its parent is the server, so the sweep's SIGTERM (multiprocessing's terminate) must still count."""
    import os

    with CompilePool(1) as pool:
        executor = pool._ensure_executor()
        assert executor.submit(os.getpid).result(120) > 0
        process = next(iter(executor._processes.values()))
        process.terminate()
        process.join(10)
        assert not process.is_alive()
        pool._executor = None      # its one process is gone: the pool is not closed through it
