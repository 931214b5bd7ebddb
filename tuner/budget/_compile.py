"""The exact figures: the kernel compiled for a target on this machine, no GPU needed.

``triton.compile`` runs on the CPU for any ``sm_XX``, specialised exactly as the JIT
specialises a launch (:func:`compile_source`, which builds its arguments through the
kernel's own ``kernel_arguments``). Registers and spills are read from the cubin by the
``cuobjdump`` that ships inside Triton. Results are cached on disk, keyed by the
kernel's device code, so a rerun compiles nothing.

For the GPU present, the compile goes through ``JITFunction.warmup`` instead, so the
binary also lands where the launch will look for it (:func:`_jit_warmup`).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tuner.problem import Problem
from tuner.space import Config


@dataclass(frozen=True)
class CompileInfo:
    """What the compiler says about one config on one target."""

    shared_bytes: int | None = None        # dynamic shared memory the launch asks for
    static_shared_bytes: int = 0           # shared memory declared in the cubin itself
    registers: int | None = None           # per thread
    spill_bytes: int = 0                   # stack frame (local memory) per thread
    error: str | None = None
    binary: str | None = None              # hash of the cubin and launch metadata: equal means same kernel


@dataclass(frozen=True)
class CompileTask:
    """One compile: a config for a problem's specialisation on ``sm_<capability>``.

    ``via_jit`` compiles for the GPU present through the JIT (``capability`` must be its own).
    """

    config: Config
    problem: Problem
    capability: int
    via_jit: bool = False


# --------------------------------------------------------------- the JIT's specialisation


def _int_type(value: int) -> str:
    return "i32" if -(2**31) <= value < 2**31 else "i64"


def compile_source(problem: Problem, block_m: int, block_n: int, config: Config | None = None):
    """The ``triton.compile`` inputs the JIT would build for a launch of ``problem``.

    Mirrors Triton's run-time specialisation (3.6 to 3.9): pointers 16-byte aligned
    (torch allocations are), integers divisible by 16 get ``tt.divisibility = 16``,
    integers equal to 1 become constexprs. Without the divisibility hints Triton does
    not pipeline the loads and shared memory no longer depends on ``num_stages``.

    ``config``'s knobs (TMA, warp specialization, persistent grid) are constexprs too.

    Returns:
        ``(signature, constexprs, attrs)`` for ``triton.compiler.ASTSource``.
    """
    from kernel import DTYPES, LaunchShape, kernel_arguments
    from kernel.flash_fwd import UNSPECIALISED

    shape = LaunchShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
    pointers = ["*" + DTYPES[problem.torch_dtype]] * 4 + ["*fp32"]
    signature: dict[str, str] = {}
    constexprs: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    divisible = [["tt.divisibility", 16]]
    for index, (name, value) in enumerate(kernel_arguments(pointers, shape, problem.causal)):
        if isinstance(value, str):
            signature[name] = value
            attrs[(index,)] = divisible
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif name in UNSPECIALISED:
            signature[name] = _int_type(value)
        elif value == 1:
            signature[name] = "constexpr"
            constexprs[(index,)] = 1
        else:
            signature[name] = _int_type(value)
            if value % 16 == 0:
                attrs[(index,)] = divisible
    first_constexpr = len(signature)
    for offset, (name, value) in enumerate(
            [("HEAD_DIM", shape.head_dim), ("BLOCK_M", block_m), ("BLOCK_N", block_n),
             ("CAUSAL", bool(problem.causal))] + _knob_constexprs(config)):
        signature[name] = "constexpr"
        constexprs[(first_constexpr + offset,)] = value
    return signature, constexprs, attrs


def _knob_constexprs(config: Config | None) -> list[tuple[str, Any]]:
    """The kernel's knob constexprs for ``config`` (in signature order), as the launcher passes them."""
    from kernel.flash_fwd import KNOB_CONSTEXPRS

    if config is None:
        return list(KNOB_CONSTEXPRS)
    values = config.constexprs()
    return [(name, values[name]) for name, _ in KNOB_CONSTEXPRS]


