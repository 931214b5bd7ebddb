"""``python -m benchmarks.search``: how fast the tuner finds a near-best config.

    python -m benchmarks.search speed [--study autotune_race] [--markdown PATH]   # GPU
    python -m benchmarks.search quality --storage URL --study article --gpu sm_90 [--shape ...]
    python -m benchmarks.search stability --storage URL --study article --gpu sm_90 [--top 5] [--repeats 5]  # GPU

``speed`` times, in one GPU run and each from a cold Triton cache, ``@triton.autotune``'s
first call and ``tuner.sweep --sampler grid`` over the same config list, then times
both winners side by side.

``quality`` replays searches against a finished grid sweep: each sampler proposes
configs, and each proposal is answered with the time the grid measured for it (the
objective is that shape's speedup over SDPA-flash). It reports how many trials, and how
much of the grid's timing wall time, each search needed to come within 2% of the
grid's best. Nothing is re-timed, so the answer is exact for the recorded timings.

``stability`` re-times a study's top configs for a shape several times, in rounds whose
order rotates, and reports each one's spread and whether the winner and the runner-up
swap places by more than that noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from tuner.formatting import usage_error


def _package_root() -> str:
    """The folder that holds the ``kernel`` and ``tuner`` packages this process imports (a checkout
    or site-packages), for the contestants' processes: never this file's own location."""
    import tuner

    return str(Path(tuner.__file__).resolve().parent.parent)


# ------------------------------------------------------------------------------- speed

_AUTOTUNE_SCRIPT = textwrap.dedent("""
    import json, sys, time, torch, triton
    from kernel.autotuned import AutotunedFlashAttention
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
               for m, n, w, s in json.loads(sys.argv[1])]
    shape = json.loads(sys.argv[2])
    q, k, v = (torch.randn(shape["batch"], shape["heads"], shape["n_q"], shape["head_dim"], device="cuda",
                           dtype=torch.bfloat16) for _ in range(3))
    tuned = AutotunedFlashAttention(configs, ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"])
    torch.cuda.synchronize()
    start = time.perf_counter()
    tuned(q, k, v, shape["causal"])
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    best = tuned.kernel.best_config
    print(json.dumps({"seconds": elapsed, "best": [best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"],
                                                   best.num_warps, best.num_stages]}))
""")


def _race(study_name: str, shape, configs, scratch: str) -> tuple[dict, float, str, int, float]:
    """Run both contestants from cold caches: (autotune's answer, its wall s, the sweep's best,
    configs the sweep timed, its wall s). Raises RuntimeError with the failing output."""
    from tuner.store import Store
    from tuner.winners import measured_on, winner

    base_env = {**os.environ, "PYTHONPATH": f"{_package_root()}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _AUTOTUNE_SCRIPT,
                             json.dumps([[c.block_m, c.block_n, c.num_warps, c.num_stages] for c in configs]),
                             json.dumps(shape.__dict__)], capture_output=True, text=True,
                            env={**base_env, "TRITON_CACHE_DIR": f"{scratch}/autotune-triton"})
    autotune_wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    db = f"{scratch}/race.db"
    started = time.perf_counter()
    sweep = subprocess.run([sys.executable, "-m", "tuner.sweep", "--gpu", "auto", "--study", study_name,
                            "--sampler", "grid", "--storage", f"sqlite:///{db}", "--no-outputs", "--finalists", "0"],
                           env={**base_env, "TRITON_CACHE_DIR": f"{scratch}/sweep-triton",
                                "FA2_TUNER_CACHE": f"{scratch}/fa2"}, capture_output=True, text=True, cwd=scratch)
    sweep_wall = time.perf_counter() - started
    if sweep.returncode != 0:
        raise RuntimeError(sweep.stdout[-2000:] + sweep.stderr[-3000:])
    _, rows = measured_on(Store(f"sqlite:///{db}", create=False).results())
    best = winner(rows, shape.label)            # the sweep ran without finalists: its fastest row
    timed = len({r.config for r in rows if r.status == "timed"})
    return json.loads(result.stdout.strip().splitlines()[-1]), autotune_wall, best, timed, sweep_wall


def speed(study_name: str, markdown: Path | None) -> int:
    """@triton.autotune's first call against the grid sweep, each from a cold cache, then both winners."""
    import torch

    from kernel import flash_attn_fwd
    from kernel.timing import environment, environment_line, gpu_time, warm_gpu
    from tuner import budget
    from tuner.gpus import detect
    from tuner.study import load

    if not torch.cuda.is_available():
        print("speed: error: no CUDA GPU is visible here, and it races the autotuner on one", file=sys.stderr)
        return 2
    study = load(study_name)
    shape = study.shapes[0]
    gpu = detect()
    # The same list for both: the study's configs that the budget model lets launch here.
    configs = [c for c in study.configs() if budget.verdict(c, shape, gpu, None).launchable]
    env = environment()
    with tempfile.TemporaryDirectory() as scratch:
        try:
            autotune, autotune_wall, sweep_best, timed, sweep_wall = _race(study_name, shape, configs, scratch)
        except RuntimeError as failure:
            print(failure, file=sys.stderr)
            return 1
    warm_gpu()          # both winners, side by side in this process
    q, k, v = (torch.randn(shape.batch, shape.heads, shape.n_q, shape.head_dim, device="cuda",
                           dtype=torch.bfloat16) for _ in range(3))
    config_type = study.kernel.config_type
    picks = {"autotune": config_type(*autotune["best"]), "sweep": config_type.parse(sweep_best)}
    side = {name: gpu_time([lambda c=c: flash_attn_fwd(q, k, v, shape.causal, **c.as_kwargs())], 200).ms
            for name, c in picks.items()}
    lines = [environment_line(env), f"Command: python -m benchmarks.search speed --study {study_name}",
             f"Shape {shape.label}; {len(configs)} configs (the study's, less those the budget model rejects "
             f"on {gpu.name}); cold Triton cache for each.", "",
             "| | wall time (s) | best config | its ms, timed side by side |", "|---|---|---|---|",
             f"| @triton.autotune, first call | {autotune['seconds']:.1f} (process {autotune_wall:.1f}) | "
             f"{picks['autotune'].key} | {side['autotune']:.4f} |",
             f"| tuner.sweep --sampler grid | {sweep_wall:.1f} (whole command; {timed} timed and checked) | "
             f"{picks['sweep'].key} | {side['sweep']:.4f} |", "",
             f"Speed-up of the sweep over autotune: {autotune_wall / sweep_wall:.2f}x (process wall times). "
             f"Winners differ by {100 * abs(side['sweep'] / side['autotune'] - 1):.1f}% when timed together."]
    text = "\n".join(lines)
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0


# ----------------------------------------------------------------------------- quality


def _replay(sampler_name: str, seed: int, table: dict, space, budget_trials: int, target: float):
    """One search against recorded timings: trials, distinct configs, configs that were timed
    (the GPU's share: a rejected config costs no GPU time) and recorded seconds to reach ``target``."""
    import optuna

    from tuner import search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = search.make_sampler(sampler_name, space, seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    dists = search.distributions(space, sampler_name)
    seen: dict[str, float] = {}
    spent, timed = 0.0, set()
    for number in range(1, budget_trials + 1):
        trial = study.ask(dists)
        config = search.config_of(trial.params, space.kernel.config_type)
        value, seconds = table.get(config.key, (0.0, 0.0))
        if config.key not in seen:
            spent += seconds           # a config asked again is answered from the store, as in the sweep
        seen[config.key] = value
        if value > 0:
            timed.add(config.key)
        trial.set_constraint(search.REJECTED_CONSTRAINT, 0.0 if value > 0 else 1.0)
        study.tell(trial, value)
        if value >= target:
            return number, len(seen), spent, len(timed)
    return None, len(seen), spent, len(timed)


def quality(url: str, study_name: str, target_name: str, shapes: list[str], samplers: list[str], seeds: int,
            markdown: Path | None) -> int:
    from tuner.gpus import GpuSpec
    from tuner.status import Status
    from tuner.store import Store
    from tuner.study import load

    study = load(study_name)
    target = GpuSpec.from_name(target_name)
    rows = [r for r in Store(url, create=False).results(study.name, target.name) if r.gpu != "none"]
    labels = shapes or [s.label for s in study.shapes]
    lines = [f"Replayed against the grid sweep of study {study.name!r} on {target.name} ({rows[0].gpu}; triton "
             f"{rows[0].triton_version}), {len(study.space.all_configs())} configs in the space.",
             f"Command: python -m benchmarks.search quality --study {study_name} --gpu {target_name} "
             f"--samplers {' '.join(samplers)} --seeds {seeds}", "",
             "| shape | valid configs | sampler | trials to 2% of best: median / worst | distinct configs asked "
             "| of them timed (valid): median / worst | recorded timing s: median / worst | found in all seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for label in labels:
        shape_rows = [r for r in rows if r.shape == label]
        # per-config seconds: the trial's check + time, shared by the study's shapes
        table = {r.config: (r.pct_flash / 100 if r.status == Status.TIMED and r.pct_flash else 0.0,
                            (r.check_s or 0.0) + (r.time_s or 0.0)) for r in shape_rows}
        valid = sum(1 for value, _ in table.values() if value > 0)
        best = max(value for value, _ in table.values())
        for sampler in samplers:
            results = [_replay(sampler, seed, table, study.space, len(study.space.all_configs()), best / 1.02)
                       for seed in range(seeds)]
            found = [r for r in results if r[0] is not None]
            trials = [r[0] if r[0] is not None else len(study.space.all_configs()) for r in results]
            distinct = [r[1] for r in results]
            spent = [r[2] for r in results]
            timed = [r[3] for r in results]
            lines.append(f"| {label} | {valid} | {sampler} | {statistics.median(trials):.0f} / {max(trials)} "
                         f"({100 * statistics.median(trials) / valid:.0f}% / {100 * max(trials) / valid:.0f}% of "
                         f"valid) | {statistics.median(distinct):.0f} | {statistics.median(timed):.0f} / {max(timed)} "
                         f"({100 * statistics.median(timed) / valid:.0f}% / {100 * max(timed) / valid:.0f}%) | "
                         f"{statistics.median(spent):.0f} / "
                         f"{max(spent):.0f} | {len(found)}/{seeds} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    if markdown:
        markdown.write_text(text + "\n")
    print(text)
    return 0


# --------------------------------------------------------------------------- stability


def stability_report(verdict) -> list[str]:
    """Markdown lines for a :class:`tuner.finalists.ShapeVerdict`: each config's spread, and
    whether the winner is ahead of the runner-up by more than the noise."""
    rounds = len(verdict.winner.times)
    wins = {t.config: 0 for t in verdict.ranked}
    for r in range(rounds):
        wins[min(verdict.ranked, key=lambda t: t.times[r]).config] += 1
    lines = ["| rank | config | median ms | min | max | spread | rounds won |", "|---|---|---|---|---|---|---|"]
    for rank, timing in enumerate(verdict.ranked, start=1):
        lines.append(f"| {rank} | {timing.config} | {timing.median:.4f} | {min(timing.times):.4f} | "
                     f"{max(timing.times):.4f} | {100 * timing.spread:.1f}% | {wins[timing.config]}/{rounds} |")
    spreads = [t.spread for t in verdict.ranked]
    lines += ["", f"Largest spread {100 * max(spreads):.1f}% (bar 2%); {verdict.sentence()}."]
    return lines


def stability(url: str, study_name: str, target_name: str, shape_label: str | None, top: int, repeats: int,
              markdown: Path | None, protocol: tuple[float, float] | None = None) -> int:
    """Re-time a shape's top configs ``repeats`` times in rotating rounds (as the finalists are)."""
    import torch

    from benchmarks.timing import retime
    from benchmarks.vs_sdpa import make_sets
    from kernel.timing import RETIME, environment, environment_line, warm_gpu
    from tuner.finalists import judge
    from tuner.store import Store
    from tuner.study import load
    from tuner.winners import ranked

    if not torch.cuda.is_available():
        print("stability: error: no CUDA GPU is visible here, and it re-times configs on one", file=sys.stderr)
        return 2
    study = load(study_name)
    largest = min(study.shapes, key=lambda s: (s.causal, -s.n_q * s.n_k))     # default: biggest non-causal
    shape = next((s for s in study.shapes if s.label == shape_label), None) if shape_label else largest
    if shape is None:
        print(f"--shape {shape_label!r} is not in study {study.name}: {[s.label for s in study.shapes]}",
              file=sys.stderr)
        return 2
    keys = ranked(Store(url, create=False).results(study.name, target_name), shape.label, top=top)  # by time
    sets = make_sets(shape)
    env = environment()
    warm_gpu()
    rep_ms, settle_ms = protocol or RETIME
    verdict = judge(shape.label, retime(shape, keys, repeats, (rep_ms, settle_ms), sets))
    header = [environment_line(env),
              f"Command: python -m benchmarks.search stability --study {study_name} --gpu {target_name} "
              f"--shape \"{shape.label}\" --top {top} --repeats {repeats}",
              f"The top {len(keys)} configs of the store for {shape.label}, each timed {repeats} times in rounds "
              f"whose order rotates (GPU time by CUDA-graph replay, {len(sets)} input sets, {settle_ms:.0f} ms "
              f"of replays to settle the clock, then {rep_ms:.0f} ms timed; the median replay).", ""]
    text = "\n".join(header + stability_report(verdict))
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0 if max(t.spread for t in verdict.ranked) <= 0.02 else 1


def _check_args(args) -> str | None:
    """Every input checked before any work: the first problem as a message, or None."""
    from tuner.gpus import GpuSpec
    from tuner.search import SAMPLERS
    from tuner.store import Store, StoreError
    from tuner.study import StudyError, load

    try:
        load(args.study)
        if args.command != "speed":
            GpuSpec.from_name(args.gpu)
            Store(args.storage, create=False)
    except (StudyError, StoreError, ValueError, RuntimeError) as exc:
        return str(exc)
    for name in ("seeds", "top", "repeats"):
        if getattr(args, name, 1) < 1:
            return f"--{name} {getattr(args, name)} must be at least 1"
    unknown = [s for s in getattr(args, "samplers", []) if s not in SAMPLERS]
    if unknown:
        return f"--samplers {unknown[0]!r} is not one of {', '.join(SAMPLERS)}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n  python -m benchmarks.search speed\n"
                                            "  python -m benchmarks.search quality --storage sqlite:///h200.db "
                                            "--study article --gpu sm_90 --samplers tpe random --seeds 5")
    sub = parser.add_subparsers(dest="command", required=True)
    p_speed = sub.add_parser("speed", help="@triton.autotune vs the grid sweep, cold cache, one GPU run")
    p_speed.add_argument("--study", default="autotune_race")
    p_speed.add_argument("--markdown", type=Path)
    p_quality = sub.add_parser("quality", help="trials each sampler needs to reach 2%% of a grid's best")
    p_quality.add_argument("--storage", required=True)
    p_quality.add_argument("--study", required=True)
    p_quality.add_argument("--gpu", required=True)
    p_quality.add_argument("--shape", action="append", default=[], help="shape label (repeatable; default all)")
    p_quality.add_argument("--samplers", nargs="+", default=["tpe", "random"])
    p_quality.add_argument("--seeds", type=int, default=5)
    p_quality.add_argument("--markdown", type=Path)
    p_stability = sub.add_parser("stability", help="re-time a study's top configs and report their spread")
    p_stability.add_argument("--storage", required=True)
    p_stability.add_argument("--study", required=True)
    p_stability.add_argument("--gpu", required=True)
    p_stability.add_argument("--shape", help="shape label (default the study's largest non-causal shape)")
    p_stability.add_argument("--top", type=int, default=5)
    p_stability.add_argument("--repeats", type=int, default=5)
    p_stability.add_argument("--markdown", type=Path)
    p_stability.add_argument("--settle-ms", type=float, help="untimed replays first (default the finalists')")
    p_stability.add_argument("--rep-ms", type=float, help="timed replays (default the finalists')")
    args = parser.parse_args(argv)
    problem = _check_args(args)
    if problem:
        return usage_error(parser, problem)
    if args.command == "stability":
        protocol = (args.rep_ms, args.settle_ms) if args.rep_ms and args.settle_ms is not None else None
        return stability(args.storage, args.study, args.gpu, args.shape, args.top, args.repeats, args.markdown,
                         protocol)
    if args.command == "speed":
        return speed(args.study, args.markdown)
    return quality(args.storage, args.study, args.gpu, args.shape, args.samplers, args.seeds, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
