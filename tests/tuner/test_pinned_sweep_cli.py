"""Pins --workers where no CUDA GPU is visible: refused for a CUDA sweep asking for two or more, taken as
given for the CPU sweep (the interpreter), and one worker by default."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.sweep_args import workers_for as _workers


@pytest.mark.parametrize("workers", [2, 3])
def test_a_cuda_sweep_asking_for_several_workers_without_a_gpu_is_refused(workers):
    count, problem = _workers(SimpleNamespace(device="cuda", workers=workers), None)
    assert count == 0 and f"--workers {workers}: no CUDA GPU is visible here" in problem


@pytest.mark.parametrize("device, workers, expected", [("cpu", 2, 2), ("cpu", 3, 3), ("cpu", None, 1),
                                                        ("cuda", 1, 1), ("cuda", None, 1)])
def test_workers_without_a_gpu_that_are_taken_as_given(device, workers, expected):
    assert _workers(SimpleNamespace(device=device, workers=workers), None) == (expected, None)
