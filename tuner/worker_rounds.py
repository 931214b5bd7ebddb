"""The finalists' rounds, run in the GPU worker (:meth:`tuner.runner.WorkerBench.retime`).

Each shape's configs are timed together in rotating rounds, with SDPA in the same rounds on a
GPU (the finalists' ratios, and the decision without NVML, need it); the interpreter times one
call's wall clock, with no clock and no SDPA.
"""

from __future__ import annotations

from kernel.measure.clock import sm_clock
from kernel.measure.retime import Candidate, Rounds, WallCandidate, adaptive_rounds, fixed_rounds
from kernel.measure.timing import runs
from tuner.outcome import SDPA_KEYS

__all__ = ["retime"]


def retime(bench, request: tuple[dict[str, list], tuple]) -> dict[str, Rounds]:
    """label -> :class:`kernel.measure.retime.Rounds` (ms and SM clock per config key) for ``bench``'s
    shapes. ``request``: (label -> configs, protocol), the protocol ``("adaptive", (settle_ms,
    rep_ms, min, max[, power]))`` (:func:`kernel.measure.retime.adaptive_rounds`, ``power`` its power
    check) or ``("fixed", rounds)`` (as :data:`kernel.measure.timing.RETIME`); SDPA's keys are
    :data:`tuner.outcome.SDPA_KEYS`."""
    finalists, (protocol, setting) = request
    by_label = {problem.label: problem for problem in bench.shapes}
    times: dict[str, Rounds] = {}
    for label, configs in finalists.items():
        problem = by_label[label]
        calls = {config.key: bench._calls(problem, config) for config in configs}
        pins = {}
        if bench.device != "cpu":
            for backend, pinned in bench.kernel.baselines(bench._sets(problem), problem).items():
                if runs(pinned):
                    pins[SDPA_KEYS[backend]], calls[SDPA_KEYS[backend]] = pinned
        if bench.device == "cpu":       # the interpreter: one call's wall time, no clock, no SDPA
            walls = {key: (lambda c=c: bench._wall_ms(c)) for key, c in calls.items()}
            times[label] = (fixed_rounds(walls, setting) if protocol == "fixed" else adaptive_rounds(
                {key: WallCandidate(wall) for key, wall in walls.items()}, list(calls), (), tuple(setting[:4])))
        elif protocol == "fixed":
            times[label] = fixed_rounds(calls, setting, pins, sm_clock(), bench.warmup_ms)
        else:
            captured = {key: Candidate(c, pins.get(key), sm_clock()) for key, c in calls.items()}
            times[label] = adaptive_rounds(captured, [config.key for config in configs], list(SDPA_KEYS.values()),
                                           tuple(setting[:4]), setting[4] if len(setting) > 4 else None)
    return times
