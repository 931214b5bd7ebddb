"""Benchmark: the backward against SDPA's (flash and cuDNN backends), in the same run.

    python -m benchmarks.bwd                              # the default config, B4 H8 N4096, D 64 and 128
    python -m benchmarks.bwd --explore --jobs 14 --json out.json --markdown out.md
    python -m benchmarks.bwd --knobs --jobs 14          # persistent grids and maxnreg on the defaults

Ours is :func:`kernel.flash_attn_bwd` (delta, the dK/dV kernel and dQ, from the forward's
``out`` and ``lse``); SDPA's is ``torch.autograd.grad`` of SDPA's forward, kept for the
purpose, so both exclude the forward. GPU times come from CUDA-graph replays over input
sets that do not fit in L2 (:mod:`kernel.measure.timing`). TFLOP/s counts 2.5x the forward's
FLOPs. ``--explore`` times a grid of configs per shape (compiled first on ``--jobs``
processes), each checked against a float32 reference within 3x SDPA-flash's own error
before it is timed; ``--knobs`` does the same for the two knobs the explorations left out
(persistent grids, ``maxnreg``) and wider dK/dV tiles at D=128, on each shape's default.
``fwd+bwd`` times the default forward then the backward against SDPA's forward and backward.
Every shape also gets its best config's time per kernel (``torch.profiler``).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

import torch

from benchmarks._report import write_report
from kernel.triton.bwd import BwdConfig
from tuner.formatting import fmt
from tuner.kernels.triton_bwd import KERNEL as BACKWARD, STEP, from_kernel
from tuner.problem import Problem

TILES_M, TILES_N, WARPS, STAGES = (16, 32, 64), (64, 128), (4, 8), (1, 2, 3)
TILES_Q = (32, 64, 128)
REGISTER_ESTIMATE_LIMIT = 200   # fp32 accumulators and score tiles per thread; above it, ptxas spills


def _fits(rows: int, cols: int, head_dim: int, accumulators: int, warps: int) -> bool:
    """Accumulators [rows, D] and two score tiles [rows, cols] in registers, and enough mma work per warp."""
    threads = 32 * warps
    return ((accumulators * rows * head_dim + 2 * rows * cols) // threads <= REGISTER_ESTIMATE_LIMIT
            and rows * cols >= 16 * threads)


def explore_kv_configs(head_dim: int, hopper: bool, base: BwdConfig) -> list[BwdConfig]:
    """``--explore``'s first phase: the dK/dV kernel's tiles, warps, stages and the dQ modes, the dQ
    pass held at ``base``'s (both passes run one after the other, so their times add up)."""
    configs = []
    for bm, bn, warps, stages in itertools.product(TILES_M, TILES_N, WARPS, STAGES):
        if not _fits(bn, bm, head_dim, 2, warps):
            continue
        for mode, tma in itertools.product(("pass", "tma") if hopper else ("pass", "atomic"),
                                           (False, True) if hopper else (False,)):
            configs.append(replace(base, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages, dq_mode=mode,
                                   tma=tma))
    return configs


def explore_q_configs(head_dim: int, base: BwdConfig) -> list[BwdConfig]:
    """``--explore``'s second phase: the dQ pass's tiles, warps and stages, on the best dK/dV kernel."""
    return [replace(base, block_m_q=bm, block_n_q=bn, num_warps_q=warps, num_stages_q=stages)
            for bm, bn, warps, stages in itertools.product(TILES_Q, TILES_Q, WARPS, STAGES)
            if _fits(bm, bn, head_dim, 1, warps)]


def knob_configs(head_dim: int, base: BwdConfig) -> list[BwdConfig]:
    """``--knobs``: programs per SM of the dK/dV kernel x register caps on ``base``, the dQ pass
    overlapped or not; at D=128 also 128-key tiles on 8 warps (two warpgroups share each query
    tile), capped and not."""
    configs = [replace(base, persistent=p, maxnreg=r, overlap=False) for p in (0, 1, 2) for r in (None, 168, 192, 232)]
    if base.dq_mode == "pass":      # the dQ pass on a second stream, with and without a persistent dK/dV grid
        configs += [replace(base, overlap=True, persistent=p) for p in (0, 2)]
    if head_dim == 128:
        configs += [replace(base, block_n=128, num_warps=8, num_stages=s, maxnreg=r, overlap=False)
                    for s in (1, 2) for r in (None, 240)]
    return configs


