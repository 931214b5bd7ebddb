"""How a config is run: correctness and timing on the GPU, in an isolated worker process.

A config can crash the process (an illegal memory access leaves the CUDA context
unusable) or hang. So the kernel never runs in the sweep's own process: a spawned
worker holds the inputs, the references and the SDPA baselines, and answers one
request at a time. The parent waits with a timeout; a worker that dies or does not
answer is killed, the trial is recorded as ``crashed`` or ``timeout`` (with the
exception's type when there was one), and a fresh worker takes the next config.

In the worker, for each config:

1. **check**: the gate of :mod:`tuner.gate`, on every study shape and the gate shapes;
2. **time**: GPU time per call by CUDA-graph replay over input sets that do not fit in
   L2, and the host time of a call (:mod:`kernel.timing`), on every study shape.

``retime`` times lists of configs together in interleaved rounds (the finalists), with
SDPA in the same rounds. ``device="cpu"`` runs the same steps in Triton's interpreter with
a wall clock, so the sweep can be tested without a GPU; its times mean nothing.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import threading
import time
import traceback
from dataclasses import replace

from kernel.timing import WALL
from tuner.gate import GateShape, finite, gate_shapes, make_case
from tuner.outcome import SDPA_KEYS, ShapeOutcome, TrialOutcome, WorkerFailed
from tuner.problem import Problem
from tuner.space import Config
from tuner.status import Status

# Test hook: "KEY:FAULT,..." makes the worker misbehave on those configs (FAULT one of crash,
# hang, wrong, wrong-lse, wrong-gate, raise, out-of-resources), so the tests can check that
# the gate and the sweep catch each kind of fault and that a bad config never ends a sweep.
FAULT_ENV = "FA2_TUNER_FAULT"
START_TIMEOUT_S = 300.0
HOST_CALLS = 10            # calls per batch when measuring a config's host time


# ------------------------------------------------------------------------ worker side


class _Bench:
    """Lives in the worker: inputs, references and timing sets, built once per shape."""

    def __init__(self, shapes: list[Problem], timing: tuple[int, int], device: str):
        self.shapes = shapes
        self.warmup_ms, self.rep_ms = timing
        self.device = device
        self.cases: dict[object, dict] = {}
        self.timing_sets: dict[Problem, list[tuple]] = {}
        self.faults = dict(item.split(":", 1) for item in os.environ.get(FAULT_ENV, "").split(",") if ":" in item)

    def _case(self, key) -> dict:
        if key not in self.cases:
            self.cases[key] = make_case(key, self.device)
        return self.cases[key]

    def _check(self, key, config: Config):
        from kernel import flash_attn_fwd
        from kernel.reference import accuracy

        case = self._case(key)
        causal = key.problem.causal if isinstance(key, GateShape) else key.causal
        case["out"].fill_(float("nan"))
        case["lse"].fill_(float("nan"))
        flash_attn_fwd(case["q"], case["k"], case["v"], causal, **config.as_kwargs(), out=case["out"],
                       lse=case["lse"])
        fault = self.faults.get(config.key)
        if fault == "wrong" or (fault == "wrong-gate" and isinstance(key, GateShape)):
            case["out"].mul_(1.01)
        if fault == "wrong-lse":
            case["lse"].add_(1e-3)
        return accuracy(case["out"], case["lse"], case["q"], case["k"], case["v"], causal,
                        reference=case["reference"], torch_error=case["torch_error"])

    def _sets(self, problem: Problem) -> list[tuple]:
        """(q, k, v, out, lse) sets for timing: the check's inputs, and more until they exceed L2."""
        if problem not in self.timing_sets:
            case = self._case(problem)
            sets = [(case["q"], case["k"], case["v"], case["out"], case["lse"])]
            if self.device != "cpu":
                import torch

                from kernel.timing import input_sets

                per_set = 4 * case["q"].numel() * case["q"].element_size()
                for _ in range(input_sets(per_set) - 1):
                    q, k, v = (torch.randn(t.shape, device=t.device, dtype=t.dtype) for t in sets[0][:3])
                    sets.append((q, k, v, torch.empty_like(q), torch.empty_like(case["lse"])))
            self.timing_sets[problem] = sets
        return self.timing_sets[problem]

    def _time(self, problem: Problem, config: Config, host: bool = True,
              retime: bool = False) -> tuple[float, str, float | None]:
        """(GPU ms per call, timer, host µs per call) of a config on a shape."""
        from kernel import flash_attn_fwd

        kwargs = config.as_kwargs()
        sets = self._sets(problem)
        if self.device == "cpu":
            q, k, v, out, lse = sets[0]
            start = time.perf_counter()
            flash_attn_fwd(q, k, v, problem.causal, **kwargs, out=out, lse=lse)
            ms = (time.perf_counter() - start) * 1e3
            return ms, WALL, ms * 1e3
        from kernel.bench import set_calls
        from kernel.timing import RETIME, gpu_time, host_us

        rep_ms, settle_ms = RETIME if retime else (self.rep_ms, 0.0)
        timing = gpu_time(set_calls(sets, problem.causal, kwargs), rep_ms, self.warmup_ms, settle_ms)
        q, k, v = sets[0][:3]
        host = host_us(lambda: flash_attn_fwd(q, k, v, problem.causal, **kwargs), HOST_CALLS, 2) if host else None
        return timing.ms, timing.method, host

    def device_info(self, _=None) -> dict:
        """Which GPU this worker runs on: the index the parent gave it, name and UUID."""
        if self.device == "cpu":
            return {"device_name": "cpu (interpreter)", "device_uuid": None}
        import torch

        props = torch.cuda.get_device_properties(0)
        return {"device_name": props.name, "device_uuid": str(getattr(props, "uuid", "")) or None}

    def baselines(self, _=None) -> dict[str, dict]:
        """SDPA flash and cuDNN per shape: GPU ms, host µs, timer (None where a backend refuses)."""
        measured = {}
        if self.device == "cpu":
            import torch.nn.functional as F

            for problem in self.shapes:
                q, k, v = self._sets(problem)[0][:3]
                start = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)
                ms = (time.perf_counter() - start) * 1e3
                measured[problem.label] = dict(flash_ms=ms, cudnn_ms=ms, flash_host_us=ms * 1e3,
                                               cudnn_host_us=ms * 1e3, timer=WALL)
            return measured
        from kernel.timing import time_sdpa, warm_gpu

        for problem in self.shapes:
            self._sets(problem)
        warm_gpu()
        for problem in self.shapes:
            result = time_sdpa([s[:3] for s in self._sets(problem)], problem.causal, self.rep_ms, self.warmup_ms)
            methods = {r["method"] for r in result.values() if r["method"]}
            measured[problem.label] = dict(
                flash_ms=result["flash"]["ms"], cudnn_ms=result["cudnn"]["ms"],
                flash_host_us=result["flash"]["host_us"], cudnn_host_us=result["cudnn"]["host_us"],
                timer="+".join(sorted(methods)) or None)
        return measured

    def _gate(self, problem: Problem, config: Config, seen: dict) -> tuple[ShapeOutcome, str | None]:
        """The study shape and its gate shapes; ``seen`` keeps gate results within a trial,
        since shapes that differ only in length share their gate shapes."""
        result = self._check(problem, config)
        worst_out = worst_lse = 0.0
        failure = None if result.ok else f"{problem.label}: {result.reason}"
        for gate in gate_shapes(problem, config, small=self.device == "cpu"):
            if gate not in seen:
                seen[gate] = self._check(gate, config)
            gated = seen[gate]
            worst_out = max(worst_out, gated.err_out if gated.err_out == gated.err_out else float("inf"))
            worst_lse = max(worst_lse, gated.err_lse if gated.err_lse == gated.err_lse else float("inf"))
            if failure is None and not gated.ok:
                shape = gate.problem
                failure = f"gate {gate.name} ({shape.n_q}x{shape.n_k}): {gated.reason}"
        return ShapeOutcome(shape=problem.label, correct=failure is None, reason=failure or "",
                            err_out=finite(result.err_out), err_lse=finite(result.err_lse),
                            bound_out=result.bound_out, bound_lse=result.bound_lse,
                            gate_err_out=finite(worst_out), gate_err_lse=finite(worst_lse)), failure

    def trial(self, config: Config) -> TrialOutcome:
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
        started = time.perf_counter()
        outcome = TrialOutcome(status=Status.TIMED, reason="")
        failures, seen = [], {}
        for problem in self.shapes:
            outcome.shapes[problem.label], failure = self._gate(problem, config, seen)
            if failure:
                failures.append(failure)
        outcome.check_s = time.perf_counter() - started
        if failures:
            outcome.status, outcome.reason = Status.INCORRECT, failures[0]
            return outcome
        started = time.perf_counter()
        for problem in self.shapes:
            ms, timer, host = self._time(problem, config)
            outcome.shapes[problem.label] = replace(outcome.shapes[problem.label], ms=ms, timer=timer, host_us=host)
        outcome.time_s = time.perf_counter() - started
        return outcome

    def retime(self, orders: dict[str, list[list[Config]]]) -> dict[str, dict[str, list[float]]]:
        """Time each shape's configs together, round by round in the given orders
        (:func:`tuner.finalists.round_orders`): label -> key -> ms per round. On a GPU each round
        times SDPA the same way too (keys :data:`SDPA_KEYS`): settled, longer windows slow some
        kernels more than others, so the finalists' ratios need SDPA from the same rounds."""
        from kernel.timing import RETIME, time_sdpa

        by_label = {problem.label: problem for problem in self.shapes}
        times: dict[str, dict[str, list[float]]] = {}
        for label, rounds in orders.items():
            problem, times[label] = by_label[label], {}
            for order in rounds:
                for config in order:
                    ms = self._time(problem, config, host=False, retime=True)[0]
                    times[label].setdefault(config.key, []).append(ms)
                sdpa = {} if self.device == "cpu" else time_sdpa(
                    [s[:3] for s in self._sets(problem)], problem.causal, RETIME[0], self.warmup_ms, RETIME[1], False)
                for backend, result in sdpa.items():
                    if result["ms"] is not None:
                        times[label].setdefault(SDPA_KEYS[backend], []).append(result["ms"])
        return times


