"""The race behind ``python -m benchmarks.search speed``: ``@triton.autotune`` against the sweep.

Both contestants get the same configs, knobs included: the study's configs that the budget
model lets launch on the GPU present. ``@triton.autotune`` gets them as ``triton.Config``
objects written the way ``tuner.emit`` writes them (TMA as a kwarg), through the autotuned
entry point (:class:`kernel.triton.autotune.AutotunedFlashAttention`, which sets the TMA
allocator); the sweep gets the study itself, grid-sampled, without finalists. Each runs in
its own process from cold Triton and tuner caches. The race is run with the knobs (the
whole list) and without them (its plain configs: a study of the same tiles with every knob
off for the sweep, autotune's first call over the plain group), and the closing line gives
both ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# The plain configs first, then those with knobs, each group by its own autotuned entry point in one
# process from a cold cache: the first group alone is the race without knobs; both together, the best
# of the two by autotune's own timings, cost what one autotune over the whole list costs (each config
# is compiled and benchmarked once either way), and the process's start is paid once.
AUTOTUNE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    started = time.perf_counter()
    import torch
    from benchmarks.race import autotune_configs
    from kernel.triton.autotune import AutotunedFlashAttention
    from tuner.kernels.triton_fwd import KERNEL
    groups, shape = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    q, k, v = (torch.randn(shape["batch"], shape["heads"], shape["n_q"], shape["head_dim"], device="cuda",
                           dtype=torch.bfloat16) for _ in range(3))
    torch.cuda.synchronize()
    answers = {"start_s": time.perf_counter() - started, "groups": []}
    for keys in groups:
        if not keys:
            continue
        tuned = AutotunedFlashAttention(autotune_configs(keys), ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"])
        start = time.perf_counter()
        tuned(q, k, v, shape["causal"])
        torch.cuda.synchronize()
        best = tuned.kernel.best_config
        timing = getattr(tuned.kernel, "configs_timings", {}).get(best)
        answers["groups"].append({"seconds": time.perf_counter() - start, "configs": len(keys),
                                  "best": KERNEL.from_triton(best).key,
                                  "best_ms": timing[0] if isinstance(timing, (list, tuple)) else timing})
    print(json.dumps(answers))
""")


def autotune_configs(keys: list[str]) -> list:
    """``triton.Config`` objects for the forward's config keys, as ``tuner.emit`` writes them (the
    tiles and the knob constexprs as kwargs, warps, stages and ``maxnreg`` as options)."""
    import triton

    from tuner.kernels.triton_fwd import KERNEL, FwdConfig

    return [eval(KERNEL.triton_config(FwdConfig.parse(key)), {"triton": triton}) for key in keys]


def package_root() -> str:
    """The folder that holds the ``kernel`` and ``tuner`` packages this process imports (a checkout
    or site-packages), for the contestants' processes: never this file's own location."""
    import tuner

    return str(Path(tuner.__file__).resolve().parent.parent)


def plain(config) -> bool:
    """Every knob of the config off."""
    return all(getattr(config, axis.name) == axis.plain for axis in type(config).knobs())


