"""The exact figures: a config's kernels compiled for a target on this machine, no GPU needed.

A config is compiled as its kernel's compile units say
(:meth:`tuner.kernels.TunableKernel.compile_units`: every JIT kernel its launch runs,
specialised exactly as the JIT specialises that launch). ``triton.compile`` runs on the
CPU for any ``sm_XX``. Registers and spills are read from each cubin by the ``cuobjdump``
that ships inside Triton; a config's :class:`CompileInfo` is the worst of its units. Results
are cached on disk, keyed by the kernel's device code, so a rerun compiles nothing.

For the GPU present, each unit goes through ``JITFunction.warmup`` instead, so the binary
also lands where the launch will look for it (:func:`_jit_warmup`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tuner.budget._cache import CacheError, cache_dir, settle_caches
from tuner.problem import Problem
from tuner.spawn import ignore_interrupts, without_interpreter  # noqa: F401 (without_interpreter: the pool's)

MAX_ERROR_CHARS = 8000     # a compile error kept this long in the store (ptxas's lines, the repro command)


@dataclass(frozen=True)
class CompileInfo:
    """What the compiler says about one config on one target: the worst of its compile units,
    and each unit's own figures (``units``; empty for a config of one unit)."""

    shared_bytes: int | None = None        # dynamic shared memory the launch asks for
    static_shared_bytes: int = 0           # shared memory declared in the cubin itself
    registers: int | None = None           # per thread
    spill_bytes: int = 0                   # stack frame (local memory) per thread
    error: str | None = None
    binary: str | None = None              # hash of the cubins and launch metadata: equal means same kernels
    name: str = ""                         # the unit's name (a unit's info); "" for a config's
    num_warps: int | None = None           # the unit's warps (its threads hold the registers)
    units: tuple[CompileInfo, ...] = ()

    def parts(self) -> tuple[CompileInfo, ...]:
        """The units to judge: each unit's info, or this one when it stands for a single unit."""
        return self.units or (self,)

    @classmethod
    def from_json(cls, values: dict) -> CompileInfo:
        units = tuple(cls.from_json(u) for u in values.pop("units", ()))
        return cls(**values, units=units)

    @classmethod
    def worst(cls, units: Sequence[CompileInfo]) -> CompileInfo:
        """A config's info from its units': the largest shared memory, registers and spills, the
        first error (named after its unit when there are several), one hash over all binaries."""
        if len(units) == 1:
            return replace(units[0], units=())
        failed = next((u for u in units if u.error), None)
        if failed is not None:
            return cls(error=f"{failed.name}: {failed.error}", units=tuple(units))
        widest = max(units, key=lambda u: u.shared_bytes or 0)
        binary = hashlib.sha256("+".join(u.binary or "" for u in units).encode()).hexdigest()[:20]
        return cls(shared_bytes=widest.shared_bytes, static_shared_bytes=widest.static_shared_bytes,
                   registers=max(u.registers or 0 for u in units), spill_bytes=max(u.spill_bytes for u in units),
                   binary=binary if all(u.binary for u in units) else None, units=tuple(units))


@dataclass(frozen=True)
class CompileTask:
    """One compile: a config for a problem's specialisation on ``sm_<capability>``.

    ``via_jit`` compiles for the GPU present through the JIT (``capability`` must be its own).
    """

    config: Any                 # a config of any kernel (tuner.kernels.kernel_of finds its kernel)
    problem: Problem
    capability: int
    via_jit: bool = False


# ------------------------------------------------------------------------ the compiler


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


def _units(task: CompileTask) -> list:
    from tuner.kernels import kernel_of

    return kernel_of(task.config).compile_units(task.config, task.problem)


def _unit_cache_path(unit, capability: int, via_jit: bool, source: bytes) -> Path:
    """Where one compile unit's figures are kept: configs that share a unit (the backward's dK/dV
    kernel under every dQ pass) compile it once."""
    import triton

    key = (BINARY_KEY, triton.__version__, capability, via_jit, unit.name, unit.signature,
           sorted(unit.constexprs.items()), sorted(unit.attrs.items()), sorted(unit.options.items()), unit.launch)
    # The device code alone: editing the launcher must not throw the cache away.
    return cache_dir() / f"{hashlib.sha256(repr(key).encode() + source).hexdigest()[:32]}.json"


def _unit_paths(task: CompileTask) -> list[tuple[object, Path]]:
    from tuner.kernels import kernel_of

    source = kernel_of(task.config).device_source().encode()
    return [(unit, _unit_cache_path(unit, task.capability, task.via_jit, source)) for unit in _units(task)]


# Bumped when what a cached ``CompileInfo`` holds changes, so cached entries are not reused.
BINARY_KEY = "binary+launch-grid+per-unit"


def cached_info(task: CompileTask) -> CompileInfo | None:
    """The task's figures if every one of its units is cached, else None."""
    infos = [_read_cache(path) for _, path in _unit_paths(task)]
    return None if any(info is None for info in infos) else CompileInfo.worst(infos)


def _read_cache(path: Path) -> CompileInfo | None:
    try:
        return CompileInfo.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):      # absent, or left half-written by an older version
        return None


def _jit_warmup(unit):
    """Compile a unit through the JIT's own path (``JITFunction.warmup``) for the GPU present.

    The binary lands in Triton's cache under the key a launch will look up, so the
    process that times the config loads it instead of compiling it again. (A
    ``triton.compile`` of the same source makes the same binary but files it under
    another key: Triton 3.6 misses it at launch.)
    """
    return unit.fn.warmup(*unit.warmup_args, grid=(1,), **unit.warmup_kwargs)


