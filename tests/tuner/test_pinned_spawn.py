"""Pins tuner.spawn's bookkeeping: one early worker process per GPU, and which GPU the parent's n-th
visible device names for a worker."""

from __future__ import annotations

import multiprocessing

import pytest

from tuner import spawn


@pytest.fixture
def own_early_processes():
    """Starts and ends with no early process; every worker process the test started is killed after it."""
    assert not spawn._EARLY
    before = {p.pid for p in multiprocessing.active_children()}
    yield
    for process, conn in spawn._EARLY.values():
        process.kill()
        conn.close()
    spawn._EARLY.clear()
    for process in multiprocessing.active_children():
        if process.pid not in before and process.name == "fa2-tuner-worker":
            process.kill()
            process.join(5)


def _workers() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "fa2-tuner-worker" and p.is_alive()]


def test_a_second_early_start_for_the_same_gpu_keeps_the_first_process_and_starts_none(own_early_processes):
    spawn.start_early("3", warm_cuda=False)
    first = spawn._EARLY["3"][0]
    spawn.start_early("3", warm_cuda=False)
    assert spawn._EARLY["3"][0] is first and first.is_alive()
    assert [p.pid for p in _workers()] == [first.pid]


@pytest.mark.parametrize("visible, index, pinned", [
    ("3,5", 0, "3"), ("3,5", 1, "5"),              # the last visible GPU is named as the parent sees it
    ("3,5", 2, "2"), ("", 1, "1"),                  # past the list (or none set): the index itself
    (" GPU-aa , GPU-bb ", 1, "GPU-bb"),
])
def test_a_worker_is_pinned_to_the_parents_nth_visible_gpu(monkeypatch, visible, index, pinned):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert spawn.visible_device(index) == pinned