def kernel_breakdown(sets, problem: Problem, config: BwdConfig, repeats: int = 5) -> dict[str, float]:
    """GPU ms per call of each kernel one backward launches, from ``torch.profiler`` (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    calls = our_calls(sets, problem, config)
    for call in calls:
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            for call in calls:
                call()
        torch.cuda.synchronize()
    per_call = repeats * len(calls)
    times: dict[str, float] = {}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total and event.key.startswith("bwd_"):
            times[event.key.split("_kernel")[0]] = total / per_call / 1000.0
    return times


def _problem(batch: int, heads: int, n: int, head_dim: int, causal: bool) -> Problem:
    return Problem(batch=batch, heads=heads, n_q=n, n_k=n, head_dim=head_dim, dtype="bf16", causal=causal)


def make_sets(problem: Problem) -> list[dict]:
    """The backward's tensors (q, k, v, dout, out, lse and room for the gradients, the tuner's own
    :meth:`~tuner.kernels.TunableKernel.inputs`), as many sets as keep the timed loop out of L2."""
    from kernel.measure.timing import input_sets

    per_set = 6 * problem.batch * problem.heads * problem.n_q * problem.head_dim * 2
    return [BACKWARD.inputs(problem, "cuda") for _ in range(input_sets(per_set))]


def our_calls(sets, problem: Problem, config: BwdConfig) -> list:
    """One user's call (allocating its gradients) of ``config`` per set."""
    return [BACKWARD.call(from_kernel(config), s, problem, allocate=True) for s in sets]


def _reference(s, problem: Problem):
    """float32 autograd gradients through the math path, and SDPA-flash's own bf16 error against them."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernel.reference import rel_err

    q, k, v = (s[name].float().requires_grad_() for name in ("q", "k", "v"))
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)
    reference = torch.autograd.grad(out, (q, k, v), s["dout"].float())
    pin, calls = BACKWARD.baselines([s], problem)["flash"]
    with pin():
        theirs = calls[0]()
    return reference, [rel_err(t, r) for t, r in zip(theirs, reference)]


def _warm(job) -> str:
    """In a pool process: run each config once on a small problem of the same JIT specialisation."""
    head_dim, causal, configs = job
    from kernel import flash_attn_bwd, flash_attn_fwd

    torch.manual_seed(0)
    q, k, v, dout = (torch.randn(1, 8, 256, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = flash_attn_fwd(q, k, v, causal)
    failed = 0
    for config in configs:
        try:
            flash_attn_bwd(dout, q, k, v, out, lse, causal, config=config)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 (reported when the config is timed)
            failed += 1
    return f"D{head_dim} causal={causal}: {len(configs)} warmed, {failed} failed"


def precompile(jobs: int, work: list[tuple[int, bool, list[BwdConfig]]]) -> None:
    chunks = [(d, c, configs[i::jobs]) for d, c, configs in work for i in range(jobs) if configs[i::jobs]]
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        for line in pool.map(_warm, chunks):
            print("  precompile", line, file=sys.stderr, flush=True)


def _try(sets, problem: Problem, config: BwdConfig, reference, sdpa_err, flops: float) -> dict:
    """One config: checked on the first input set against the float32 reference, then timed."""
    from kernel.measure.timing import gpu_time
    from kernel.reference import rel_err

    entry = dict(config=config.__dict__)
    try:
        ours = our_calls(sets[:1], problem, config)[0]()
        errors = [rel_err(g, r) for g, r in zip(ours, reference)]
        entry["err"] = errors
        if any(not e <= max(3 * t, 5e-3) for e, t in zip(errors, sdpa_err)):
            entry["failed"] = f"incorrect: errors {errors} vs SDPA's {sdpa_err}"
        else:
            timing = gpu_time(our_calls(sets, problem, config))
            entry.update(ms=timing.ms, tflops=flops / timing.ms * 1e-9, timer=timing.method)
    except Exception as exc:  # noqa: BLE001 (a config the compiler or launcher refuses is a result)
        entry["failed"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc) else ''}"
    return entry


def bench_shape(batch, heads, n, head_dim, causal, first: list[BwdConfig], second=None) -> dict:
    """SDPA's backward, then ``first``'s configs, then ``second(best of first)``'s, on one shape."""
    from kernel.measure.timing import time_backends

    problem = _problem(batch, heads, n, head_dim, causal)
    sets = make_sets(problem)
    flops = BACKWARD.flops(problem)
    reference, sdpa_err = _reference(sets[0], problem)
    row = dict(B=batch, H=heads, N=n, D=head_dim, causal=causal, input_sets=len(sets), sdpa_err=sdpa_err, tried=[])
    for backend, result in time_backends(BACKWARD.baselines(sets, problem), host=False).items():
        row[f"{backend}_ms"], row[f"{backend}_timer"] = result["ms"], result["method"]
    row["tried"] = [_try(sets, problem, config, reference, sdpa_err, flops) for config in first]
    timed = [e for e in row["tried"] if "ms" in e]
    if timed and second is not None:
        seen = {BwdConfig(**e["config"]) for e in row["tried"]}
        more = [c for c in second(BwdConfig(**min(timed, key=lambda e: e["ms"])["config"])) if c not in seen]
        row["tried"] += [_try(sets, problem, config, reference, sdpa_err, flops) for config in more]
        timed = [e for e in row["tried"] if "ms" in e]
    if timed:
        best = min(timed, key=lambda e: e["ms"])
        row.update(best=best["config"], ours_ms=best["ms"], ours_tflops=best["tflops"])
        row.update(training_step(sets, problem, BwdConfig(**best["config"])))
        row["kernels_ms"] = kernel_breakdown(sets, problem, BwdConfig(**best["config"]))
    for backend in ("flash", "cudnn"):
        ms = row[f"{backend}_ms"]
        row[f"{backend}_tflops"] = flops / ms * 1e-9 if ms else None
        row[f"vs_{backend}"] = ms / row["ours_ms"] if ms and timed else None
    return row