def compile_options(config: Config) -> dict:
    """``triton.compile`` options of a config: warps, stages, the register cap, and ours."""
    from kernel import COMPILE_OPTIONS

    options = dict(num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS)
    if config.maxnreg:
        options["maxnreg"] = config.maxnreg
    return options


def specialisation(problem: Problem) -> str:
    """What the JIT specialises a launch of this problem on (dtype, head dim, causal,
    which integers are divisible by 16 or equal to 1): problems with equal keys run
    the same binary for a given config."""
    return repr(compile_source(problem, 16, 16))


# ------------------------------------------------------------------------ the compiler


def cache_dir() -> Path:
    """Where compile results are kept: ``$FA2_TUNER_CACHE/budget`` or ``~/.cache/fa2-tuner/budget``."""
    root = os.environ.get("FA2_TUNER_CACHE") or Path.home() / ".cache" / "fa2-tuner"
    return Path(root) / "budget"


def _cuobjdump() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def read_resource_usage(cubin: bytes) -> tuple[int, int, int]:
    """(registers, stack bytes, static shared bytes) of the kernel in a cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        text = subprocess.run([str(_cuobjdump()), "--dump-resource-usage", handle.name],
                              capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text))
    if "REG" not in fields:
        raise RuntimeError(f"cuobjdump printed no resource usage:\n{text}")
    stack = max(int(fields.get("STACK", 0)), int(fields.get("LOCAL", 0)))
    return int(fields["REG"]), stack, int(fields.get("SHARED", 0))


def _cache_path(task: CompileTask) -> Path:
    import triton

    from kernel import COMPILE_OPTIONS, flash_fwd

    signature, constexprs, attrs = compile_source(task.problem, task.config.block_m, task.config.block_n, task.config)
    # The device code alone: editing the launcher must not throw the cache away.
    source = "".join(inspect.getsource(f.fn) for f in flash_fwd.JIT_FUNCTIONS).encode()
    blob = repr((BINARY_KEY, triton.__version__, task.capability, task.via_jit, task.config, signature,
                 sorted(constexprs.items()),
                 sorted(attrs.items()), sorted(COMPILE_OPTIONS.items()))).encode() + source
    return cache_dir() / f"{hashlib.sha256(blob).hexdigest()[:32]}.json"


# Bumped when what ``CompileInfo.binary`` covers changes, so cached entries are not reused.
BINARY_KEY = "binary+launch-grid"


def _read_cache(path: Path) -> CompileInfo | None:
    try:
        return CompileInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):      # absent, or left half-written by an older version
        return None


def _jit_warmup(config: Config, problem: Problem):
    """Compile through the JIT's own path (``JITFunction.warmup``) for the GPU present.

    The binary lands in Triton's cache under the key a launch will look up, so the
    process that times the config loads it instead of compiling it again. (A
    ``triton.compile`` of the same source makes the same binary but files it under
    another key: Triton 3.6 misses it at launch.)
    """
    import torch

    from kernel import JIT_KERNEL, LaunchShape, kernel_arguments

    shape = LaunchShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
    dtype = problem.torch_dtype
    pointers = (dtype, dtype, dtype, dtype, torch.float32)      # warmup takes dtypes for tensors
    args = [value for _, value in kernel_arguments(pointers, shape, problem.causal)]
    knobs = dict(_knob_constexprs(config))
    return JIT_KERNEL.warmup(*args, HEAD_DIM=problem.head_dim, BLOCK_M=config.block_m,
                                    BLOCK_N=config.block_n, CAUSAL=bool(problem.causal), grid=(1,), **knobs,
                                    **compile_options(config))


def _compile_uncached(task: CompileTask) -> CompileInfo:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel import JIT_KERNEL

    config = task.config
    try:
        if task.via_jit:
            compiled = _jit_warmup(config, task.problem)
        else:
            source = ASTSource(JIT_KERNEL, *compile_source(task.problem, config.block_m, config.block_n,
                                                                  config))
            compiled = triton.compile(source, target=GPUTarget("cuda", task.capability, 32),
                                      options=compile_options(config))
    except Exception as exc:  # a config the compiler rejects is a result, not a crash
        message = str(exc).strip().splitlines()
        return CompileInfo(error=f"{type(exc).__name__}: {message[-1] if message else ''}"[:500])
    cubin = compiled.asm["cubin"]
    registers, stack, static_shared = read_resource_usage(cubin)
    # "Same binary" means same timings only with the same launch: the warps, and the persistent
    # grid's programs per SM (1 and 2 compile to one cubin and launch different grids).
    launch = repr((compiled.metadata.shared, config.num_warps, config.persistent)).encode()
    binary = hashlib.sha256(cubin + launch).hexdigest()[:20]
    return CompileInfo(shared_bytes=int(compiled.metadata.shared), static_shared_bytes=static_shared,
                       registers=registers, spill_bytes=stack, binary=binary)


def compile_config(task: CompileTask) -> CompileInfo:
    """Compile one task (cached). Must run where ``TRITON_INTERPRET`` is off;
    :class:`CompilePool` sees to that."""
    path = _cache_path(task)
    cached = _read_cache(path)
    if cached is not None:
        return cached
    info = _compile_uncached(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(info)))
    temporary.replace(path)            # atomic: a killed run never leaves half a file
    return info


@contextlib.contextmanager
def _without_interpreter():
    """Spawn compile workers without ``TRITON_INTERPRET``: a worker imports the kernel
    (to unpickle its task) before anything else runs, and under the interpreter
    ``@triton.jit`` makes functions the compiler cannot take."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def _worker_init() -> None:
    # A failing compile prints pages of PTX "reproducer" to stderr; its last line is kept
    # as the config's reason, the pages go to a log beside the cache.
    log = cache_dir() / "compile-errors.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)


