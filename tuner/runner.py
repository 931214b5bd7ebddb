"""How a config is run: correctness and timing on the GPU, in an isolated worker process.

A config can crash the process (an illegal memory access leaves the CUDA context
unusable) or hang. So the kernel never runs in the sweep's own process: a spawned
worker holds the inputs, the float32 references and the SDPA baselines, and answers
one request at a time. The parent waits with a timeout; a worker that dies or does not
answer is killed, the trial is recorded as ``crashed`` or ``timeout``, and a fresh
worker takes the next one.

In the worker, for each config:

1. **check**: on every shape of the study and on a ragged, non-square gate shape,
   run the kernel into NaN-filled outputs and compare ``out`` and ``lse`` with the
   float32 reference (:func:`kernel.reference.accuracy`: within 3x PyTorch's own
   low-precision error, or a floor). The gate shape keeps the study shape's
   specialisation (lengths multiples of 16, see :func:`gate_shape`), so the binary
   checked is the binary timed.
2. **time**: ``triton.testing.do_bench`` median (warm-up, L2 flush, CUDA events).

``device="cpu"`` runs the same steps in Triton's interpreter with a wall-clock timer.
It exists so the sweep can be tested without a GPU; its times mean nothing.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import traceback
from dataclasses import dataclass, field

from tuner._budget import Problem
from tuner.space import Config

# Test hook: "KEY:crash,KEY:hang,KEY:wrong" makes the worker misbehave on those configs,
# so the tests can check that a bad config never ends a sweep.
FAULT_ENV = "FA2_TUNER_FAULT"
START_TIMEOUT_S = 300.0


def gate_shape(problem: Problem, small: bool = False) -> Problem:
    """The ragged, non-square shape every config is also checked on.

    1552 = 97 x 16 and 1040 = 65 x 16 are ragged for every tile of 32 and up (the last
    query and key tiles are partial) yet keep the divisibility-by-16 specialisation of
    the study's shapes, so the gate runs the very binary that is timed. The head
    count keeps the study's class too (1 is a constant to the JIT, multiples of 16
    get a divisibility hint; anything else, such as 3, gets neither).

    ``small`` (80 x 48, ragged for tiles of 32 and up) is for Triton's interpreter.
    """
    heads = 1 if problem.heads == 1 else 16 if problem.heads % 16 == 0 else 3
    n_q, n_k = (80, 48) if small else (1552, 1040)
    return Problem(batch=1 if small else 2, heads=heads, n_q=n_q, n_k=n_k, head_dim=problem.head_dim, dtype=problem.dtype,
                   causal=problem.causal)


@dataclass(frozen=True)
class ShapeOutcome:
    """One config on one shape."""

    shape: str
    correct: bool
    reason: str
    err_out: float | None = None
    err_lse: float | None = None
    err_bound: float | None = None
    ragged_err_out: float | None = None
    ms: float | None = None


@dataclass
class TrialOutcome:
    """One config on all shapes of a study. ``status`` is ``timed`` only if every shape passed."""

    status: str
    reason: str
    shapes: dict[str, ShapeOutcome] = field(default_factory=dict)
    check_s: float = 0.0
    time_s: float = 0.0


# ------------------------------------------------------------------------ worker side


class _Bench:
    """Lives in the worker: inputs, references and baselines per shape, built once."""

    def __init__(self, shapes: list[Problem], timing: tuple[int, int], device: str):
        import torch

        self.torch = torch
        self.shapes = shapes
        self.warmup_ms, self.rep_ms = timing
        self.device = device
        self.cases: dict[Problem, dict] = {}
        self.faults = dict(item.split(":") for item in os.environ.get(FAULT_ENV, "").split(",") if ":" in item)

    def _case(self, problem: Problem) -> dict:
        """Fresh random inputs (never a fixed seed), NaN-ready outputs, the fp32 reference."""
        if problem in self.cases:
            return self.cases[problem]
        torch = self.torch
        from kernel.reference import torch_low_precision_error

        dtype = problem.torch_dtype
        seed = int.from_bytes(os.urandom(4), "little")
        generator = torch.Generator(device=self.device).manual_seed(seed)
        q = torch.randn(problem.batch, problem.heads, problem.n_q, problem.head_dim, device=self.device,
                        dtype=dtype, generator=generator)                                 # [B, H, N_q, D]
        k, v = (torch.randn(problem.batch, problem.heads, problem.n_k, problem.head_dim, device=self.device,
                            dtype=dtype, generator=generator) for _ in range(2))        # [B, H, N_k, D]
        ref_out, ref_lse = _chunked_reference(q, k, v, problem.causal)
        case = dict(q=q, k=k, v=v, seed=seed, reference=(ref_out, ref_lse),
                    torch_error=torch_low_precision_error(q, k, v, problem.causal, ref_out),
                    out=torch.empty_like(q), lse=torch.empty(q.shape[:-1], device=self.device, dtype=torch.float32))
        self.cases[problem] = case
        return case

    def _launch(self, problem: Problem, config: Config):
        from kernel import flash_attn_fwd

        case = self._case(problem)
        return lambda: flash_attn_fwd(case["q"], case["k"], case["v"], problem.causal, **config.as_kwargs(),
                                      out=case["out"], lse=case["lse"])

    def _check(self, problem: Problem, config: Config):
        from kernel.reference import accuracy

        case = self._case(problem)
        case["out"].fill_(float("nan"))
        case["lse"].fill_(float("nan"))
        self._launch(problem, config)()
        if self.faults.get(config.key) == "wrong":
            case["out"].mul_(1.5)
        return accuracy(case["out"], case["lse"], case["q"], case["k"], case["v"], problem.causal,
                        reference=case["reference"], torch_error=case["torch_error"])

    def _time(self, fn) -> float:
        if self.device == "cpu":
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        from kernel.bench import do_bench_median

        return do_bench_median(fn, self.warmup_ms, self.rep_ms)

    def baselines(self, _=None) -> dict[str, dict[str, float | None]]:
        """SDPA flash and cuDNN median ms per shape (None where a backend refuses the shape)."""
        measured = {}
        if self.device == "cpu":
            import torch.nn.functional as F

            for problem in self.shapes:
                case = self._case(problem)
                ms = self._time(lambda: F.scaled_dot_product_attention(case["q"], case["k"], case["v"],
                                                                       is_causal=problem.causal))
                measured[problem.label] = {"flash": ms, "cudnn": ms}
            return measured
        from kernel.bench import time_sdpa, warm_gpu

        for problem in self.shapes:
            self._case(problem)
        warm_gpu()
        for problem in self.shapes:
            case = self._case(problem)
            measured[problem.label] = time_sdpa(case["q"], case["k"], case["v"], problem.causal, self.warmup_ms,
                                                self.rep_ms)
        return measured

    def trial(self, config: Config) -> TrialOutcome:
        fault = self.faults.get(config.key)
        if fault == "crash":
            os._exit(77)
        if fault == "hang":
            time.sleep(3600)
        started = time.perf_counter()
        checks = {}
        for problem in self.shapes:
            result = self._check(problem, config)
            gate = self._check(gate_shape(problem, small=self.device == "cpu"), config)
            checks[problem] = (result, gate)
        check_s = time.perf_counter() - started
        outcome = TrialOutcome(status="timed", reason="", check_s=check_s)
        failed = [(p, r, g) for p, (r, g) in checks.items() if not (r.ok and g.ok)]
        for problem, (result, gate) in checks.items():
            outcome.shapes[problem.label] = ShapeOutcome(
                shape=problem.label, correct=result.ok and gate.ok,
                reason="" if result.ok and gate.ok else (result.reason if not result.ok else f"ragged gate: {gate.reason}"),
                err_out=_finite(result.err_out), err_lse=_finite(result.err_lse), err_bound=result.bound_out,
                ragged_err_out=_finite(gate.err_out))
        if failed:
            problem, result, gate = failed[0]
            outcome.status = "incorrect"
            which = problem.label if not result.ok else f"gate {gate_shape(problem, self.device == 'cpu').label}"
            outcome.reason = f"{which}: {(result if not result.ok else gate).reason}"
            return outcome
        started = time.perf_counter()
        for problem in self.shapes:
            ms = self._time(self._launch(problem, config))
            previous = outcome.shapes[problem.label]
            outcome.shapes[problem.label] = ShapeOutcome(**{**previous.__dict__, "ms": ms})
        outcome.time_s = time.perf_counter() - started
        return outcome


def _finite(value: float) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _chunked_reference(q, k, v, causal: bool):
    """The float32 reference, one batch-head slice group at a time so the score
    matrix [N_q, N_k] of a long sequence never needs more than ~2 GB at once."""
    import torch

    from kernel.reference import attention_reference

    batch, heads, n_q, _ = q.shape
    per_slice = n_q * k.shape[-2] * 4 * 3                 # scores, probabilities, lse pass
    group = max(1, min(batch * heads, (2 << 30) // max(per_slice, 1)))
    flat = [t.reshape(batch * heads, t.shape[-2], t.shape[-1]) for t in (q, k, v)]
    outs, lses = [], []
    for start in range(0, batch * heads, group):
        out, lse = attention_reference(*(t[start:start + group] for t in flat), causal)
        outs.append(out)
        lses.append(lse)
    return (torch.cat(outs).reshape(batch, heads, n_q, q.shape[-1]),     # [B, H, N_q, D]
            torch.cat(lses).reshape(batch, heads, n_q))                 # [B, H, N_q]


def _is_fatal(exc: BaseException) -> bool:
    """A CUDA error poisons the context: the worker must not take another request."""
    text = f"{type(exc).__name__}: {exc}"
    return "CUDA" in text or "AcceleratorError" in text or "cuda" in type(exc).__module__


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
        conn.send(("error", f"worker failed to start: {type(exc).__name__}: {exc}"))
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
            conn.send(("error", "".join(lines).strip()[-800:]))
            if _is_fatal(exc):
                os._exit(3)


# ------------------------------------------------------------------------ parent side


class WorkerFailed(RuntimeError):
    """The worker died or did not answer in time; ``status`` is ``crashed`` or ``timeout``."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class GpuWorker:
    """The parent's handle on the isolated worker (started on first use, restarted after a failure).

    Args:
        shapes: the study's shapes; each trial checks and times all of them.
        timing: (warmup_ms, rep_ms) for ``do_bench``.
        timeout_s: longest a trial may take before the worker is killed.
        device: ``"cuda"``, or ``"cpu"`` for the interpreter (tests only).
    """

    def __init__(self, shapes: list[Problem], timing: tuple[int, int] = (10, 40), timeout_s: float = 120.0,
                 device: str = "cuda"):
        self.shapes = list(shapes)
        self.timing = timing
        self.timeout_s = timeout_s
        self.device = device
        self.process = None
        self.conn = None
        self.starts = 0

    def __enter__(self) -> "GpuWorker":
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
        self.process.start()
        child.close()
        kind, payload = self._receive(START_TIMEOUT_S, "start")
        if kind != "ready":
            self.close()
            raise RuntimeError(payload)

    def _receive(self, timeout_s: float, what: str):
        if not self.conn.poll(timeout_s):
            self.close()
            raise WorkerFailed("timeout", f"no answer to {what} within {timeout_s:.0f} s; worker killed")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            code = self.process.exitcode
            self.close()
            raise WorkerFailed("crashed", f"worker died during {what} (exit code {code})") from None

    def request(self, kind: str, argument=None, timeout_s: float | None = None):
        """Send one request; returns the reply, or raises :class:`WorkerFailed`."""
        if self.process is None or not self.process.is_alive():
            self._start()
        self.conn.send((kind, argument))
        status, payload = self._receive(timeout_s or self.timeout_s, kind)
        if status == "error":
            if not self.process.is_alive() or self.process.exitcode is not None:
                self.close()
            raise WorkerFailed("crashed", payload)
        return payload

    def baselines(self) -> dict[str, dict[str, float | None]]:
        """SDPA per shape, measured now (building inputs and references on the way)."""
        return self.request("baselines", timeout_s=max(self.timeout_s, START_TIMEOUT_S))

    def trial(self, config: Config) -> TrialOutcome:
        """Check and time one config; failures come back as an outcome, never raised."""
        try:
            return self.request("trial", config)
        except WorkerFailed as failure:
            return TrialOutcome(status=failure.status, reason=failure.reason)

    def close(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                try:
                    self.conn.send(None)
                except (OSError, BrokenPipeError):
                    pass
                self.process.join(2)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        self.process = None
        if self.conn is not None:
            self.conn.close()
        self.conn = None