def plain_study(study, path: Path) -> str:
    """A study file at ``path`` with ``study``'s first shape and tiles and every knob off (the race
    without knobs); returns the path. The study's restrictions stay."""
    shape = study.shapes[0]
    lines = [f'name = "{study.name}_plain"', "", "[problem]", f"batch = {shape.batch}", f"heads = {shape.heads}",
             f"n_q = {shape.n_q}", f"n_k = {shape.n_k}", f"head_dim = {shape.head_dim}", f'dtype = "{shape.dtype}"',
             f"causal = {str(shape.causal).lower()}", "", "[space]"]
    for axis in study.kernel.config_type.axes():
        values = [axis.plain] if axis.knob else list(study.space[axis.name])
        lines.append(f"{axis.name} = {json.dumps(values)}")
    if study.restrictions:
        lines.append(f"restrictions = {json.dumps(list(study.restrictions))}")
    lines += ["", "[objective]", f'metric = "{study.metric}"', "", "[timing]",
              f"warmup_ms = {study.timing.warmup_ms}", f"rep_ms = {study.timing.rep_ms}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _sweep(study_arg: str, scratch: str, tag: str, env: dict) -> tuple[float, list, str]:
    """One cold grid sweep without finalists: (wall s, its rows, its own split of the time).
    Raises RuntimeError with its output."""
    from tuner.store import Store
    from tuner.winners import measured_on

    db = f"{scratch}/{tag}-race.db"
    started = time.perf_counter()
    sweep = subprocess.run([sys.executable, "-m", "tuner.sweep", "--gpu", "auto", "--study", study_arg,
                            "--sampler", "grid", "--storage", f"sqlite:///{db}", "--no-outputs", "--finalists", "0"],
                           env={**env, "TRITON_CACHE_DIR": f"{scratch}/{tag}-sweep-triton",
                                "FA2_TUNER_CACHE": f"{scratch}/{tag}-fa2"}, capture_output=True, text=True,
                           cwd=scratch)
    wall = time.perf_counter() - started
    if sweep.returncode != 0:
        raise RuntimeError(sweep.stdout[-2000:] + sweep.stderr[-3000:])
    split = next((line for line in (sweep.stdout + sweep.stderr).splitlines() if line.startswith("wall time")), "")
    return wall, measured_on(Store(f"sqlite:///{db}", create=False).results())[1], split


def race(study_arg: str, plain_arg: str, shape, configs: list, scratch: str) -> dict:
    """Both contestants from cold caches, on ``configs`` with their knobs and on the plain ones alone
    (``study_arg`` and ``plain_arg``: the studies the sweep runs, the same configs). Returns, for
    ``with`` and ``without`` knobs: each contestant's wall s, its best, and what it timed.

    Raises:
        RuntimeError: a contestant failed; the message holds its output's tail.
    """
    from tuner.gate import edges_checked
    from tuner.winners import winner

    env = {**os.environ, "PYTHONPATH": f"{package_root()}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    groups = [[c.key for c in configs if plain(c)], [c.key for c in configs if not plain(c)]]
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", AUTOTUNE_SCRIPT, json.dumps(groups), json.dumps(shape.__dict__)],
                            capture_output=True, text=True, env={**env, "TRITON_CACHE_DIR": f"{scratch}/autotune"})
    autotune_wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    first, rest = answer["groups"][0], answer["groups"][1:]
    results = {}
    for mode, study, keys in (("without", plain_arg, groups[0]), ("with", study_arg, groups[0] + groups[1])):
        wall, rows, split = _sweep(study, scratch, mode, env)
        timed = {r.config for r in rows if r.status == "timed"}
        picked = first if mode == "without" else min([first, *rest], key=lambda g: g["best_ms"] or float("inf"))
        results[mode] = {"autotune_wall": autotune_wall - sum(g["seconds"] for g in rest) if mode == "without"
                         else autotune_wall, "autotune_best": picked["best"], "configs": len(keys),
                         "autotune_calls_s": [g["seconds"] for g in ([first] if mode == "without" else [first, *rest])],
                         "sweep_wall": wall, "sweep_best": winner(rows, shape.label), "sweep_timed": len(timed),
                         "sweep_edges": len({r.config for r in rows if r.status == "timed" and edges_checked(r)}),
                         "stray": sorted(timed - set(keys)), "sweep_split": split}
    return results


def side_by_side(shape, picks: dict[str, str], rounds: int = 5) -> dict[str, float]:
    """The winners' median ms, timed together in rotating rounds in this process."""
    import statistics

    from benchmarks.finalists import retime_rounds

    measured = retime_rounds(shape, list(dict.fromkeys(picks.values())), rounds, sdpa=False)
    return {name: statistics.median(s.ms for s in measured.samples[key]) for name, key in picks.items()}


def speed(study_name: str, markdown: Path | None) -> int:
    """Both races, each contestant from cold caches, then each race's winners side by side."""
    import tempfile

    import torch

    from kernel.measure.timing import environment, environment_line, warm_gpu
    from tuner import budget
    from tuner.gpus import detect
    from tuner.study import load

    if not torch.cuda.is_available():
        print("speed: error: no CUDA GPU is visible here, and it races the autotuner on one", file=sys.stderr)
        return 2
    study = load(study_name)
    shape, gpu = study.shapes[0], detect()
    configs = [c for c in study.configs() if budget.verdict(c, shape, gpu, None).launchable
               and study.allowed(c, shape.head_dim)]
    env = environment()
    with tempfile.TemporaryDirectory() as scratch:
        try:
            study_arg = str(Path(study_name).resolve()) if Path(study_name).is_file() else study_name  # cwd moves
            results = race(study_arg, plain_study(study, Path(scratch) / "plain.toml"), shape, configs, scratch)
        except RuntimeError as failure:
            print(failure, file=sys.stderr)
            return 1
    warm_gpu()
    for result in results.values():
        result["side"] = side_by_side(shape, {"autotune": result["autotune_best"], "sweep": result["sweep_best"]})
    text = "\n".join(report(environment_line(env), study_name, shape, gpu.name, results))
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0


def report(env_line: str, study_name: str, shape, gpu: str, results: dict) -> list[str]:
    """The race's markdown: a row per contestant per race, and the closing line with both ratios."""
    lines = [env_line, f"Command: python -m benchmarks.search speed --study {study_name}",
             f"Shape {shape.label}; the study's configs that the budget model lets launch on {gpu}, the same list "
             "for both contestants (autotune through kernel.triton.autotune.AutotunedFlashAttention, knobs as "
             "tuner.emit writes them), and its plain configs alone; cold Triton and tuner caches for each. "
             "Autotune takes the plain configs, then those with knobs, in one process: without knobs is its "
             "process less the second call.", "",
             "| race | contestant | configs | wall time (s) | best config | its ms, timed side by side |",
             "|---|---|---|---|---|---|"]
    ratios = []
    for mode in ("with", "without"):
        r = results[mode]
        calls = " + ".join(f"{s:.1f}" for s in r["autotune_calls_s"])
        lines += [f"| {mode} knobs | @triton.autotune, first call | {r['configs']} | {r['autotune_wall']:.1f} "
                  f"(calls {calls}) | {r['autotune_best']} | {r['side']['autotune']:.4f} |",
                  f"| {mode} knobs | tuner.sweep --sampler grid | {r['sweep_timed']} timed "
                  f"({r.get('sweep_edges', r['sweep_timed'])} checked on the edge shapes too) | {r['sweep_wall']:.1f} "
                  f"(whole command) | {r['sweep_best']} | {r['side']['sweep']:.4f} |"]
        if r["stray"]:
            lines.append(f"| {mode} knobs | (the sweep timed configs outside the list: {r['stray'][:5]}) | | | | |")
        ratios.append(f"{r['autotune_wall'] / r['sweep_wall']:.2f}x {mode} knobs ({r['configs']} configs; winners "
                      f"{100 * abs(r['side']['sweep'] / r['side']['autotune'] - 1):.1f}% apart)")
    lines += ["", "Speed-up of the sweep over autotune (process wall times): " + "; ".join(ratios) + "."]
    lines += [f"The sweep {mode} knobs, its own split: {results[mode]['sweep_split']}" for mode in ("with", "without")
              if results[mode].get("sweep_split")]
    return lines


if __name__ == "__main__":
    print("benchmarks.race is run by `python -m benchmarks.search speed` (see its --help)", file=sys.stderr)
    sys.exit(2)
