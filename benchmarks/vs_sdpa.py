"""Benchmark: the kernel against PyTorch SDPA's flash and cuDNN backends, same run.

    python -m benchmarks.vs_sdpa               # the article's table plus D=128 and long N
    python -m benchmarks.vs_sdpa --n 4096 --head-dim 64 --markdown docs/results/x.md

GPU times come from CUDA-graph replays over input sets that do not fit in L2
(:mod:`kernel.measure.timing`), the calls are the tuner's own (:mod:`tuner.kernels.triton_fwd`);
"host µs" is the time a call takes on the CPU, measured as the
rate at which back-to-back calls are enqueued. Speed is reported as a ratio to SDPA
measured in the same process on the same inputs: absolute times drift between runs
and machines, ratios much less.
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks._report import write_report
from kernel.checks import DTYPES as DTYPE_NAMES
from kernel.measure.timing import (
    SDPA_BACKENDS,
    environment,
    environment_line,
    gpu_time,
    host_us,
    input_sets,
    time_backends,
    warm_gpu,
)
from tuner.formatting import fmt
from tuner.kernels.triton_fwd import KERNEL, FwdConfig
from tuner.problem import Problem

# Hand-picked candidates for --pick: large tiles, the warp counts wgmma likes.
CANDIDATES = [dict(block_m=bm, block_n=bn, num_warps=w, num_stages=s)
              for bm in (64, 128) for bn in (64, 128) for w in (4, 8) for s in (2, 3)]


def make_sets(problem: Problem) -> list[dict]:
    """Random tensors of the forward (q, k, v, out, lse), as many sets as keep the timed loop out of L2."""
    per_set = 4 * problem.batch * problem.heads * problem.n_q * problem.head_dim * torch.finfo(
        problem.torch_dtype).bits // 8
    return [KERNEL.inputs(problem, "cuda") for _ in range(input_sets(per_set))]


def set_calls(sets: list[dict], problem: Problem, config: FwdConfig) -> list:
    """One call of the kernel per set of :func:`make_sets`, for the timers (the sweep's own launch)."""
    return [KERNEL.call(config, tensors, problem) for tensors in sets]


def _time_config(sets, problem: Problem, config: dict) -> tuple[float, str]:
    timing = gpu_time(set_calls(sets, problem, FwdConfig(**config)))
    return timing.ms, timing.method


def bench_case(batch, heads, n, head_dim, causal, dtype=torch.bfloat16, config=None, pick=False) -> dict:
    """Time the kernel and SDPA's backends on one shape; returns a result row.

    With ``pick``, every config in CANDIDATES is timed and the fastest is reported.
    """
    from kernel import default_config

    problem = Problem(batch, heads, n, n, head_dim, DTYPE_NAMES[dtype], causal)
    sets = make_sets(problem)
    tried = {}
    for candidate in (CANDIDATES if pick else [config or default_config(head_dim, causal)]):
        try:
            tried[tuple(candidate.items())] = _time_config(sets, problem, candidate)
        except Exception as exc:  # out of resources on this GPU: not a candidate here
            print(f"  skip {candidate}: {type(exc).__name__}", file=sys.stderr)
    best = min(tried, key=lambda c: tried[c][0])
    config = dict(best)             # tiles, launch options and any knobs, as timed
    ours, method = tried[best]
    ours_host = host_us(KERNEL.call(FwdConfig(**config), sets[0], problem, allocate=True))   # the user's call
    sdpa = time_backends(KERNEL.baselines(sets, problem))
    flops = KERNEL.flops(problem)
    row = dict(B=batch, H=heads, N=n, D=head_dim, causal=causal, dtype=str(dtype).replace("torch.", ""),
               config=config, ours_ms=ours, ours_tflops=flops / ours * 1e-9, ours_host_us=ours_host,
               timer=method, input_sets=len(sets), candidates_timed=len(tried))
    for backend, result in sdpa.items():
        ms = result["ms"]
        row[f"{backend}_ms"] = ms
        row[f"{backend}_host_us"] = result["host_us"]
        row[f"{backend}_tflops"] = flops / ms * 1e-9 if ms else None
        row[f"vs_{backend}"] = ms / ours if ms else None          # > 1: we are faster
    return row


DEFAULT_CASES = ([(64, n, c) for n in (512, 1024, 2048, 4096) for c in (False, True)]
                 + [(128, n, c) for n in (512, 1024, 2048, 4096) for c in (False, True)]
                 + [(d, n, c) for d in (64, 128) for n in (8192, 16384) for c in (False, True)])


def _knobs(config: dict) -> str:
    """The knobs a config sets, for the table (", tma, persistent=2"), or ""."""
    set_knobs = [name if value is True else f"{name}={value}" for name, value in config.items()
                 if name not in ("block_m", "block_n", "num_warps", "num_stages") and value not in (False, 0, None)]
    return "".join(f", {k}" for k in set_knobs)


def table(rows: list[dict], env: dict[str, str]) -> str:
    """A markdown table of result rows, with the environment above it."""
    lines = [environment_line(env), "",
             "| D | N | causal | config (BMxBN, warps, stages, knobs) | ours ms | ours TFLOP/s | flash ms | cuDNN ms "
             "| cuDNN TFLOP/s | x SDPA-flash | x SDPA-cuDNN | host µs/call: ours | flash | cuDNN |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["config"]
        lines.append(
            f"| {r['D']} | {r['N']} | {'yes' if r['causal'] else 'no'} | "
            f"{c['block_m']}x{c['block_n']}, {c['num_warps']}, {c['num_stages']}{_knobs(c)} | {r['ours_ms']:.4f} | "
            f"{r['ours_tflops']:.0f} | {fmt(r['flash_ms'], '.4f')} | {fmt(r['cudnn_ms'], '.4f')} | "
            f"{fmt(r['cudnn_tflops'], '.0f')} | {fmt(r['vs_flash'], '.2f')} | {fmt(r['vs_cudnn'], '.2f')} | "
            f"{r['ours_host_us']:.1f} | {fmt(r['flash_host_us'], '.1f')} | {fmt(r['cudnn_host_us'], '.1f')} |")
    ran = [b for b in SDPA_BACKENDS if any(r[f"{b}_ms"] for r in rows)]
    timers = sorted({r["timer"] for r in rows})
    lines += ["", f"SDPA backends that ran: {', '.join(ran) or 'none'}. x SDPA = SDPA time / our time "
                  f"(above 1: faster than SDPA). GPU times: {', '.join(timers)} over input sets that do not fit "
                  "in L2; host µs: back-to-back calls enqueued before one sync (ours allocates its outputs, as a "
                  "user's call does)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vs_sdpa",
        description="Time the FA2 kernel against SDPA (flash and cuDNN backends) in one run, bf16, B=4, H=8.",
        epilog="examples:\n  python -m benchmarks.vs_sdpa\n  python -m benchmarks.vs_sdpa --head-dim 64 --n 4096 "
               "--config 128,64,8,3 --json out.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dim", type=int, action="append", help="only these head dims (repeatable)")
    parser.add_argument("--n", type=int, action="append", help="only these sequence lengths (repeatable)")
    parser.add_argument("--config", help="BM,BN,WARPS,STAGES for every row instead of the defaults")
    parser.add_argument("--pick", action="store_true",
                        help="time the hand-picked CANDIDATES per row and report the fastest")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--markdown", help="also write the table here")
    args = parser.parse_args(argv)
    config = None
    if args.config:
        try:
            bm, bn, warps, stages = (int(x) for x in args.config.split(","))
        except ValueError:
            parser.print_usage(sys.stderr)
            print(f"{parser.prog}: error: --config {args.config!r} must be BM,BN,WARPS,STAGES", file=sys.stderr)
            return 2
        config = dict(block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
    from kernel.checks import HEAD_DIMS

    bad = [f"--head-dim {d} is not one of {HEAD_DIMS}" for d in args.head_dim or [] if d not in HEAD_DIMS]
    bad += [f"--n {n} must be a positive length" for n in args.n or [] if n < 1]
    if bad:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {bad[0]}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: no CUDA GPU is visible here, and this times the kernel against SDPA on one. "
              "Without a GPU, run the tests (README) or `python -m tuner.budget --gpu sm_89`.", file=sys.stderr)
        return 2
    cases = [(d, n, c) for d, n, c in DEFAULT_CASES
             if (not args.head_dim or d in args.head_dim) and (not args.n or n in args.n)]
    env = environment()
    warm_gpu()
    rows = []
    for d, n, c in cases:
        rows.append(bench_case(4, 8, n, d, c, config=config, pick=args.pick))
        r = rows[-1]
        print(f"D={d} N={n} causal={c}: ours {r['ours_ms']:.4f} ms ({r['ours_host_us']:.1f} µs host), "
              f"x flash {fmt(r['vs_flash'], '.2f')}, x cuDNN {fmt(r['vs_cudnn'], '.2f')}", flush=True)
    text = table(rows, env)
    print(text)
    write_report(args.markdown, text + "\n", args.json, {"env": env, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
