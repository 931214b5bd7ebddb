"""How a config is run: correctness and timing on the GPU, in an isolated worker process.

A config can crash the process (an illegal memory access leaves the CUDA context
unusable) or hang. So the kernel never runs in the sweep's own process: a spawned
worker holds the inputs, the references and the SDPA baselines, and answers one
request at a time. The parent waits with a timeout; a worker that dies or does not
answer is killed, the trial is recorded as ``crashed`` or ``timeout`` (with the
exception's type when there was one), and a fresh worker takes the next config.

In the worker, for each config:

1. **check**: the gate of :mod:`tuner.gate`, on every study shape and the gate shapes (the edge
   shapes may be left to a later ``check`` request: :mod:`tuner.contenders`);
2. **time**: GPU time per call by CUDA-graph replay over input sets that do not fit in
   L2, and the host time of a call (:mod:`kernel.measure.timing`), on every study shape. A
   trial's request carries a bound per shape (the contenders' margin over the best so far,
   :meth:`tuner.contenders.Contenders.bounds`): a config past it after the first quarter of the
   window is timed no longer there, since a finer figure would change no decision.

``retime`` times lists of configs together in interleaved rounds (the finalists), with
SDPA in the same rounds. What a config is checked and timed with is the kernel's
(:class:`tuner.kernels.TunableKernel`: its inputs, reference, launch and baselines).
``device="cpu"`` runs the same steps in Triton's interpreter with
a wall clock, so the sweep can be tested without a GPU; its times mean nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import traceback
from dataclasses import replace

from kernel.measure.clock import sm_clock
from kernel.measure.retime import Rounds
from kernel.measure.timing import WALL
from tuner import kernels
from tuner.budget import quiet_compiler_pages
from tuner.gate import GateShape, finite
from tuner.kernels import Case, GateResult
from tuner.outcome import NamedError, ShapeOutcome, TrialOutcome, WorkerFailed
from tuner.problem import Problem
from tuner.spawn import ignore_interrupts, spawn_worker, visible_device
from tuner.status import Status

# Test hook: "KEY:FAULT,..." makes the worker misbehave on those configs (FAULT one of crash,
# hang, wrong, wrong-lse, wrong-gate, wrong-edge, raise, out-of-resources), so the tests can check that
# the gate and the sweep catch each kind of fault and that a bad config never ends a sweep.
FAULT_ENV = "FA2_TUNER_FAULT"
START_TIMEOUT_S = 300.0
HOST_CALLS = 10            # calls per batch when measuring a config's host time


# ------------------------------------------------------------------------ worker side


class WorkerBench:
    """Lives in the worker: the kernel, and per shape its inputs, references and timing sets, built once."""

    def __init__(self, kernel, shapes: list[Problem], timing: tuple[int, int], device: str):
        self.kernel, self.shapes = kernel, shapes
        self.warmup_ms, self.rep_ms = timing
        self.device = device
        self.cases: dict[object, Case] = {}
        self.timing_sets: dict[Problem, list[dict]] = {}
        self.faults = dict(item.split(":", 1) for item in os.environ.get(FAULT_ENV, "").split(",") if ":" in item)

    def _case(self, key) -> Case:
        if key not in self.cases:
            self.cases[key] = self.kernel.make_case(key, self.device)
        return self.cases[key]

    def _check(self, key, config) -> GateResult:
        """The config's outputs on a study shape or a gate shape, from NaN-filled outputs."""
        case = self._case(key)
        for name in case.outputs:
            case.tensors[name].fill_(float("nan"))
        self.kernel.call(config, case.tensors, case.problem)()
        fault = self.faults.get(config.key)
        gate = isinstance(key, GateShape)
        if fault == "wrong" or (fault == "wrong-gate" and gate) or (fault == "wrong-edge" and gate and key.edge):
            case.tensors[case.outputs[0]].mul_(1.01)
        if fault and fault.startswith("wrong-") and fault[6:] in case.outputs:
            case.tensors[fault[6:]].add_(1e-3)
        return self.kernel.judge(case)

    def _sets(self, problem: Problem) -> list[dict]:
        """Tensors for timing: the check's own, and more until they exceed L2 (the kernel's ``timing_sets``)."""
        if problem not in self.timing_sets:
            self.timing_sets[problem] = self.kernel.timing_sets(self._case(problem), self.device)
        return self.timing_sets[problem]

    def _calls(self, problem: Problem, config) -> list:
        return [self.kernel.call(config, tensors, problem) for tensors in self._sets(problem)]

    @staticmethod
    def _wall_ms(calls) -> float:
        """One call's wall time (the interpreter: the timings of a CPU run mean nothing)."""
        start = time.perf_counter()
        calls[0]()
        return (time.perf_counter() - start) * 1e3

    def _time(self, problem: Problem, config, host: bool = True,
              bound_ms: float | None = None) -> tuple[float, str, float | None, float | None]:
        """(GPU ms per call, timer, host µs per call, mean SM MHz or None) of a config on a shape."""
        calls = self._calls(problem, config)
        if self.device == "cpu":
            ms = self._wall_ms(calls)
            return ms, WALL, ms * 1e3, None
        from kernel.measure.timing import gpu_time, host_us

        timing = gpu_time(calls, self.rep_ms, self.warmup_ms, clock=sm_clock(), bound_ms=bound_ms)
        user_call = self.kernel.call(config, self._sets(problem)[0], problem, allocate=True)
        return timing.ms, timing.method, host_us(user_call, HOST_CALLS, 2) if host else None, timing.mhz

    def device_info(self, _=None) -> dict:
        """Which GPU this worker runs on: the index the parent gave it, name and UUID."""
        if self.device == "cpu":
            return {"device_name": "cpu (interpreter)", "device_uuid": None}
        import torch

        props = torch.cuda.get_device_properties(0)
        return {"device_name": props.name, "device_uuid": str(getattr(props, "uuid", "")) or None}

    def baselines(self, _=None) -> dict[str, dict]:
        """The kernel's baselines per shape (SDPA's flash and cuDNN backends): GPU ms, host µs,
        timer (None where a backend refuses)."""
        measured = {}
        if self.device == "cpu":
            for problem in self.shapes:
                _, calls = next(iter(self.kernel.baselines(self._sets(problem)[:1], problem).values()))
                ms = self._wall_ms(calls)
                measured[problem.label] = dict(flash_ms=ms, cudnn_ms=ms, flash_host_us=ms * 1e3,
                                               cudnn_host_us=ms * 1e3, timer=WALL)
            return measured
        from kernel.measure.timing import time_backends, warm_gpu

        for problem in self.shapes:
            self._sets(problem)
        warm_gpu()
        for problem in self.shapes:
            result = time_backends(self.kernel.baselines(self._sets(problem), problem), self.rep_ms, self.warmup_ms)
            methods = {r["method"] for r in result.values() if r["method"]}
            measured[problem.label] = dict(
                flash_ms=result["flash"]["ms"], cudnn_ms=result["cudnn"]["ms"],
                flash_host_us=result["flash"]["host_us"], cudnn_host_us=result["cudnn"]["host_us"],
                timer="+".join(sorted(methods)) or None)
        return measured

    def _gate(self, problem: Problem, config, seen: dict, edges: bool = True) -> tuple[ShapeOutcome, str | None]:
        """The study shape and its gate shapes (the edge shapes only if ``edges``); ``seen`` keeps
        gate results within a trial, since shapes that differ only in length share their gate shapes."""
        result = self._check(problem, config)
        worst: dict[str, float] = {e.name: 0.0 for e in result.errors}
        failure = None if result.ok else f"{problem.label}: {result.reason}"
        for gate in self.kernel.gate_shapes(problem, config, small=self.device == "cpu"):
            if gate.edge and not edges:
                continue
            if gate not in seen:
                seen[gate] = self._check(gate, config)
            gated = seen[gate]
            for error in gated.errors:
                worst[error.name] = max(worst.get(error.name, 0.0),
                                        error.error if error.error == error.error else float("inf"))
            if failure is None and not gated.ok:
                shape = gate.problem
                failure = f"gate {gate.name} ({shape.n_q}x{shape.n_k}): {gated.reason}"
        errors = tuple(NamedError(e.name, finite(e.error), e.bound) for e in result.errors)
        return ShapeOutcome(shape=problem.label, correct=failure is None, reason=failure or "", errors=errors,
                            gate_errors=tuple(NamedError(n, finite(v)) for n, v in worst.items())), failure

    def _fault(self, config) -> None:
        fault = self.faults.get(config.key)
        if fault == "crash":
            os._exit(77)
        if fault == "hang":
            time.sleep(3600)
        if fault == "raise":
            raise RuntimeError(f"injected failure for {config.key}")
        if fault == "out-of-resources":
            from triton.runtime.errors import OutOfResources

            raise OutOfResources(300_000, 232_448, "shared memory")

    def check(self, config, edges: bool = True) -> TrialOutcome:
        """The gate alone, on every study shape: TIMED (without times) where all passed."""
        self._fault(config)
        started = time.perf_counter()
        outcome = TrialOutcome(status=Status.TIMED, reason="")
        failures, seen = [], {}
        for problem in self.shapes:
            outcome.shapes[problem.label], failure = self._gate(problem, config, seen, edges)
            if failure:
                failures.append(failure)
        outcome.check_s = time.perf_counter() - started
        if failures:
            outcome.status, outcome.reason = Status.INCORRECT, failures[0]
        return outcome

    def trial_without_edges(self, request: tuple) -> TrialOutcome:
        """:meth:`trial` with the gate's edge shapes left for a later :meth:`check`."""
        return self.trial(request, edges=False)

    def trial(self, request: tuple, edges: bool = True) -> TrialOutcome:
        """``request``: (config, bounds), bounds a shape label -> ms (:func:`kernel.measure.timing.gpu_time`'s
        ``bound_ms``; a shape without one is timed over the whole window)."""
        config, bounds = request
        outcome = self.check(config, edges)
        if outcome.status != Status.TIMED:
            return outcome
        started = time.perf_counter()
        for problem in self.shapes:
            ms, timer, host, mhz = self._time(problem, config, bound_ms=bounds.get(problem.label))
            outcome.shapes[problem.label] = replace(outcome.shapes[problem.label], ms=ms, timer=timer, host_us=host,
                                                    mhz=mhz)
        outcome.time_s = time.perf_counter() - started
        return outcome

    def retime(self, request: tuple[dict[str, list], tuple]) -> dict[str, Rounds]:
        """Each shape's configs timed together in rotating rounds (:func:`tuner.worker_rounds.retime`)."""
        from tuner.worker_rounds import retime

        return retime(self, request)