def host_costs(head_dim: int, causal: bool, config: BwdConfig, n: int = 512) -> dict:
    """Host µs per backward call at a short length (the GPU keeps up): ours and SDPA's autograd backward."""
    from kernel.measure.timing import host_us, runs

    problem = _problem(4, 8, n, head_dim, causal)
    sets = make_sets(problem)[:1]
    row = dict(D=head_dim, causal=causal, N=n, ours_host_us=host_us(our_calls(sets, problem, config)[0]))
    for backend, (pin, calls) in BACKWARD.baselines(sets, problem).items():
        row[f"{backend}_host_us"] = host_us(calls[0]) if runs((pin, calls)) else None
    return row


def training_step(sets, problem: Problem, config: BwdConfig) -> dict:
    """fwd+bwd (the tuner's ``fwd+bwd`` pass): our default forward then the backward, against
    SDPA's forward and autograd backward."""
    from kernel.measure.timing import gpu_time, time_backends

    row = {"step_ms": gpu_time([STEP.call(from_kernel(config), s, problem, allocate=True) for s in sets]).ms}
    for backend, result in time_backends(STEP.baselines(sets, problem), host=False).items():
        ms = result["ms"]
        row[f"step_{backend}_ms"] = ms
        row[f"step_vs_{backend}"] = ms / row["step_ms"] if ms else None
    row["step_tflops"] = STEP.flops(problem) / row["step_ms"] * 1e-9
    return row


def _key(c: dict) -> str:
    return (f"{c['block_m']}x{c['block_n']}_q{c['block_m_q']}x{c['block_n_q']}_w{c['num_warps']}_s{c['num_stages']}"
            f"_{c['dq_mode']}" + "_tma" * bool(c["tma"]) + (f"_p{c['persistent']}" if c.get("persistent") else "")
            + (f"_r{c['maxnreg']}" if c.get("maxnreg") else "") + ("_ov" if c.get("overlap") else ""))


