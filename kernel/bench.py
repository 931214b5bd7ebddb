"""Benchmark: the kernel against PyTorch SDPA's flash and cuDNN backends, same run.

    python -m kernel.bench                     # the article's table plus D=128 and long N
    python -m kernel.bench --n 4096 --head-dim 64 --markdown docs/results/x.md

Speed is reported as a ratio to SDPA measured in the same process on the same
inputs: absolute times drift between runs and machines, ratios much less.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import subprocess
import sys
from typing import Callable

import torch
import torch.nn.functional as F

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


def attention_flops(batch: int, heads: int, n_q: int, n_k: int, head_dim: int, causal: bool) -> float:
    """Two matmuls of N_q x N_k x D multiply-adds; causal counts the lower triangle only."""
    flops = 4.0 * batch * heads * n_q * n_k * head_dim
    if causal:
        # Kept keys per query i are min(i + 1, N_k), top-left aligned.
        kept = sum(min(i + 1, n_k) for i in range(n_q)) if n_q <= 65536 else n_q * n_k / 2
        flops *= kept / (n_q * n_k)
    return flops


def environment() -> dict[str, str]:
    """GPU, versions and date, for every recorded result."""
    import triton

    info = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "gpu": "none", "driver": "n/a", "cuda": str(torch.version.cuda)}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)"
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip() or "unknown"
        except (OSError, subprocess.SubprocessError):
            info["driver"] = "unknown"
    return info


def do_bench_median(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median ms of ``fn`` by ``triton.testing.do_bench``: warm-up, L2 flush, CUDA events."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def time_sdpa(q, k, v, causal: bool, warmup_ms: int = 25, rep_ms: int = 100) -> dict[str, float | None]:
    """Median ms of each SDPA backend on these inputs (None where it did not run).

    The backend is pinned once around the timing loop, not inside the timed call, so
    SDPA is not charged for entering a context manager on every launch.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    times: dict[str, float | None] = {}
    for backend, name in SDPA_BACKENDS.items():
        with sdpa_kernel(getattr(SDPBackend, name)):
            try:
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.cuda.synchronize()
            except RuntimeError:
                times[backend] = None
                continue
            times[backend] = do_bench_median(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                             warmup_ms, rep_ms)
    return times


def warm_gpu(seconds: float = 1.5) -> None:
    """Keep the GPU busy for a moment so its clocks are up before anything is timed
    (an idle H200 sits at a few hundred MHz and takes a while to ramp)."""
    import time

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


# Hand-picked candidates for --pick: large tiles, the warp counts wgmma likes.
CANDIDATES = [dict(block_m=bm, block_n=bn, num_warps=w, num_stages=s)
              for bm in (64, 128) for bn in (64, 128) for w in (4, 8) for s in (2, 3)]


def bench_case(batch, heads, n, head_dim, causal, dtype=torch.bfloat16, config=None, pick=False) -> dict:
    """Time the kernel and SDPA's backends on one shape; returns a result row.

    With ``pick``, every config in CANDIDATES is timed and the fastest is reported.
    """
    from kernel import default_config, flash_attn_fwd

    q, k, v = (torch.randn(batch, heads, n, head_dim, device="cuda", dtype=dtype) for _ in range(3))
    tried = {}
    for candidate in (CANDIDATES if pick else [config or default_config(head_dim, causal)]):
        try:
            tried[tuple(candidate.values())] = do_bench_median(lambda: flash_attn_fwd(q, k, v, causal, **candidate))
        except Exception as exc:  # out of resources on this GPU: not a candidate here
            print(f"  skip {candidate}: {type(exc).__name__}", file=sys.stderr)
    best = min(tried, key=tried.get)
    config = dict(zip(("block_m", "block_n", "num_warps", "num_stages"), best))
    ours = tried[best]
    sdpa = time_sdpa(q, k, v, causal)
    flops = attention_flops(batch, heads, n, n, head_dim, causal)
    row = dict(B=batch, H=heads, N=n, D=head_dim, causal=causal, dtype=str(dtype).replace("torch.", ""),
               config=config, ours_ms=ours, ours_tflops=flops / ours * 1e-9, candidates_timed=len(tried))
    for backend, ms in sdpa.items():
        row[f"{backend}_ms"] = ms
        row[f"{backend}_tflops"] = flops / ms * 1e-9 if ms else None
        row[f"vs_{backend}"] = ms / ours if ms else None          # > 1: we are faster
    return row