def _is_fatal(exc: BaseException) -> bool:
    """A CUDA error poisons the context: the worker must not take another request."""
    text = f"{type(exc).__name__}: {exc}"
    return "CUDA" in text or "AcceleratorError" in text or "cuda" in type(exc).__module__


def visible_device(index: int) -> str:
    """What ``CUDA_VISIBLE_DEVICES`` pins a worker to the parent's ``index``-th GPU."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[index] if index < len(visible) else str(index)


_SPAWN_LOCK = threading.Lock()     # the environment a worker inherits is set around its start


def _serve(conn, shapes, timing, device) -> None:
    """The worker's loop: one request in, one reply out, until told to stop."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    try:
        bench = _Bench(shapes, timing, device)
        import kernel  # noqa: F401  (import errors surface at start, not mid-trial)
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
        timing: (warmup_ms, rep_ms) per shape.
        timeout_s: longest a request may take before the worker is killed.
        device: ``"cuda"``, or ``"cpu"`` for the interpreter (tests only).
        device_index: the GPU (of those visible to the parent) the worker runs on; None: the first.
    """

    def __init__(self, shapes: list[Problem], timing: tuple[int, int] = (10, 40), timeout_s: float = 120.0,
                 device: str = "cuda", device_index: int | None = None):
        self.device_index = device_index
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
        context = multiprocessing.get_context("spawn")   # never fork a process that may hold CUDA
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, self.shapes, self.timing, self.device),
                                       daemon=True, name="fa2-tuner-worker")
        with _SPAWN_LOCK:
            # The worker sees one GPU, as its device 0, from its first instruction on.
            saved = os.environ.get("CUDA_VISIBLE_DEVICES")
            if self.device_index is not None and self.device != "cpu":
                os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(self.device_index)
            try:
                self.process.start()
            finally:
                if saved is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = saved
        child.close()
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

    def trial(self, config: Config) -> TrialOutcome:
        """Check and time one config; failures come back as an outcome, never raised."""
        try:
            return self.request("trial", config)
        except WorkerFailed as failure:
            return TrialOutcome(status=failure.status, reason=failure.reason, error_type=failure.error_type)

    def retime(self, orders: dict[str, list[list[Config]]]) -> dict[str, dict[str, list[float]]]:
        """Configs timed together, round by round: label -> config key -> ms per round."""
        budget = max(self.timeout_s, START_TIMEOUT_S) * max(1, len(orders))
        return self.request("retime", orders, timeout_s=budget)

    def close(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                with contextlib.suppress(OSError, BrokenPipeError):
                    self.conn.send(None)
                self.process.join(2)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        self.process = None
        if self.conn is not None:
            self.conn.close()
        self.conn = None