def _source_type(fn):
    """The compiler's source class for a JIT function: a Gluon kernel's own (it lowers to TTGIR), else ASTSource."""
    from triton.compiler import ASTSource

    if getattr(fn, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    return ASTSource


# A compiler killed by a signal: Triton reports ptxas's return code, negative (-2: SIGINT). A terminal's
# Ctrl-C reaches ptxas, which handles it, though the compile workers ignore it (CI saw a sweep's
# Ctrl-C store 32x16_w1_s2 as a compile_error, and later sweeps read it from the cache). It is no
# verdict on the config: the compile is tried again, and never cached.
KILLED_COMPILER = re.compile(r"failed with error code -\d+")
COMPILE_ATTEMPTS = 3


def killed(info: CompileInfo) -> bool:
    """Whether the compile failed because its compiler was killed by a signal (not for the config)."""
    return bool(info.error and KILLED_COMPILER.search(info.error))


def _compile_unit(unit, capability: int, via_jit: bool) -> CompileInfo:
    """The unit's figures, compiled again where its compiler was killed (:data:`KILLED_COMPILER`)."""
    for _ in range(COMPILE_ATTEMPTS):
        info = _compile_unit_once(unit, capability, via_jit)
        if not killed(info):
            break
    return info


def _compile_unit_once(unit, capability: int, via_jit: bool) -> CompileInfo:
    import triton
    from triton.backends.compiler import GPUTarget

    try:
        if via_jit:
            compiled = _jit_warmup(unit)
        else:
            source = _source_type(unit.fn)(unit.fn, unit.signature, unit.constexprs, unit.attrs)
            compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=unit.options)
    except Exception as exc:  # a config the compiler rejects is a result, not a crash
        # kept whole (ptxas's own lines are in it), for the store; logs show its headline
        return CompileInfo(error=f"{type(exc).__name__}: {str(exc).strip()}"[:MAX_ERROR_CHARS], name=unit.name,
                           num_warps=unit.num_warps)
    cubin = compiled.asm["cubin"]
    registers, stack, static_shared = read_resource_usage(cubin)
    # "Same binary" means same timings only with the same launch (the unit's ``launch``).
    launch = repr((compiled.metadata.shared, *unit.launch)).encode()
    binary = hashlib.sha256(cubin + launch).hexdigest()[:20]
    return CompileInfo(shared_bytes=int(compiled.metadata.shared), static_shared_bytes=static_shared,
                       registers=registers, spill_bytes=stack, binary=binary, name=unit.name,
                       num_warps=unit.num_warps)


def compile_config(task: CompileTask) -> CompileInfo:
    """Compile one task, unit by unit (each cached on its own), and return the worst of them.
    Must run where ``TRITON_INTERPRET`` is off; :class:`CompilePool` sees to that."""
    infos = []
    for unit, path in _unit_paths(task):
        info = _read_cache(path)
        if info is None:
            info = _compile_unit(unit, task.capability, task.via_jit)
            if not killed(info):               # a killed compiler is no verdict: the next run compiles it again
                path.parent.mkdir(parents=True, exist_ok=True)
                temporary = path.with_suffix(f".{os.getpid()}.tmp")
                temporary.write_text(json.dumps(asdict(info)))
                temporary.replace(path)        # atomic: a killed run never leaves half a file
        infos.append(info)
    return CompileInfo.worst(infos)


def compile_log() -> Path:
    """Where compiler output goes: the log beside the cache."""
    return cache_dir() / "compile-errors.log"


def quiet_compiler_pages(descriptors: tuple[int, ...] = (1, 2)) -> None:
    """Send this process's stdout and stderr (file descriptors 1 and 2, children's too; or those
    given) to :func:`compile_log`. A failing compile prints pages: Triton prints ptxas's reproducer (the
    whole PTX) to stdout, MLIR its diagnostics to stderr. The error itself is kept in full as
    the config's reason in the store, and the sweep's log gets one line per config. A worker's first
    call: the caches' folders are decided as its parent decided them (:func:`settle_caches`)."""
    with contextlib.suppress(CacheError):     # the parent checked them, and said what was wrong
        settle_caches()
    log = compile_log()
    log.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for target in descriptors:
        os.dup2(descriptor, target)
    os.close(descriptor)


COMPILE_NICENESS = 10      # added to a compile worker's niceness (0 is the default; 19 the lowest priority)


def worker_init(environment: dict[str, str] | None = None, sweep: int | None = None) -> None:
    """A pool worker's start (:class:`tuner.budget._pool.CompilePool`), at a lower priority: with
    a compiler on every core but two, the sweep's own process (Optuna, the store, each trial's
    hand-off) and the GPU worker (each launch) waited for a core and left the GPU idle (the trace,
    docs/results/2026-12-01-h200-tuner-speed.md, round 4). ``environment``: the pool's process's,
    taken where it made the pool, in place of the one a process forked by the compile server inherits
    (the server's, from when it began: :func:`tuner.spawn.compile_context`). ``sweep``: that
    process's pid, whose SIGTERM ends this one (:func:`tuner.spawn.ignore_interrupts`)."""
    ignore_interrupts(sweep)    # Ctrl-C is the sweep's to handle; it closes the pool
    if environment is not None:
        os.environ.clear()
        os.environ.update(environment)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(COMPILE_NICENESS)
    quiet_compiler_pages()


def import_compiler() -> None:
    """A pool worker's warm-up (:meth:`tuner.budget._pool.CompilePool.start`): what every compile imports."""
    import triton.compiler  # noqa: F401

    import tuner.kernels  # noqa: F401


def compile_tasks(config, variants: Sequence[Problem], target_capability: int,
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
