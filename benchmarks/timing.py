"""``python -m benchmarks.timing``: the bars of the timing work, measured on a GPU.

    python -m benchmarks.timing host [--markdown PATH]
    python -m benchmarks.timing grids --storage URL --storage URL [--study article] [--gpu sm_90]
    python -m benchmarks.timing tpe --storage TPE_URL --grid GRID_URL [--study article] [--target sm_89]

``host``: host µs per call at B4 H8 N512 D64 bf16, as the rate of back-to-back calls
enqueued before one sync, for ``flash_attn_fwd``, the autotuned entry point, the
compiled kernel's own runner (the floor) and SDPA's flash and cuDNN backends.

``grids``: two independent sweeps of one study; for every shape, the two stores'
winners (:mod:`tuner.winners`) re-timed together in rotating rounds, and how far apart they are.

``tpe``: a TPE search against a grid of the same study: for every shape, TPE's best
and the grid's best among the configs that fit TPE's target, re-timed together; and
both runs' best configs across shapes, by the outputs' score, likewise.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from tuner.formatting import usage_error

ROUNDS = 5


def _write(text: str, markdown: Path | None) -> None:
    print(text)
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(text + "\n")


def host(markdown: Path | None, rounds: int = 7) -> int:
    """Host µs per call of each launch path, in interleaved rounds (this host's speed wanders)."""
    import statistics

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernel import flash_attn_fwd
    from kernel.measure.timing import (
        environment,
        environment_line,
        host_us,
        interleaved_rounds,
        sdpa_call,
        warm_gpu,
    )
    from kernel.triton.autotune import flash_attn_fwd_autotuned
    from kernel.triton.fwd import JIT_KERNEL, plan_for

    q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    config = dict(block_m=128, block_n=64, num_warps=8, num_stages=3)
    warm_gpu()
    plan = plan_for(JIT_KERNEL, tuple(config.values()), q, k, v)
    out, lse = plan(q, k, v)
    runner = plan.compiled[plan.grid + (1,)]
    args = (q, k, v, out, lse, *plan.scalars)

    def pinned(backend):
        def call():
            with sdpa_kernel(backend):
                return sdpa_call(q, k, v, False)()
        return call

    paths = {"flash_attn_fwd (allocates out and lse)": lambda: flash_attn_fwd(q, k, v, **config),
             "flash_attn_fwd, outputs given": lambda: flash_attn_fwd(q, k, v, **config, out=out, lse=lse),
             "flash_attn_fwd_autotuned (allocates)": lambda: flash_attn_fwd_autotuned(q, k, v),
             "CompiledKernel[grid](*args), outputs given (Triton's own runner)": lambda: runner(*args),
             "SDPA, default backend (flash here)": sdpa_call(q, k, v, False),
             "SDPA-cuDNN, backend pinned inside the call": pinned(SDPBackend.CUDNN_ATTENTION),
             "an empty torch op (q.add_(0))": lambda: q.add_(0)}
    samples = interleaved_rounds({name: [call] for name, call in paths.items()}, rounds,
                                 measure=lambda calls: host_us(calls[0], 500, 1))
    lines = [environment_line(environment()), "Command: python -m benchmarks.timing host", "",
             f"Host µs per call at B4 H8 N512 D64 bf16: 500 calls enqueued back to back, timed before one sync; "
             f"{rounds} rounds, the paths in rotating order.", "",
             "| launch path | median µs | best round µs | every round |", "|---|---|---|---|"]
    lines += [f"| {name} | {statistics.median(us):.1f} | {min(us):.1f} | {', '.join(f'{x:.1f}' for x in us)} |"
              for name, us in samples.items()]
    _write("\n".join(lines), markdown)
    return 0


def retime(shape, keys: list[str], rounds: int = ROUNDS, protocol: tuple[float, float] | None = None,
           sets: list | None = None) -> dict[str, list[float]]:
    """Configs timed together on one shape in this process (:func:`kernel.measure.timing.interleaved_rounds`),
    each measurement with ``protocol`` = (rep_ms, settle_ms), by default the finalists' own."""
    from benchmarks.vs_sdpa import make_sets, set_calls
    from kernel.measure.timing import RETIME, interleaved_rounds
    from tuner.kernels.triton_fwd import FwdConfig

    rep_ms, settle_ms = protocol or RETIME
    sets = sets or make_sets(shape)
    candidates = {key: set_calls(sets, shape, FwdConfig.parse(key)) for key in dict.fromkeys(keys)}
    return interleaved_rounds(candidates, rounds, rep_ms, settle_ms)


def _winner(db, study: str, target: str, shape: str) -> str:
    """The shape's winner in a store (:mod:`tuner.winners`: its GPU's finalists, else its fastest row)."""
    from tuner.winners import measured_on, verdicts_of, winner

    gpu, rows = measured_on(db.results(study, target))
    return winner(rows, shape, verdicts_of(db, study, target, gpu).get(shape))


def grids(urls: list[str], study_name: str, target: str, markdown: Path | None) -> int:
    from kernel.measure.timing import environment, environment_line, warm_gpu
    from tuner.finalists import judge
    from tuner.store import Store
    from tuner.study import load

    study = load(study_name)
    first, second = (Store(url, create=False) for url in urls)
    warm_gpu()
    lines = [environment_line(environment()),
             f"Command: python -m benchmarks.timing grids --study {study_name} --gpu {target} (two stores)", "",
             f"Each shape's winner in each of two independent grid sweeps, re-timed together: {ROUNDS} rounds, order "
             "rotating, median GPU time by CUDA-graph replay.", "",
             "| shape | winner, run 1 | winner, run 2 | run 1 ms | run 2 ms | apart | noise |",
             "|---|---|---|---|---|---|---|"]
    worst = 0.0
    for shape in study.shapes:
        a, b = _winner(first, study.name, target, shape.label), _winner(second, study.name, target, shape.label)
        verdict = judge(shape.label, retime(shape, [a, b]))
        medians = {t.config: t.median for t in verdict.ranked}
        apart = abs(medians[a] / medians[b] - 1)
        worst = max(worst, apart)
        lines.append(f"| {shape.label} | {a} | {b} | {medians[a]:.4f} | {medians[b]:.4f} | {100 * apart:.1f}% | "
                     f"{100 * verdict.noise:.1f}% |")
    lines += ["", f"Largest gap between the two runs' winners: {100 * worst:.1f}% (bar: 2%)."]
    _write("\n".join(lines), markdown)
    return 0 if worst <= 0.02 else 1


def tpe(tpe_url: str, grid_url: str, study_name: str, target_name: str, grid_target: str,
        markdown: Path | None) -> int:
    from kernel.measure.timing import environment, environment_line, warm_gpu
    from tuner import budget, records
    from tuner.gpus import GpuSpec
    from tuner.store import Store
    from tuner.study import load
    from tuner.winners import winner

    study = load(study_name)
    target = GpuSpec.from_name(target_name)
    tpe_rows = [r for r in Store(tpe_url, create=False).results(study.name, target.name) if r.gpu != "none"]

    def fits(row) -> bool:      # the grid's configs that TPE's target could have picked
        shape, config = next(s for s in study.shapes if s.label == row.shape), stored_config(row, study)
        return budget.verdict(config, shape, target, None).launchable and study.allowed(config, shape.head_dim)

    grid_rows = [r for r in Store(grid_url, create=False).results(study.name, grid_target) if fits(r)]
    warm_gpu()
    lines = [environment_line(environment()),
             f"Command: python -m benchmarks.timing tpe --study {study_name} --target {target_name}", "",
             f"TPE ({len({r.config for r in tpe_rows})} configs tried, target {target.name}) against the grid's "
             f"{len({r.config for r in grid_rows})} configs that fit {target.name} (the budget model): each shape's "
             f"two bests re-timed together, {ROUNDS} rotating rounds.", "",
             "| shape | TPE's best | grid's best | TPE / grid time |", "|---|---|---|---|"]
    worst = 0.0
    for shape in study.shapes:
        # each search's own fastest (the grid's finalists may not fit TPE's target: no verdicts here)
        best = {name: winner(rows, shape.label) for name, rows in (("tpe", tpe_rows), ("grid", grid_rows))}
        times = retime(shape, list(best.values()))
        ratio = _median(times[best["tpe"]]) / _median(times[best["grid"]])
        worst = max(worst, ratio - 1)
        lines.append(f"| {shape.label} | {best['tpe']} | {best['grid']} | {ratio:.3f} |")
    overall = {name: records.best_across_shapes(rows) for name, rows in (("tpe", tpe_rows), ("grid", grid_rows))}
    ratios = [_median(t[overall["tpe"]]) / _median(t[overall["grid"]])
              for t in (retime(shape, list(overall.values())) for shape in study.shapes)]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    lines += ["", f"Best across shapes: TPE {overall['tpe']}, grid {overall['grid']}; re-timed together on every "
                  f"shape, TPE's takes {geo:.3f}x the grid's time (geometric mean).",
              f"Worst shape: TPE's best {100 * worst:+.1f}% from the grid's (bar: within 3%, and 3% overall)."]
    _write("\n".join(lines), markdown)
    return 0 if worst <= 0.03 and geo <= 1.03 else 1


def stored_config(row, study):
    """The config a stored row holds, as the study's kernel reads its key."""
    return study.kernel.config_type.parse(row.config)


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timing", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_host = sub.add_parser("host", help="host µs per call at N=512, ours and SDPA's")
    p_grids = sub.add_parser("grids", help="two grid sweeps' winners re-timed together")
    p_grids.add_argument("--storage", action="append", required=True, help="give it twice")
    p_grids.add_argument("--gpu", default="sm_90")
    p_tpe = sub.add_parser("tpe", help="a TPE search's bests against a grid's")
    p_tpe.add_argument("--storage", required=True, help="the TPE run's store")
    p_tpe.add_argument("--grid", required=True, help="the grid run's store")
    p_tpe.add_argument("--target", default="sm_89", help="the TPE run's --gpu (default sm_89)")
    p_tpe.add_argument("--grid-target", default="sm_90", help="the grid run's --gpu (default sm_90)")
    for p in (p_host, p_grids, p_tpe):
        p.add_argument("--markdown", type=Path)
        if p is not p_host:
            p.add_argument("--study", default="article")
    args = parser.parse_args(argv)
    import torch

    if args.command == "grids" and len(args.storage) != 2:
        return usage_error(parser, f"grids needs --storage twice; got {len(args.storage)}")
    if not torch.cuda.is_available():
        print(f"{parser.prog} {args.command}: error: no CUDA GPU is visible here, and this times on one",
              file=sys.stderr)
        return 2
    if args.command == "host":
        return host(args.markdown)
    if args.command == "grids":
        return grids(args.storage, args.study, args.gpu, args.markdown)
    return tpe(args.storage, args.grid, args.study, args.target, args.grid_target, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
