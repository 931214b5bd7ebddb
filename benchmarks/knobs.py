"""Benchmark: what each Hopper knob of the kernel buys, shape by shape, next to SDPA.

    python -m benchmarks.knobs                          # the issue's four N=4096 shapes
    python -m benchmarks.knobs --head-dim 128 --json knobs.json --markdown knobs.md

For each shape (bf16, B=4, H=8): every tile config of TILES is timed with the knobs
off; the two fastest then get every knob variant of VARIANTS, one knob at a time and
in combinations. The best three overall and SDPA-cuDNN are re-timed last, interleaved
over three rounds of the same settled, longer windows, for the ratio. Every variant's output is checked against an fp32
SDPA-math reference first; a variant that fails to compile or is wrong is reported
with its reason and not timed. Times come from :mod:`kernel.measure.timing` (CUDA graphs over
inputs that do not fit in L2), as the tuner's.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

from benchmarks._report import write_report
from benchmarks.vs_sdpa import make_sets, set_calls
from kernel.measure.timing import (
    RETIME,
    environment,
    environment_line,
    gpu_time,
    interleaved_rounds,
    runs,
    warm_gpu,
)
from tuner.kernels.triton_fwd import KERNEL, FwdConfig
from tuner.problem import Problem

TILES = {64: [(128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3), (128, 64, 4, 3)],
         128: [(128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 2), (128, 64, 4, 3)]}
VARIANTS = {
    "tma": dict(tma=True), "ws": dict(warp_specialize=True), "tma+ws": dict(tma=True, warp_specialize=True),
    "p1": dict(persistent=1), "p2": dict(persistent=2), "tma+p1": dict(tma=True, persistent=1),
    "tma+p2": dict(tma=True, persistent=2), "tma+ws+p1": dict(tma=True, warp_specialize=True, persistent=1),
    "r128": dict(maxnreg=128), "r168": dict(maxnreg=168), "tma+ws+r168": dict(tma=True, warp_specialize=True,
                                                                            maxnreg=168),
}
SHAPES = [(64, False), (64, True), (128, False), (128, True)]


def _config(tile, knobs: dict) -> FwdConfig:
    return FwdConfig(block_m=tile[0], block_n=tile[1], num_warps=tile[2], num_stages=tile[3], **knobs)


def _check(sets, problem: Problem, config: FwdConfig, reference) -> str | None:
    """None when the variant's output matches the fp32 reference; else why not."""
    out = sets[0]["out"]
    out.fill_(float("nan"))
    try:
        KERNEL.call(config, sets[0], problem)()
        torch.cuda.synchronize()
    except Exception as exc:  # a config the compiler or the launch rejects is a result
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]
    err = ((out.float() - reference).abs().max() / reference.abs().max()).item()
    return None if err < 2e-2 else f"wrong: relative error {err:.3g}"


def _final_rounds(sets, problem: Problem, best: list[dict], rounds: int = 3) -> tuple[dict[int, list], list]:
    """The best variants and SDPA-cuDNN in interleaved rounds of the settled, longer windows the
    tuner's finalists get (both slow under sustained load): index -> ms per round, cuDNN's."""
    candidates = {str(i): set_calls(sets, problem, _config(r["tile"], r["knobs"])) for i, r in enumerate(best)}
    pins = {}
    pinned = KERNEL.baselines(sets, problem)["cudnn"]
    if runs(pinned):
        pins["cudnn"], candidates["cudnn"] = pinned
    times = interleaved_rounds(candidates, rounds, *RETIME, pins=pins)
    return {i: times[str(i)] for i in range(len(best))}, times.get("cudnn", [])


