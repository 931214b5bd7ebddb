"""Will a config run on the target GPU? Decided before anything is timed, without a GPU.

Two answers, which the tests hold to each other:

1. :func:`model_smem_bytes`, an analytic model of the kernel's shared memory per
   target architecture (formula below).
2. :func:`compile_config`, the exact figure: the real kernel compiled for the target
   by ``triton.compile`` on the CPU, specialised as the JIT specialises a launch
   (``kernel.compile_source``), with registers and spills read from the cubin by the
   ``cuobjdump`` that ships inside Triton. Results are cached on disk.

:func:`check` turns them into a :class:`BudgetResult` with a verdict and a reason.

Shared-memory model (e = element bytes, Q = BLOCK_M*D*e, K = V = BLOCK_N*D*e;
s = num_stages; only the K and V loads of the key loop are multi-buffered, Q is
loaded once and kept in shared memory as a dot operand):

================================  ==========================  ================
path                              s >= 2                      s = 1
================================  ==========================  ================
mma.sync + cp.async (sm_8x, 120)  (s-1)*(K+V) + Q + C         Q + K + C
wgmma (sm_90, sm_100)             s*(K+V) + Q                 Q + K + V
================================  ==========================  ================

C = BLOCK_M*BLOCK_N*e, the P tile passed through shared memory on its way to being a
dot operand, when num_warps >= 2 and BLOCK_M < D; else 0 (:func:`_conversion_scratch`).
Hopper takes the wgmma path only with num_warps a multiple of 4 and BLOCK_M >= 64;
otherwise it falls back to the mma.sync row. The sm_100 row is unchecked.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, Sequence

from tuner.gpus import GpuSpec, valid_names
from tuner.space import Config, SearchSpace, restriction

__all__ = [
    "COMPILE_ERROR", "DTYPE_BYTES", "FITS", "INVALID", "LAUNCHABLE", "OVER_REGISTERS", "OVER_SMEM", "SPILLS",
    "BudgetResult", "CompileInfo", "CompilePool", "Problem", "build_parser", "cache_dir", "check", "check_many",
    "compile_config", "compile_many", "main", "model_smem_bytes", "read_resource_usage", "smem_limit", "specialisation",
    "uses_wgmma", "verdict",
]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# Verdicts. A config is timed only if its verdict is launchable.
FITS = "fits"
SPILLS = "spills"                  # launches, but spills registers to local memory
OVER_SMEM = "over_smem"
OVER_REGISTERS = "over_registers"
INVALID = "invalid"
COMPILE_ERROR = "compile_error"
LAUNCHABLE = (FITS, SPILLS)


@dataclass(frozen=True)
class Problem:
    """The attention problem a config is compiled for (the JIT specialises on it)."""

    batch: int = 4
    heads: int = 8
    n_q: int = 4096
    n_k: int = 4096
    head_dim: int = 64
    dtype: str = "bf16"
    causal: bool = False

    @property
    def torch_dtype(self):
        """The torch dtype named by ``dtype`` (the inverse of ``kernel.DTYPES``)."""
        from kernel import DTYPES

        return {name: dtype for dtype, name in DTYPES.items()}[self.dtype]

    @property
    def label(self) -> str:
        return (f"B{self.batch} H{self.heads} Nq{self.n_q} Nk{self.n_k} D{self.head_dim} "
                f"{self.dtype}{' causal' if self.causal else ''}")


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
class BudgetResult:
    """The verdict on one config for one target and problem."""

    config: Config
    target: str
    verdict: str
    reason: str
    model_bytes: int
    limit_bytes: int
    compiled_bytes: int | None = None
    registers: int | None = None
    spill_bytes: int | None = None

    @property
    def launchable(self) -> bool:
        return self.verdict in LAUNCHABLE

    def as_row(self) -> dict:
        row = asdict(self)
        row.update(row.pop("config"))
        return row


# ------------------------------------------------------------------------------- model


def uses_wgmma(config: Config, gpu: GpuSpec) -> bool:
    """Whether Triton lowers this config's dots to Hopper's wgmma."""
    return 90 <= gpu.capability < 120 and config.num_warps % 4 == 0 and config.block_m >= 64


def _conversion_scratch(config: Config, head_dim: int, elem: int) -> int:
    """Scratch for layout conversions that coexist with the pipeline buffers."""
    if config.num_warps == 1 or config.block_m >= head_dim:
        return 0
    return config.block_m * config.block_n * elem


def model_smem_bytes(config: Config, head_dim: int, dtype: str, gpu: GpuSpec) -> int:
    """Predicted dynamic shared memory of the kernel, in bytes (formula in the module doc)."""
    elem = DTYPE_BYTES[dtype]
    q_bytes = config.block_m * head_dim * elem
    kv_bytes = config.block_n * head_dim * elem
    if uses_wgmma(config, gpu):
        if config.num_stages == 1:
            return q_bytes + 2 * kv_bytes
        return config.num_stages * 2 * kv_bytes + q_bytes
    scratch = _conversion_scratch(config, head_dim, elem)
    if config.num_stages == 1:
        return q_bytes + kv_bytes + scratch
    return (config.num_stages - 1) * 2 * kv_bytes + q_bytes + scratch


# ---------------------------------------------------------------------------- compiler


def cache_dir() -> Path:
    """Where compile results are kept: ``$FA2_TUNER_CACHE`` or ``~/.cache/fa2-tuner``."""
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


def _cache_key(config: Config, problem: Problem, capability: int, via_jit: bool = False) -> str:
    import triton

    from kernel import COMPILE_OPTIONS, flash_fwd

    signature, constexprs, attrs = _compile_inputs(config, problem)

    # The device code alone: editing the launcher must not throw the cache away.
    source = "".join(inspect.getsource(f.fn) for f in (flash_fwd._attend_tiles, flash_fwd._flash_fwd_kernel)).encode()
    blob = repr((triton.__version__, capability, via_jit, config, signature, sorted(constexprs.items()),
                 sorted(attrs.items()), sorted(COMPILE_OPTIONS.items()))).encode() + source
    return hashlib.sha256(blob).hexdigest()[:32]


def _cache_path(config: Config, problem: Problem, capability: int, via_jit: bool = False) -> Path:
    return cache_dir() / f"{_cache_key(config, problem, capability, via_jit)}.json"


def _read_cache(path: Path) -> CompileInfo | None:
    return CompileInfo(**json.loads(path.read_text())) if path.exists() else None


def _compile_inputs(config: Config, problem: Problem):
    """``(signature, constexprs, attrs)`` as the JIT would build them for this problem."""
    from kernel import LaunchShape, compile_source

    shape = LaunchShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
    return compile_source(problem.torch_dtype, shape, problem.causal, config.block_m, config.block_n)


def specialisation(problem: Problem) -> str:
    """What the JIT specialises a launch of this problem on (dtype, head dim, causal,
    which integers are divisible by 16 or equal to 1): problems with equal keys run
    the same binary for a given config."""
    return repr(_compile_inputs(Config(16, 16, 4, 1), problem))


def _jit_warmup(config: Config, problem: Problem):
    """Compile through the JIT's own path (``JITFunction.warmup``) for the GPU present.

    The binary lands in Triton's cache under the key a launch will look up, so the
    process that times the config loads it instead of compiling it again. (A
    ``triton.compile`` of the same source, as the cross-compiler does, makes the same
    binary but files it under another key: Triton 3.6 misses it at launch.)
    """
    import torch

    from kernel import COMPILE_OPTIONS, LaunchShape, kernel_arguments
    from kernel.flash_fwd import _flash_fwd_kernel

    shape = LaunchShape.contiguous(problem.batch, problem.heads, problem.n_q, problem.n_k, problem.head_dim)
    dtype = problem.torch_dtype
    pointers = (dtype, dtype, dtype, dtype, torch.float32)      # warmup takes dtypes for tensors
    args = [value for _, value in kernel_arguments(pointers, shape, problem.causal)]
    return _flash_fwd_kernel.warmup(*args, HEAD_DIM=problem.head_dim, BLOCK_M=config.block_m,
                                    BLOCK_N=config.block_n, CAUSAL=bool(problem.causal), grid=(1,),
                                    num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS)


def _compile_uncached(config: Config, problem: Problem, capability: int, via_jit: bool = False) -> CompileInfo:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel import COMPILE_OPTIONS
    from kernel.flash_fwd import _flash_fwd_kernel

    signature, constexprs, attrs = _compile_inputs(config, problem)
    try:
        if via_jit:
            compiled = _jit_warmup(config, problem)
        else:
            compiled = triton.compile(
                ASTSource(_flash_fwd_kernel, signature, constexprs, attrs),
                target=GPUTarget("cuda", capability, 32),
                options=dict(num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS),
            )
    except Exception as exc:  # a config the compiler rejects is a result, not a crash
        message = str(exc).strip().splitlines()
        return CompileInfo(error=f"{type(exc).__name__}: {message[-1] if message else ''}"[:500])
    cubin = compiled.asm["cubin"]
    registers, stack, static_shared = read_resource_usage(cubin)
    binary = hashlib.sha256(cubin + repr((compiled.metadata.shared, config.num_warps)).encode()).hexdigest()[:20]
    return CompileInfo(shared_bytes=int(compiled.metadata.shared), static_shared_bytes=static_shared,
                       registers=registers, spill_bytes=stack, binary=binary)


def compile_config(config: Config, problem: Problem, capability: int, via_jit: bool = False) -> CompileInfo:
    """Compile the kernel for ``sm_<capability>`` on this machine (no GPU needed), cached.

    With ``via_jit`` it compiles for the GPU present (``capability`` must be its own)
    through the JIT, which also fills Triton's cache for the launch (:func:`_jit_warmup`).
    Must run where ``TRITON_INTERPRET`` is off; :func:`compile_many` sees to that.
    """
    path = _cache_path(config, problem, capability, via_jit)
    cached = _read_cache(path)
    if cached is not None:
        return cached
    info = _compile_uncached(config, problem, capability, via_jit)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(info)))
    temporary.replace(path)            # atomic: a killed run never leaves half a file
    return info


def _worker_init() -> None:
    # The interpreter replaces @triton.jit functions, which the compiler cannot take.
    os.environ.pop("TRITON_INTERPRET", None)
    # A failing compile prints pages of PTX "reproducer" to stderr; its last line is kept
    # as the config's reason, the pages go to a log beside the cache.
    log = cache_dir() / "compile-errors.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)


def _compile_task(task):
    return compile_config(*task)


class CompilePool:
    """Cross-compiles on many cores in fresh (spawned) processes, kept for many batches.

    Spawn, not fork: the parent may hold a CUDA context, which fork would corrupt.
    Cache hits are answered at once, without a worker.

    Args:
        jobs: worker processes; default every core.
    """

    def __init__(self, jobs: int | None = None):
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self._executor: ProcessPoolExecutor | None = None

    def submit(self, task: tuple[Config, Problem, int]) -> Future:
        """Compile (config, problem, capability); the future's result is a :class:`CompileInfo`."""
        cached = _read_cache(_cache_path(*task))
        if cached is not None:
            done: Future = Future()
            done.set_result(cached)
            return done
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.jobs, mp_context=get_context("spawn"),
                                                 initializer=_worker_init)
        return self._executor.submit(_compile_task, task)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def compile_many(tasks: Sequence[tuple[Config, Problem, int]], jobs: int | None = None,
                 progress=None, pool: CompilePool | None = None) -> list[CompileInfo]:
    """Compile many (config, problem, capability) on all cores (see :class:`CompilePool`).

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


# ----------------------------------------------------------------------------- verdict


def smem_limit(info: CompileInfo | None, gpu: GpuSpec) -> int:
    """Dynamic shared memory a launch may ask for: the opt-in limit less the static part."""
    static = info.static_shared_bytes if info else 0
    return gpu.smem_per_block_optin - static


def verdict(config: Config, problem: Problem, gpu: GpuSpec, info: CompileInfo | None) -> BudgetResult:
    """Judge one config; ``info`` None means the model alone decides (no compile)."""
    model = model_smem_bytes(config, problem.head_dim, problem.dtype, gpu)
    limit = smem_limit(info, gpu)
    base = dict(config=config, target=gpu.name, model_bytes=model, limit_bytes=limit)
    why_not = restriction(config, problem.head_dim)
    if why_not:
        kind = OVER_REGISTERS if why_not.startswith("registers") else INVALID
        return BudgetResult(verdict=kind, reason=why_not, **base)
    if info is None:
        if model > limit:
            return BudgetResult(verdict=OVER_SMEM, reason=f"model needs {model} B > {limit} B on {gpu.name}", **base)
        return BudgetResult(verdict=FITS, reason=f"model {model} B <= {limit} B", **base)
    compiled = dict(compiled_bytes=info.shared_bytes, registers=info.registers, spill_bytes=info.spill_bytes)
    if info.error:
        return BudgetResult(verdict=COMPILE_ERROR, reason=info.error, **base, **compiled)
    if info.shared_bytes > limit:
        return BudgetResult(verdict=OVER_SMEM, reason=f"needs {info.shared_bytes} B > {limit} B on {gpu.name}",
                            **base, **compiled)
    if info.registers * 32 * config.num_warps > gpu.regs_per_sm:
        return BudgetResult(verdict=OVER_REGISTERS, reason=(
            f"{info.registers} registers x {32 * config.num_warps} threads > {gpu.regs_per_sm} on {gpu.name}"),
            **base, **compiled)
    if info.spill_bytes:
        return BudgetResult(verdict=SPILLS, reason=f"spills {info.spill_bytes} B per thread at {info.registers} registers",
                            **base, **compiled)
    return BudgetResult(verdict=FITS, reason=f"{info.shared_bytes} B <= {limit} B, {info.registers} registers",
                        **base, **compiled)


def check_many(configs: Iterable[Config], problem: Problem, gpu: GpuSpec, compile: bool = True,
               jobs: int | None = None, progress=None, pool: CompilePool | None = None) -> list[BudgetResult]:
    """Judge many configs; the ones the restrictions reject are never compiled."""
    configs = list(configs)
    to_compile = [c for c in configs if restriction(c, problem.head_dim) is None] if compile else []
    infos = dict(zip(to_compile, compile_many([(c, problem, gpu.capability) for c in to_compile], jobs, progress,
                                              pool)))
    return [verdict(c, problem, gpu, infos.get(c)) for c in configs]


def check(config: Config, problem: Problem, gpu: GpuSpec, compile: bool = True) -> BudgetResult:
    """Judge one config (see :func:`check_many`)."""
    return check_many([config], problem, gpu, compile)[0]


# --------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.budget",
        description="Which kernel configs fit a target GPU's shared memory and registers, "
                    "found by compiling for that target on this machine (no GPU needed).",
        epilog="examples:\n"
               "  python -m tuner.budget --gpu sm_89\n"
               "  python -m tuner.budget --gpu rtx4090 --head-dim 128 --causal\n"
               "  python -m tuner.budget --gpu sm_90 --config 128,128,8,3 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--gpu", required=True, help=f"target: {', '.join(valid_names())}")
    parser.add_argument("--head-dim", type=int, default=64, help="head dim D (default 64)")
    parser.add_argument("--dtype", default="bf16", help="fp32, fp16 or bf16 (default bf16)")
    parser.add_argument("--causal", action="store_true", help="compile the causal variant")
    parser.add_argument("--config", action="append", default=[],
                        help="BM,BN,WARPS,STAGES to check instead of the default space (repeatable)")
    parser.add_argument("--model-only", action="store_true", help="use the analytic model, compile nothing")
    parser.add_argument("--jobs", type=int, default=None, help="compile processes (default: every core)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return parser


def _usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from kernel import HEAD_DIMS

    try:
        gpu = GpuSpec.from_name(args.gpu)
    except (ValueError, RuntimeError) as exc:
        return _usage_error(parser, f"--gpu: {exc}")
    if args.head_dim not in HEAD_DIMS:
        return _usage_error(parser, f"--head-dim {args.head_dim} is not supported; use one of {HEAD_DIMS}")
    if args.dtype not in DTYPE_BYTES:
        return _usage_error(parser, f"--dtype {args.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    try:
        configs = [Config.parse(text) for text in args.config] or SearchSpace().all_configs()
    except ValueError as exc:
        return _usage_error(parser, f"--config: {exc}")
    problem = Problem(head_dim=args.head_dim, dtype=args.dtype, causal=args.causal)

    def progress(done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty() or os.environ.get("FA2_TUNER_PROGRESS"):
            print(f"\rcompiling for {gpu.name}: {done}/{total}", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)

    results = check_many(configs, problem, gpu, compile=not args.model_only, jobs=args.jobs, progress=progress)
    fitting = sum(r.launchable for r in results)
    if args.json:
        print(json.dumps({"target": gpu.name, "problem": asdict(problem), "fits": fitting,
                          "total": len(results), "results": [r.as_row() for r in results]}, indent=1))
        return 0
    print(f"target {gpu.name} ({gpu.card}): opt-in shared memory {gpu.smem_per_block_optin} B per block; "
          f"problem {problem.label}")
    print(f"{'config':>16} {'model B':>8} {'compiled B':>10} {'limit B':>8} {'regs':>5} {'spill':>6}  verdict")
    for r in results:
        print(f"{r.config.key:>16} {r.model_bytes:>8} {_blank(r.compiled_bytes):>10} {r.limit_bytes:>8} "
              f"{_blank(r.registers):>5} {_blank(r.spill_bytes):>6}  {r.verdict}: {r.reason}")
    counts: dict[str, int] = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print(f"{fitting} of {len(results)} configs can launch on {gpu.name} "
          f"({', '.join(f'{v} {n}' for v, n in sorted(counts.items()))})")
    return 0


def _blank(value) -> str:
    return "" if value is None else str(value)