def _is_fatal(exc: BaseException) -> bool:
    """A CUDA error poisons the context: the worker must not take another request."""
    text = f"{type(exc).__name__}: {exc}"
    return "CUDA" in text or "AcceleratorError" in text or "cuda" in type(exc).__module__


def _serve(conn, kernel_name: tuple[str, str], shapes, timing, device) -> None:
    """The worker's loop: one request in, one reply out, until told to stop."""
    # Ctrl-C reaches the whole process group: the sweep decides (the trial in flight finishes), the worker
    # goes on. A failing JIT compile's pages (Triton prints ptxas's reproducer to stdout) go to the
    # compile log; stderr stays the sweep's, for a crash's last words.
    ignore_interrupts()
    quiet_compiler_pages((1,))
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    try:
        bench = WorkerBench(kernels.get(*kernel_name), shapes, timing, device)   # import errors surface at start
    except BaseException as exc:
        conn.send(("error", (type(exc).__name__, f"worker failed to start: {type(exc).__name__}: {exc}")))
        return
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        kind, argument = request
        try:
            conn.send(("ok", getattr(bench, kind)(argument)))
        except Exception as exc:  # a config's failure is a result; the worker reports and goes on
            lines = traceback.format_exception_only(type(exc), exc)
            conn.send(("error", (type(exc).__name__, "".join(lines).strip()[-800:])))
            if _is_fatal(exc):
                os._exit(3)


