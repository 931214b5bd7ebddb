"""A GPU worker's process begun early (tuner.spawn): the worker for its GPU takes it, and nothing else does."""

from __future__ import annotations

import pytest

from tuner import spawn, sweep
from tuner.kernels.triton_fwd import FwdConfig as Config
from tuner.problem import Problem
from tuner.runner import FAULT_ENV, GpuWorker
from tuner.status import Status

SHAPES = [Problem(batch=1, heads=2, n_q=64, n_k=64, head_dim=16, dtype="fp32")]


@pytest.fixture(autouse=True)
def no_early_left():
    """Each test starts and ends with no early process (one left over would be taken by the next worker)."""
    yield
    for process, conn in spawn._EARLY.values():
        process.kill()
        conn.close()
    spawn._EARLY.clear()


def test_the_worker_for_that_gpu_takes_the_early_process_and_a_restart_spawns_anew(monkeypatch):
    crash = Config(32, 16, 1, 1)
    monkeypatch.setenv(FAULT_ENV, f"{crash.key}:crash")
    spawn.start_early(None, warm_cuda=False)
    early = spawn._EARLY[None][0]
    with GpuWorker(SHAPES, (1, 1), timeout_s=60, device="cpu") as worker:
        assert worker.trial(Config(16, 16, 1, 1)).status == Status.TIMED
        assert worker.process is early and None not in spawn._EARLY
        assert worker.trial(crash).status == Status.CRASHED
        assert worker.trial(Config(16, 16, 1, 1)).status == Status.TIMED
        assert worker.process is not early and worker.restarts == 1
    assert not early.is_alive()


def test_a_dead_early_process_is_replaced_and_one_for_another_gpu_is_left(monkeypatch):
    spawn.start_early(None, warm_cuda=False)
    spawn.start_early("7", warm_cuda=False)
    dead = spawn._EARLY[None][0]
    dead.kill()
    dead.join(5)
    with GpuWorker(SHAPES, (1, 1), timeout_s=60, device="cpu") as worker:
        assert worker.trial(Config(16, 16, 1, 1)).status == Status.TIMED
        assert worker.process is not dead
    assert list(spawn._EARLY) == ["7"] and spawn._EARLY["7"][0].is_alive()
    spawn.start_early("7", warm_cuda=False)                # at most one per GPU
    assert len(spawn._EARLY) == 1


@pytest.mark.parametrize("driver, argv, early_env, begun", [
    (True, ["--gpu", "sm_89"], "1", True),
    (True, ["--gpu", "sm_89"], None, True),           # on by default (its worker ready 7 s sooner on the H200)
    (True, ["--gpu", "sm_89"], "0", False),
    (True, ["--gpu", "sm_89", "--help"], "1", False),
    (True, ["--gpu", "sm_89", "--device", "cpu"], "1", False),
    (False, ["--gpu", "sm_89"], "1", False),
])
def test_the_sweep_begins_one_where_a_driver_is_loaded_and_it_runs(driver, argv, early_env, begun, monkeypatch,
                                                                   tmp_path):
    node = tmp_path / "nvidiactl"
    if driver:
        node.write_text("")
    monkeypatch.setattr(spawn, "NVIDIA_DRIVER", str(node))
    if early_env is None:
        monkeypatch.delenv(spawn.EARLY_ENV, raising=False)
    else:
        monkeypatch.setenv(spawn.EARLY_ENV, early_env)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    calls, servers = [], []
    monkeypatch.setattr(spawn, "start_early", lambda pin, warm_cuda=True: calls.append(pin))
    monkeypatch.setattr(spawn, "start_compile_server", lambda: servers.append("compile server"))
    spawn.start_early_for_sweep(argv)
    assert calls == (["3"] if begun else [])
    runs = early_env != "0" and "--help" not in argv and "--device" not in argv      # with a driver or without
    assert servers == (["compile server"] if runs else [])


def test_a_cpu_sweep_runs_on_the_process_begun_early(tiny, tmp_path, sweep_args, query):
    db = tmp_path / "early.db"
    spawn.start_early(None, warm_cuda=False)
    early = spawn._EARLY[None][0]
    assert sweep.main(sweep_args(tiny, db, "--sampler", "grid", "--finalists", "0")) == 0
    assert None not in spawn._EARLY and not early.is_alive()        # taken, then closed with the sweep
    assert query(db, "select count(*) from fa2_results where status = 'timed'")[0][0] > 0


def test_a_ctrl_c_while_the_early_process_starts_leaves_it_waiting_for_its_work():
    """The sweep's Ctrl-C reaches its process group, the early worker's process too, maybe while it still
    imports: it must go on and serve the worker (the sweep decides what a Ctrl-C does)."""
    import os
    import signal

    spawn.start_early(None, warm_cuda=False)
    early = spawn._EARLY[None][0]
    os.kill(early.pid, signal.SIGINT)           # at once: the process is still importing
    with GpuWorker(SHAPES, (1, 1), timeout_s=60, device="cpu") as worker:
        assert worker.trial(Config(16, 16, 1, 1)).status == Status.TIMED
        assert worker.process is early