def bench_shape(head_dim: int, causal: bool, n: int = 4096, log=print) -> dict:
    """Tiles, then knob variants of the two best tiles, then a final interleaved re-time."""
    problem = Problem(4, 8, n, n, head_dim, "bf16", causal)
    sets = make_sets(problem)
    q, k, v = (sets[0][name].float() for name in ("q", "k", "v"))
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    flops = KERNEL.flops(problem)
    rows = []

    def run(tile, name, knobs):
        config = _config(tile, knobs)
        why = _check(sets, problem, config, reference)
        ms = None if why else gpu_time(set_calls(sets, problem, config)).ms
        rows.append(dict(tile=list(tile), variant=name, knobs=knobs, ms=ms, reason=why))
        log(f"  D={head_dim} causal={causal} {tile} {name}: " + (f"{ms:.4f} ms" if ms else why))

    for tile in TILES[head_dim]:
        run(tile, "plain", {})
    plain = sorted((r for r in rows if r["ms"]), key=lambda r: r["ms"])
    for tile in [tuple(r["tile"]) for r in plain[:2]]:
        for name, knobs in VARIANTS.items():
            run(tile, name, knobs)
    best = sorted((r for r in rows if r["ms"]), key=lambda r: r["ms"])[:3]
    final, cudnn = _final_rounds(sets, problem, best)
    cudnn_ms = statistics.median(cudnn)
    finalists = [dict(best[i], final_ms=statistics.median(t), vs_cudnn=cudnn_ms / statistics.median(t),
                      tflops=flops / statistics.median(t) * 1e-9) for i, t in final.items()]
    plain_best = plain[0]["ms"] if plain else None
    for r in rows:
        r["vs_plain_best"] = plain_best / r["ms"] if r["ms"] and plain_best else None
    return dict(D=head_dim, causal=causal, N=n, cudnn_ms=cudnn_ms, cudnn_tflops=flops / cudnn_ms * 1e-9,
                rows=rows, finalists=finalists)


def markdown(results: list[dict], env: dict) -> str:
    lines = [environment_line(env), "", "Finalists (3 interleaved rounds, settled; ratio = cuDNN time / ours):", "",
             "| D | causal | tile (BM, BN, warps, stages) | knobs | ms | TFLOP/s | x cuDNN | cuDNN TFLOP/s |",
             "|---|---|---|---|---|---|---|---|"]
    for res in results:
        for f in res["finalists"]:
            lines.append(f"| {res['D']} | {'yes' if res['causal'] else 'no'} | {tuple(f['tile'])} | {f['variant']} | "
                         f"{f['final_ms']:.4f} | {f['tflops']:.0f} | {f['vs_cudnn']:.3f} | {res['cudnn_tflops']:.0f} |")
    lines += ["", "Every variant (one 40 ms window each; x plain = the best plain tile's time / this one):", "",
              "| D | causal | tile | variant | ms | x plain best | reason |", "|---|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            ratio = f"{r['vs_plain_best']:.3f}" if r["vs_plain_best"] else ""
            ms = f"{r['ms']:.4f}" if r["ms"] else ""
            lines.append(f"| {res['D']} | {'yes' if res['causal'] else 'no'} | {tuple(r['tile'])} | {r['variant']} | "
                         f"{ms} | {ratio} | {r['reason'] or ''} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.knobs", description=__doc__.split("\n\n")[0],
        epilog="examples:\n  python -m benchmarks.knobs\n  python -m benchmarks.knobs --head-dim 64 --json k.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dim", type=int, action="append", choices=sorted(TILES),
                        help="only these head dims (repeatable)")
    parser.add_argument("--n", type=int, default=4096, help="sequence length (default 4096)")
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--markdown", help="write the tables here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("python -m benchmarks.knobs: error: no CUDA GPU is visible here, and this times the kernel against "
              "SDPA on one", file=sys.stderr)
        return 2
    env = environment()
    warm_gpu()
    results = [bench_shape(d, c, args.n) for d, c in SHAPES if not args.head_dim or d in args.head_dim]
    text = markdown(results, env)
    print(text)
    write_report(args.markdown, text, args.json, {"env": env, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