# ------------------------------------------------------------------------ parent side


class GpuWorker:
    """The parent's handle on the isolated worker (started on first use, restarted after a failure).

    Args:
        shapes: the study's shapes; each trial checks and times all of them.
        kernel: (name, pass) of the kernel (:func:`tuner.kernels.get`).
        timing: (warmup_ms, rep_ms) per shape.
        timeout_s: longest a request may take before the worker is killed.
        device: ``"cuda"``, or ``"cpu"`` for the interpreter (tests only).
        device_index: the GPU (of those visible to the parent) the worker runs on; None: the first.
    """

    def __init__(self, shapes: list[Problem], timing: tuple[int, int] = (10, 40), timeout_s: float = 120.0,
                 device: str = "cuda", device_index: int | None = None,
                 kernel: tuple[str, str] = (kernels.DEFAULT_KERNEL, kernels.DEFAULT_PASS)):
        self.device_index, self.kernel = device_index, kernel
        self.shapes = list(shapes)
        self.timing = timing
        self.timeout_s = timeout_s
        self.device = device
        self.process = None
        self.conn = None
        self.starts = 0

    def __enter__(self) -> GpuWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def restarts(self) -> int:
        """Workers started after the first, each after a crash or a timeout."""
        return max(0, self.starts - 1)

    def _start(self) -> None:
        self.starts += 1
        # The worker sees one GPU, as its device 0, from its first instruction on (tuner.spawn: the
        # process the sweep began early for that GPU, where there is one).
        pin = visible_device(self.device_index) if self.device_index is not None and self.device != "cpu" else None
        self.process, self.conn = spawn_worker(_serve, (self.kernel, self.shapes, self.timing, self.device), pin)
        kind, payload = self._receive(START_TIMEOUT_S, "start")
        if kind != "ready":
            self.close()
            raise WorkerFailed(Status.CRASHED, payload[1], payload[0])

    def _receive(self, timeout_s: float, what: str):
        if not self.conn.poll(timeout_s):
            self.close()
            raise WorkerFailed(Status.TIMEOUT, f"no answer to {what} within {timeout_s:.0f} s; worker killed")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            code = self.process.exitcode
            self.close()
            raise WorkerFailed(Status.CRASHED, f"worker died during {what} (exit code {code})") from None

    def request(self, kind: str, argument=None, timeout_s: float | None = None):
        """Send one request; returns the reply, or raises :class:`WorkerFailed`."""
        if self.process is None or not self.process.is_alive():
            self._start()
        self.conn.send((kind, argument))
        status, payload = self._receive(timeout_s or self.timeout_s, kind)
        if status == "error":
            error_type, reason = payload
            if not self.process.is_alive() or self.process.exitcode is not None:
                self.close()
            raise WorkerFailed(Status.CRASHED, reason, error_type)
        return payload

    def baselines(self) -> dict[str, dict]:
        """SDPA per shape, measured now (building inputs and references on the way)."""
        return self.request("baselines", timeout_s=max(self.timeout_s, START_TIMEOUT_S))

    def device_info(self) -> dict:
        """Columns naming the device: index, name, UUID and host."""
        return {"device_index": self.device_index or 0, "host": socket.gethostname(), **self.request("device_info")}

    def trial(self, config, edges: bool = True, bounds: dict[str, float] | None = None) -> TrialOutcome:
        """Check and time one config (its gate's edge shapes only if ``edges``; ``bounds``: shape label ->
        ms past which a shape's timing stops early, :meth:`WorkerBench.trial`); failures come back as an
        outcome, never raised."""
        return self._outcome("trial" if edges else "trial_without_edges", (config, dict(bounds or {})))

    def check(self, config) -> TrialOutcome:
        """The whole gate for one config, untimed (a contender's edge shapes: :mod:`tuner.driver`)."""
        return self._outcome("check", config)

    def _outcome(self, kind: str, argument) -> TrialOutcome:
        try:
            return self.request(kind, argument)
        except WorkerFailed as failure:
            return TrialOutcome(status=failure.status, reason=failure.reason, error_type=failure.error_type)

    def retime(self, finalists: dict[str, list], protocol: tuple) -> dict[str, Rounds]:
        """Each shape's configs timed together in rotating rounds (:meth:`WorkerBench.retime`)."""
        budget = max(self.timeout_s, START_TIMEOUT_S) * max(1, len(finalists))
        return self.request("retime", (finalists, protocol), timeout_s=budget)

    def close(self) -> None:
        # Taken first, so that two closes at once (a second Ctrl-C closes from the main thread while a closing
        # thread runs) each see a process or None, never one that the other cleared half way.
        process, self.process = self.process, None
        conn, self.conn = self.conn, None
        if process is not None:
            if process.is_alive():
                with contextlib.suppress(OSError, BrokenPipeError, AttributeError):
                    conn.send(None)
                process.join(2)
            if process.is_alive():
                process.kill()
                process.join(5)
        if conn is not None:
            conn.close()
