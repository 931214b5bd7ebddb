"""The race behind ``python -m benchmarks.search speed``: ``@triton.autotune`` against the sweep.

Both contestants get the same configs, knobs included: the study's configs that the budget
model lets launch on the GPU present. ``@triton.autotune`` gets them as ``triton.Config``
objects written the way ``tuner.emit`` writes them (TMA as a kwarg), through the autotuned
entry point (:class:`kernel.autotuned.AutotunedFlashAttention`, which sets the TMA
allocator); the sweep gets the study itself, grid-sampled, without finalists. Each runs in
its own process from cold Triton and tuner caches. The race is run with the knobs (the
whole list) and without them (its plain configs, a study of the same tiles with ``tma =
[false]``), and the closing line gives both ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

KNOBS = ("with", "without")      # the races: the whole list, then its plain configs

_AUTOTUNE_SCRIPT = textwrap.dedent("""
    import json, sys, time, torch
    from benchmarks.race import autotune_configs
    from kernel.autotuned import AutotunedFlashAttention
    from tuner.kernels.triton_fwd import KERNEL
    keys, shape = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    configs = autotune_configs(keys)
    q, k, v = (torch.randn(shape["batch"], shape["heads"], shape["n_q"], shape["head_dim"], device="cuda",
                           dtype=torch.bfloat16) for _ in range(3))
    tuned = AutotunedFlashAttention(configs, ["N_Q", "N_K", "HEAD_DIM", "CAUSAL"])
    torch.cuda.synchronize()
    start = time.perf_counter()
    tuned(q, k, v, shape["causal"])
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    best = KERNEL.from_triton(tuned.kernel.best_config).key
    print(json.dumps({"seconds": elapsed, "configs": len(configs), "best": best}))
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


def race(study_arg: str, shape, keys: list[str], scratch: str, tag: str) -> dict:
    """Both contestants from cold caches on ``keys`` (``study_arg``: the study the sweep runs, the same
    configs): autotune's answer and wall s, the sweep's best, the configs it timed, its wall s.

    Raises:
        RuntimeError: a contestant failed; the message holds its output's tail.
    """
    from tuner.store import Store
    from tuner.winners import measured_on, winner

    base_env = {**os.environ, "PYTHONPATH": f"{package_root()}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _AUTOTUNE_SCRIPT, json.dumps(keys), json.dumps(shape.__dict__)],
                            capture_output=True, text=True,
                            env={**base_env, "TRITON_CACHE_DIR": f"{scratch}/{tag}-autotune-triton"})
    autotune_wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    db = f"{scratch}/{tag}-race.db"
    started = time.perf_counter()
    sweep = subprocess.run([sys.executable, "-m", "tuner.sweep", "--gpu", "auto", "--study", study_arg,
                            "--sampler", "grid", "--storage", f"sqlite:///{db}", "--no-outputs", "--finalists", "0"],
                           env={**base_env, "TRITON_CACHE_DIR": f"{scratch}/{tag}-sweep-triton",
                                "FA2_TUNER_CACHE": f"{scratch}/{tag}-fa2"}, capture_output=True, text=True,
                           cwd=scratch)
    sweep_wall = time.perf_counter() - started
    if sweep.returncode != 0:
        raise RuntimeError(sweep.stdout[-2000:] + sweep.stderr[-3000:])
    _, rows = measured_on(Store(f"sqlite:///{db}", create=False).results())
    timed = {r.config for r in rows if r.status == "timed"}
    return {"autotune": json.loads(result.stdout.strip().splitlines()[-1]), "autotune_wall": autotune_wall,
            "sweep_best": winner(rows, shape.label), "sweep_timed": len(timed), "sweep_wall": sweep_wall,
            "configs": len(keys), "stray": sorted(timed - set(keys))}


def side_by_side(shape, picks: dict[str, str], rounds: int = 5) -> dict[str, float]:
    """The winners' median ms, timed together in rotating rounds in this process."""
    import statistics

    from benchmarks.finalists import retime_rounds

    measured = retime_rounds(shape, list(dict.fromkeys(picks.values())), rounds, sdpa=False)
    return {name: statistics.median(s.ms for s in measured.samples[key]) for name, key in picks.items()}


def speed(study_name: str, markdown: Path | None, knobs: tuple[str, ...] = KNOBS) -> int:
    """The races (``knobs``: with, without, or both), each contestant from cold caches, then the winners."""
    import tempfile

    import torch

    from kernel.timing import environment, environment_line, warm_gpu
    from tuner import budget
    from tuner.gpus import detect
    from tuner.study import load

    if not torch.cuda.is_available():
        print("speed needs a CUDA GPU", file=sys.stderr)
        return 1
    study = load(study_name)
    shape, gpu = study.shapes[0], detect()
    launchable = [c for c in study.configs() if budget.verdict(c, shape, gpu, None).launchable
                  and study.allowed(c, shape.head_dim)]
    env = environment()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for mode in knobs:
            configs = launchable if mode == "with" else [c for c in launchable if plain(c)]
            study_arg = study_name if mode == "with" else plain_study(study, Path(scratch) / "plain.toml")
            try:
                results[mode] = race(study_arg, shape, [c.key for c in configs], scratch, mode)
            except RuntimeError as failure:
                print(failure, file=sys.stderr)
                return 1
            print(f"race {mode} knobs: {json.dumps(results[mode])}", file=sys.stderr, flush=True)
    warm_gpu()
    for result in results.values():
        result["side"] = side_by_side(shape, {"autotune": result["autotune"]["best"], "sweep": result["sweep_best"]})
    text = "\n".join(report(env_line=environment_line(env), study_name=study_name, shape=shape, gpu=gpu.name,
                            results=results))
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0


def report(env_line: str, study_name: str, shape, gpu: str, results: dict) -> list[str]:
    """The race's markdown: a row per contestant per race, and the closing line with both ratios."""
    lines = [env_line, f"Command: python -m benchmarks.search speed --study {study_name} --knobs "
                       f"{' '.join(results)}",
             f"Shape {shape.label}; the study's configs that the budget model lets launch on {gpu}, the same list "
             "for both contestants (autotune through kernel.autotuned.AutotunedFlashAttention, knobs as "
             "tuner.emit writes them); cold Triton and tuner caches for each.", "",
             "| race | contestant | configs | wall time (s) | best config | its ms, timed side by side |",
             "|---|---|---|---|---|---|"]
    ratios = []
    for mode, r in results.items():
        lines += [f"| {mode} knobs | @triton.autotune, first call | {r['autotune']['configs']} | "
                  f"{r['autotune']['seconds']:.1f} (process {r['autotune_wall']:.1f}) | {r['autotune']['best']} | "
                  f"{r['side']['autotune']:.4f} |",
                  f"| {mode} knobs | tuner.sweep --sampler grid | {r['sweep_timed']} timed | {r['sweep_wall']:.1f} "
                  f"(whole command) | {r['sweep_best']} | {r['side']['sweep']:.4f} |"]
        ratios.append(f"{r['autotune_wall'] / r['sweep_wall']:.2f}x {mode} knobs ({r['configs']} configs; winners "
                      f"{100 * abs(r['side']['sweep'] / r['side']['autotune'] - 1):.1f}% apart)")
        if r["stray"]:
            lines.append(f"| {mode} knobs | (the sweep timed configs outside the list: {r['stray'][:5]}) | | | | |")
    lines += ["", "Speed-up of the sweep over autotune (process wall times): " + "; ".join(ratios) + "."]
    return lines
