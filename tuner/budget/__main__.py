"""``python -m tuner.budget``: which configs of a kernel fit a target GPU (no GPU needed)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict

from tuner import kernels
from tuner.budget._cache import CacheError, settle_caches
from tuner.budget._pool import MAX_JOBS
from tuner.budget._verdict import check_many
from tuner.formatting import fmt, headline, nonempty, usage_error
from tuner.gpus import GpuSpec, valid_names
from tuner.problem import DTYPE_BYTES, HEAD_DIMS, Problem
from tuner.status import Status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.budget",
        description="Which kernel configs fit a target GPU's shared memory and registers, "
                    "found by compiling for that target on this machine (no GPU needed).",
        epilog="examples:\n"
               "  python -m tuner.budget --gpu sm_89\n"
               "  python -m tuner.budget --gpu rtx4090 --head-dim 128 --causal\n"
               "  python -m tuner.budget --gpu sm_90 --config 128,128,8,3 --json\n"
               "  python -m tuner.budget --gpu sm_90 --kernel triton --pass fwd --config 128x128_w8_s3_tma",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--gpu", required=True, help=f"target: {', '.join(valid_names())}")
    parser.add_argument("--head-dim", type=int, default=64, help=f"head dim D, one of {HEAD_DIMS} (default 64)")
    parser.add_argument("--dtype", default="bf16", help="fp32, fp16 or bf16 (default bf16)")
    parser.add_argument("--causal", action="store_true", help="compile the causal variant")
    parser.add_argument("--config", action="append", default=[],
                        help="BM,BN,WARPS,STAGES (or a config key) to check instead of the default space (repeatable)")
    parser.add_argument("--kernel", default=kernels.DEFAULT_KERNEL, type=nonempty,
                        help=f"the kernel (default {kernels.DEFAULT_KERNEL}; or a module path exposing KERNEL)")
    parser.add_argument("--pass", dest="pass_", type=nonempty,
                        help="its pass: fwd, bwd, fwd+bwd (default: the kernel's)")
    parser.add_argument("--model-only", action="store_true", help="use the analytic model, compile nothing")
    parser.add_argument("--jobs", type=int, default=None, help="compile processes (default: every core)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return parser


# More compiles than this are announced before they start (each is seconds of a core the first time).
MANY_COMPILES = 20


def _warn_of_compiles(kernel, configs: list, problem: Problem, gpu: GpuSpec) -> None:
    """Say on stderr, before it starts, that a run is about to compile many configs on this CPU."""
    to_compile = sum(1 for c in configs if kernel.restriction(c, problem.head_dim) is None
                     and kernel.budget_rule(c, gpu) is None)
    if to_compile > MANY_COMPILES:
        print(f"warning: compiling {to_compile} of {len(configs)} configs for {gpu.name} on this machine's CPU (the "
              "rest fail the restrictions or the knob rules): minutes on a few cores the first time, cached after; "
              "--config BM,BN,WARPS,STAGES judges one config, --model-only compiles nothing", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        gpu = GpuSpec.from_name(args.gpu)
    except (ValueError, RuntimeError) as exc:
        return usage_error(parser, f"--gpu: {exc}")
    if args.head_dim not in HEAD_DIMS:
        return usage_error(parser, f"--head-dim {args.head_dim} is not supported; use one of {HEAD_DIMS}")
    if args.dtype not in DTYPE_BYTES:
        return usage_error(parser, f"--dtype {args.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        return usage_error(parser, f"--jobs {args.jobs} must be 1 to {MAX_JOBS} (compile processes)")
    try:
        kernel = kernels.get(args.kernel, args.pass_)
    except kernels.KernelNotFound as exc:       # the flag the lookup failed on: --kernel, or --pass
        return usage_error(parser, f"--{exc.field}: {exc}")
    try:      # a config given is judged as given; the default space holds only the knobs the target can run
        given = [kernel.config_type.parse(text) for text in args.config]
        configs = given or kernel.space().runnable_on(gpu).all_configs()
    except ValueError as exc:
        return usage_error(parser, f"--config: {exc}")
    problem = Problem(head_dim=args.head_dim, dtype=args.dtype, causal=args.causal)

    def progress(done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty() or os.environ.get("FA2_TUNER_PROGRESS"):
            print(f"\rcompiling for {gpu.name}: {done}/{total}", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)

    if not args.model_only:
        try:
            warning = settle_caches()         # before any compile worker starts
        except CacheError as exc:
            return usage_error(parser, str(exc))
        if warning:
            print(warning, file=sys.stderr)
        _warn_of_compiles(kernel, configs, problem, gpu)
    results = check_many(configs, problem, gpu, compile=not args.model_only, jobs=args.jobs, progress=progress)
    fitting = sum(r.launchable for r in results)
    if args.json:
        print(json.dumps({"target": gpu.name, "problem": asdict(problem), "fits": fitting,
                          "total": len(results), "results": [r.as_row() for r in results]}, indent=1))
    else:
        _print_table(results, gpu, problem)
    # A config given that the kernel cannot take at all (a field outside its values, a combination it refuses) is a
    # bad input: every config is judged above, then the command ends as any refused argument does.
    invalid = [(text, r) for text, r in zip(args.config, results) if r.verdict == Status.INVALID]
    if invalid:
        return usage_error(parser, "; ".join(f"--config {text}: {r.reason}" for text, r in invalid))
    return 0


def _print_table(results: list, gpu: GpuSpec, problem: Problem) -> None:
    """One line per config, the counts by verdict, and what the limit column is where it differs from the opt-in."""
    fitting = sum(r.launchable for r in results)
    reserved = gpu.smem_per_sm - gpu.smem_per_block_optin
    print(f"target {gpu.name} ({gpu.card}): opt-in shared memory {gpu.smem_per_block_optin} B per block "
          f"({gpu.smem_per_sm} B per SM less {reserved} B the hardware reserves per block); problem {problem.label}")
    print(f"{'config':>16} {'model B':>8} {'compiled B':>10} {'limit B':>8} {'regs':>5} {'spill':>6}  verdict")
    for r in results:
        # one line per config: a compile error's headline (--json has it whole), the verdict said once
        reason = headline(r.reason, 200).removeprefix(f"{r.verdict}: ")
        print(f"{r.config.key:>16} {r.model_bytes:>8} {fmt(r.compiled_bytes, missing=''):>10} {r.limit_bytes:>8} "
              f"{fmt(r.registers, missing=''):>5} {fmt(r.spill_bytes, missing=''):>6}  {r.verdict}: {reason}")
    counts: dict[str, int] = {}
    for r in results:
        counts[str(r.verdict)] = counts.get(str(r.verdict), 0) + 1
    static = sorted({gpu.smem_per_block_optin - r.limit_bytes for r in results} - {0})
    if static:
        print(f"limit B: the dynamic shared memory a launch may ask for, the opt-in {gpu.smem_per_block_optin} B "
              f"less the static shared memory the compiled cubin declares itself ({' or '.join(map(str, static))} B "
              f"here, cuobjdump's SHARED)")
    print(f"{fitting} of {len(results)} configs can launch on {gpu.name} "
          f"({', '.join(f'{v} {n}' for v, n in sorted(counts.items()))})")

if __name__ == "__main__":
    from tuner.console import run

    run(main)