def table(rows: list[dict], env: dict) -> str:
    from kernel.measure.timing import environment_line

    lines = [environment_line(env), "",
             "| D | causal | best config | ours ms | TFLOP/s | flash ms | cuDNN ms | x flash | x cuDNN | host µs ours "
             "| flash | cuDNN | configs timed | fwd+bwd x flash | fwd+bwd x cuDNN |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        host = r.get("host", {})
        lines.append(f"| {r['D']} | {'yes' if r['causal'] else 'no'} | {_key(r['best']) if r.get('best') else 'none'} "
                     f"| {fmt(r.get('ours_ms'), '.4f')} | {fmt(r.get('ours_tflops'), '.0f')} | "
                     f"{fmt(r['flash_ms'], '.4f')} | {fmt(r['cudnn_ms'], '.4f')} | {fmt(r['vs_flash'], '.2f')} | "
                     f"{fmt(r['vs_cudnn'], '.2f')} | {fmt(host.get('ours_host_us'), '.1f')} | "
                     f"{fmt(host.get('flash_host_us'), '.1f')} | {fmt(host.get('cudnn_host_us'), '.1f')} | "
                     f"{sum('ms' in e for e in r['tried'])} of {len(r['tried'])} | "
                     f"{fmt(r.get('step_vs_flash'), '.2f')} | {fmt(r.get('step_vs_cudnn'), '.2f')} |")
    return "\n".join(lines)


def knob_effects(rows: list[dict]) -> str:
    """Per shape, the best time of each knob's setting, as a ratio to the best config overall
    (1.00: that setting holds the winner; 1.12: its best is 12% slower)."""
    knobs = {"dq_mode": lambda c: c["dq_mode"], "TMA loads": lambda c: "on" if c["tma"] else "off",
             "dK/dV warps": lambda c: c["num_warps"], "dK/dV stages": lambda c: c["num_stages"],
             "dK/dV tiles (M x N)": lambda c: f"{c['block_m']}x{c['block_n']}",
             "dQ pass tiles": lambda c: f"{c['block_m_q']}x{c['block_n_q']}" if c["dq_mode"] == "pass" else None,
             "persistent (programs per SM)": lambda c: c.get("persistent") or 0,
             "maxnreg": lambda c: c.get("maxnreg") or 0,
             "overlap (dQ pass on a second stream)": lambda c: "on" if c.get("overlap") else "off"}
    lines = ["| D | causal | knob | best time of each setting / best overall |", "|---|---|---|---|"]
    for r in rows:
        timed = [e for e in r["tried"] if "ms" in e]
        if not timed:
            continue
        best = min(e["ms"] for e in timed)
        for knob, value_of in knobs.items():
            per: dict = {}
            for e in timed:
                value = value_of(e["config"])
                if value is not None:
                    per[value] = min(per.get(value, float("inf")), e["ms"])
            cells = ", ".join(f"{v}: {ms / best:.2f}" for v, ms in sorted(per.items(), key=lambda item: item[1]))
            lines.append(f"| {r['D']} | {'yes' if r['causal'] else 'no'} | {knob} | {cells} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bwd", description=__doc__.split("\n\n")[0],
        epilog="examples:\n  python -m benchmarks.bwd\n"
               "  python -m benchmarks.bwd --explore --jobs 14 --json x.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dim", type=int, action="append", help="64 and 128 by default (repeatable)")
    parser.add_argument("--n", type=int, default=4096, help="sequence length (default 4096)")
    parser.add_argument("--explore", action="store_true", help="time a grid of configs per shape, not the default")
    parser.add_argument("--knobs", action="store_true",
                        help="time persistent grids and maxnreg (and 128-key tiles at D=128) on the defaults")
    parser.add_argument("--host-n", type=int, default=512, help="length at which host µs per call are measured")
    parser.add_argument("--jobs", type=int, default=8, help="processes that compile the grid first (default 8)")
    parser.add_argument("--json", help="write every row (every config tried) here")
    parser.add_argument("--markdown", help="write the table here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("python -m benchmarks.bwd needs a CUDA GPU: it times the backward against SDPA's.", file=sys.stderr)
        return 2
    from kernel import default_bwd_config
    from kernel.measure.timing import environment, warm_gpu

    major, minor = torch.cuda.get_device_capability()
    hopper = major == 9
    cases = [(d, c) for d in (args.head_dim or [64, 128]) for c in (False, True)]
    defaults = {(d, c): default_bwd_config(d, c, 10 * major + minor) for d, c in cases}
    plans = {key: explore_kv_configs(key[0], hopper, base) if args.explore else
             knob_configs(key[0], base) if args.knobs else [base] for key, base in defaults.items()}
    if (args.explore or args.knobs) and args.jobs > 1:
        precompile(args.jobs, [(d, c, plans[(d, c)] + (explore_q_configs(d, defaults[(d, c)]) if args.explore else []))
                               for d, c in cases])
    env = environment()
    warm_gpu()
    rows = []
    for d, c in cases:
        second = (lambda best, d=d: explore_q_configs(d, best)) if args.explore else None
        rows.append(bench_shape(4, 8, args.n, d, c, plans[(d, c)], second))
        if rows[-1].get("best"):
            rows[-1]["host"] = host_costs(d, c, BwdConfig(**rows[-1]["best"]), args.host_n)
        r = rows[-1]
        print(f"D={d} causal={c}: best {_key(r['best']) if r.get('best') else 'none'} "
              f"{fmt(r.get('ours_tflops'), '.0f')} TFLOP/s, x flash {fmt(r['vs_flash'], '.2f')}, "
              f"x cuDNN {fmt(r['vs_cudnn'], '.2f')}", flush=True)
        print("   per kernel (ms): " + ", ".join(f"{k} {v:.4f}" for k, v in r.get("kernels_ms", {}).items()))
        for entry in sorted(r["tried"], key=lambda e: e.get("ms", 1e9))[:6]:
            print(f"   {_key(entry['config'])}: {fmt(entry.get('ms'), '.4f')} ms {entry.get('failed', '')}",
                  flush=True)
    text = table(rows, env) + ("\n\n" + knob_effects(rows) if args.explore or args.knobs else "")
    print(text)
    write_report(args.markdown, text + "\n", args.json, {"env": env, "rows": rows}, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