DEFAULT_CASES = ([(64, n, c) for n in (512, 1024, 2048, 4096) for c in (False, True)]
                 + [(128, n, c) for n in (512, 1024, 2048, 4096) for c in (False, True)]
                 + [(d, n, c) for d in (64, 128) for n in (8192, 16384) for c in (False, True)])


def _fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def table(rows: list[dict], env: dict[str, str]) -> str:
    """A markdown table of result rows, with the environment above it."""
    lines = [f"GPU: {env['gpu']}; driver {env['driver']}; torch {env['torch']}; triton {env['triton']}; "
             f"{env['date']}", "",
             "| D | N | causal | config (BMxBN, warps, stages) | ours ms | ours TFLOP/s | flash ms | flash TFLOP/s "
             "| cuDNN ms | cuDNN TFLOP/s | x SDPA-flash | x SDPA-cuDNN |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["config"]
        lines.append(
            f"| {r['D']} | {r['N']} | {'yes' if r['causal'] else 'no'} | "
            f"{c['block_m']}x{c['block_n']}, {c['num_warps']}, {c['num_stages']} | {r['ours_ms']:.3f} | "
            f"{r['ours_tflops']:.0f} | {_fmt(r['flash_ms'], '.3f')} | {_fmt(r['flash_tflops'], '.0f')} | "
            f"{_fmt(r['cudnn_ms'], '.3f')} | {_fmt(r['cudnn_tflops'], '.0f')} | {_fmt(r['vs_flash'], '.2f')} | "
            f"{_fmt(r['vs_cudnn'], '.2f')} |")
    ran = [b for b in SDPA_BACKENDS if any(r[f"{b}_ms"] for r in rows)]
    lines += ["", f"SDPA backends that ran: {', '.join(ran) or 'none'}. "
                  "x SDPA = SDPA time / our time (above 1: faster than SDPA)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel.bench",
        description="Time the FA2 kernel against SDPA (flash and cuDNN backends) in one run, bf16, B=4, H=8.",
        epilog="examples:\n  python -m kernel.bench\n  python -m kernel.bench --head-dim 64 --n 4096 "
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
    if not torch.cuda.is_available():
        print("python -m kernel.bench needs a CUDA GPU: it times the kernel against SDPA. "
              "Without one, run the tests (README) or `python -m tuner.budget --gpu sm_89`.", file=sys.stderr)
        return 1
    config = None
    if args.config:
        try:
            bm, bn, warps, stages = (int(x) for x in args.config.split(","))
        except ValueError:
            parser.print_usage(sys.stderr)
            print(f"{parser.prog}: error: --config {args.config!r} must be BM,BN,WARPS,STAGES", file=sys.stderr)
            return 2
        config = dict(block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
    cases = [(d, n, c) for d, n, c in DEFAULT_CASES
             if (not args.head_dim or d in args.head_dim) and (not args.n or n in args.n)]
    env = environment()
    warm_gpu()
    rows = []
    for d, n, c in cases:
        rows.append(bench_case(4, 8, n, d, c, config=config, pick=args.pick))
        r = rows[-1]
        print(f"D={d} N={n} causal={c}: ours {r['ours_ms']:.3f} ms, x flash {_fmt(r['vs_flash'], '.2f')}, "
              f"x cuDNN {_fmt(r['vs_cudnn'], '.2f')}", flush=True)
    text = table(rows, env)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(text + "\n")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"env": env, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