class CompilePool:
    """Compiles on many cores in fresh (spawned) processes, kept for many batches.

    Spawn, not fork: the parent may hold a CUDA context, which fork would corrupt.
    Cache hits are answered at once, without a worker.

    Args:
        jobs: worker processes; default every core.
    """

    def __init__(self, jobs: int | None = None):
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self._executor: ProcessPoolExecutor | None = None

    def submit(self, task: CompileTask) -> Future:
        """Compile one task; the future's result is a :class:`CompileInfo`."""
        cached = _read_cache(_cache_path(task))
        if cached is not None:
            done: Future = Future()
            done.set_result(cached)
            return done
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.jobs, mp_context=get_context("spawn"),
                                                 initializer=_worker_init)
        with _without_interpreter():          # workers are spawned inside submit, as they are needed
            return self._executor.submit(compile_config, task)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def compile_many(tasks: Sequence[CompileTask], jobs: int | None = None, progress=None,
                 pool: CompilePool | None = None) -> list[CompileInfo]:
    """Compile many tasks on all cores (see :class:`CompilePool`), in order.

    Args:
        tasks: what to compile.
        jobs: worker processes; default every core (ignored when ``pool`` is given).
        progress: optional callable(done, total), called as results arrive.
        pool: a pool to reuse; default a new one for this call.
    """
    own = pool is None
    pool = pool or CompilePool(jobs)
    try:
        futures = [pool.submit(task) for task in tasks]
        pending = [f for f in futures if not f.done()]
        done = len(futures) - len(pending)
        if progress:
            progress(done, len(tasks))
        for _ in as_completed(pending):
            done += 1
            if progress:
                progress(done, len(tasks))
        return [f.result() for f in futures]
    finally:
        if own:
            pool.close()


def compile_tasks(config: Config, variants: Sequence[Problem], target_capability: int,
                  present_capability: int | None) -> list[CompileTask]:
    """What to compile for a config: each specialisation of a study, for the target's
    budget and, when a GPU is present, for the GPU used. On the target itself one JIT
    compile serves both: exact for the budget, and where the launch finds it."""
    if present_capability == target_capability:
        return [CompileTask(config, shape, present_capability, True) for shape in variants]
    tasks = [CompileTask(config, shape, target_capability) for shape in variants]
    if present_capability is not None:
        tasks += [CompileTask(config, shape, present_capability, True) for shape in variants]
    return tasks
