"""``python -m benchmarks.search``: how fast the tuner finds a near-best config.

    python -m benchmarks.search speed [--study autotune_race_200] [--markdown PATH]   # GPU
    python -m benchmarks.search quality --storage URL --study article --gpu sm_90 [--shape ...]
    python -m benchmarks.search stability --storage URL --study article --gpu sm_90 [--top 5] [--repeats 5]  # GPU

``speed`` times, in one GPU run and each from cold caches, ``@triton.autotune``'s first
call (through the autotuned entry point) and ``tuner.sweep --sampler grid`` over the same
config list, knobs included, and over its plain configs alone, and times each race's
winners side by side (:mod:`benchmarks.race`).

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
import statistics
import sys
from pathlib import Path

from benchmarks.race import speed
from tuner.formatting import usage_error

# ----------------------------------------------------------------------------- quality


def recorded_store(path: Path, folder: str) -> str:
    """A SQLite store in ``folder`` holding recorded rows (JSON, gzipped or not: ``{"runs": [...],
    "results": [...]}`` as in ``tests/fixtures/h200_results.json.gz``); its URL."""
    import datetime as dt
    import gzip
    import json

    from tuner.store import Result, Run, Store

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        data = json.load(handle)

    def decoded(table, values: dict) -> dict:
        return {c.name: dt.datetime.fromisoformat(values[c.name]) if isinstance(values.get(c.name), str)
                and c.type.python_type is dt.datetime else values.get(c.name) for c in table.columns}

    db = Store(f"sqlite:///{folder}/recorded.db")
    with db.session() as session:
        session.add_all(Run(**decoded(Run.__table__, run)) for run in data["runs"])
        session.add_all(Result(**decoded(Result.__table__, row)) for row in data["results"])
    return db.url


def save_recorded(url: str, study: str, path: Path) -> int:
    """Write the store's runs and result rows of ``study`` to ``path`` (gzipped JSON where it ends
    in .gz), as :func:`recorded_store` reads them; returns the number of result rows written."""
    import datetime as dt
    import gzip
    import json

    from tuner.store import Result, Run, Store

    def plain(row, table) -> dict:
        return {c.name: (lambda v: v.isoformat() if isinstance(v, dt.datetime) else v)(getattr(row, c.name))
                for c in table.columns}

    db = Store(url, create=False)
    with db.session() as session:
        results = [plain(r, Result.__table__) for r in session.query(Result).filter(Result.study == study)]
        run_ids = {r["run_id"] for r in results}
        runs = [plain(r, Run.__table__) for r in session.query(Run).filter(Run.id.in_(run_ids))]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as handle:
        json.dump({"source": f"study {study!r} of {url}", "runs": runs, "results": results}, handle)
    return len(results)


def _replay(sampler_name: str, seed: int, table: dict, space, budget_trials: int, target: float, warm=()):
    """One search against recorded timings: trials, distinct configs, configs that were timed
    (the GPU's share: a rejected config costs no GPU time) and recorded seconds to reach ``target``.
    ``warm``: configs enqueued first, as a new study of the sweep does (:func:`tuner.records.warm_configs`)."""
    import optuna

    from tuner import search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = search.make_sampler(sampler_name, space, seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for config in warm:
        study.enqueue_trial(space.trial_params(config, sampler_name == "tpe"), skip_if_exists=True)
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


def _warm_for(db, study, target, label: str, gpu: str) -> tuple:
    """The configs a new study of one shape would try first (:func:`tuner.records.pick_warm`): the
    best of the store's related rows (same kernel, pass and head dim), less every row of that shape
    on that GPU (in a replay they would be the answer itself)."""
    from tuner.records import pick_warm

    head_dim = next(s.head_dim for s in study.shapes if s.label == label)
    related = [r for r in db.timed_results(study.kernel_name, study.pass_, [head_dim])
               if not (r.shape == label and r.gpu == gpu)]
    return tuple(pick_warm(related, study, target))


def _quality_line(label: str, valid: int, sampler: str, results: list, seeds: int, warm: int, cap: int) -> str:
    found = [r for r in results if r[0] is not None]
    trials = [r[0] if r[0] is not None else cap for r in results]
    distinct, spent, timed = ([r[i] for r in results] for i in (1, 2, 3))
    return (f"| {label} | {valid} | {sampler}{f' warm ({warm})' if warm else ''} | "
            f"{statistics.median(trials):.0f} / {max(trials)} ({100 * statistics.median(trials) / valid:.1f}% / "
            f"{100 * max(trials) / valid:.1f}% of valid) | {statistics.median(distinct):.0f} | "
            f"{statistics.median(timed):.0f} / {max(timed)} ({100 * statistics.median(timed) / valid:.0f}% / "
            f"{100 * max(timed) / valid:.0f}%) | {statistics.median(spent):.0f} / {max(spent):.0f} | "
            f"{len(found)}/{seeds} |")


def quality(url: str, study_name: str, target_name: str, shapes: list[str], samplers: list[str], seeds: int,
            markdown: Path | None, warm: bool = False) -> int:
    from tuner.gpus import GpuSpec
    from tuner.status import Status
    from tuner.store import Store
    from tuner.study import load

    study = load(study_name)
    target = GpuSpec.from_name(target_name)
    db = Store(url, create=False)
    rows = [r for r in db.results(study.name, target.name) if r.gpu != "none"]
    labels = shapes or [s.label for s in study.shapes]
    cap = len(study.space.all_configs())
    lines = [f"Replayed against the grid sweep of study {study.name!r} on {target.name} ({rows[0].gpu}; triton "
             f"{rows[0].triton_version}), {cap} configs in the space.",
             f"Command: python -m benchmarks.search quality --study {study_name} --gpu {target_name} "
             f"--samplers {' '.join(samplers)} --seeds {seeds}{' --warm' if warm else ''}", "",
             "| shape | valid configs | sampler (warm: configs enqueued first) | trials to 2% of best: median / worst "
             "| distinct configs asked | of them timed (valid): median / worst | recorded timing s: median / worst "
             "| found in all seeds |", "|---|---|---|---|---|---|---|---|"]
    for label in labels:
        shape_rows = [r for r in rows if r.shape == label]
        # per-config seconds: the trial's check + time, shared by the study's shapes
        table = {r.config: (r.pct_flash / 100 if r.status == Status.TIMED and r.pct_flash else 0.0,
                            (r.check_s or 0.0) + (r.time_s or 0.0)) for r in shape_rows}
        valid = sum(1 for value, _ in table.values() if value > 0)
        if not valid:
            lines.append(f"| {label} | 0 (no timed row recorded) | | | | | | |")
            continue
        best = max(value for value, _ in table.values())
        starts = [()] + ([_warm_for(db, study, target, label, rows[0].gpu)] if warm else [])
        for sampler in samplers:
            for start in dict.fromkeys(starts):
                results = [_replay(sampler, seed, table, study.space, cap, best / 1.02, start) for seed in range(seeds)]
                lines.append(_quality_line(label, valid, sampler, results, seeds, len(start), cap))
                print(lines[-1], flush=True)
    text = "\n".join(lines)
    if markdown:
        markdown.write_text(text + "\n")
    print(text)
    return 0


# --------------------------------------------------------------------------- stability


def stability_report(verdict, every: dict | None = None, alone: dict | None = None) -> list[str]:
    """Markdown lines for a :class:`tuner.finalists.ShapeVerdict`: each config's spread on the
    figure that decides and on every other figure its rounds allow (``every``:
    :func:`kernel.measure.retime.all_figures` of the same rounds), the clock it held alone where the power
    check ran it (``alone``: :attr:`kernel.measure.retime.Rounds.alone`), and whether the winner is ahead by
    more than the noise."""
    from kernel.measure.retime import spread

    rounds = len(verdict.winner.times)
    wins = {t.config: 0 for t in verdict.ranked}
    for r in range(rounds):
        wins[min(verdict.ranked, key=lambda t: t.decided_by[r]).config] += 1
    others = [name for name in (every or {}) if name != verdict.figure]
    lines = [f"| rank | config | median ms | min | max | spread on {verdict.figure} (decides) | "
             + "".join(f"spread on {name} | " for name in others) + "median MHz | MHz alone | rounds won |",
             "|---|---|---|---|---|---|" + "---|" * len(others) + "---|---|---|"]
    largest = dict.fromkeys(others, 0.0)
    for rank, timing in enumerate(verdict.ranked, start=1):
        mhz = f"{timing.clock_mhz:.0f}" if timing.clock_mhz else "n/a"
        mhz += f" | {alone[timing.config].mhz:.0f}" if timing.config in (alone or {}) else " | -"
        cells = ""
        for name in others:
            value = spread(every[name][timing.config])
            largest[name] = max(largest[name], value)
            cells += f"{100 * value:.2f}% | "
        lines.append(f"| {rank} | {timing.config} | {timing.median:.4f} | {min(timing.times):.4f} | "
                     f"{max(timing.times):.4f} | {100 * timing.spread:.2f}% | {cells}{mhz} | "
                     f"{wins[timing.config]}/{rounds} |")
    spreads = [t.spread for t in verdict.ranked]
    also = "".join(f"; on {name} {100 * value:.2f}%" for name, value in largest.items())
    lines += ["", f"Largest spread on {verdict.figure} {100 * max(spreads):.2f}% (bar {100 * STABILITY_BAR:.1f}%)"
                  f"{also}; {verdict.sentence()}."]
    return lines + [""] + rounds_table(verdict, every)


def rounds_table(verdict, every: dict | None = None) -> list[str]:
    """Each config's deciding figure round by round, with the SM clock the round ran at (where read)
    and the other paired figure in brackets where both were kept (window by window beside cycle by
    cycle): whether a config's rounds move with the clock (a kernel bound by memory more than SDPA
    is, for one) or apart from it."""
    from kernel.measure.retime import PAIRED, PAIRED_CYCLES

    beside = PAIRED if verdict.figure == PAIRED_CYCLES else PAIRED_CYCLES     # sustained: beside its base
    other = (every or {}).get(beside, {})
    rounds = len(verdict.winner.times)
    lines = [f"Round by round: {verdict.figure} @ MHz" + (f" ({beside})" if other else ""), "",
             "| config | " + " | ".join(f"round {r + 1}" for r in range(rounds)) + " |",
             "|---|" + "---|" * rounds]
    for timing in verdict.ranked:
        cells = []
        for r in range(rounds):
            mhz = timing.clocks[r] if r < len(timing.clocks) else None
            cell = f"{timing.decided_by[r]:.4f}" + (f" @ {mhz:.0f}" if mhz else "")
            cells.append(cell + (f" ({other[timing.config][r]:.4f})" if timing.config in other else ""))
        lines.append(f"| {timing.config} | " + " | ".join(cells) + " |")
    return lines


STABILITY_BAR = 0.015


def stability(url: str, study_name: str, target_name: str, shape_label: str | None, top: int, repeats: int,
              markdown: Path | None, protocol: tuple[float | None, float | None] = (None, None),
              retime: str = "adaptive") -> int:
    """Re-time a shape's top configs ``repeats`` times in rotating rounds, SDPA among them, as the
    finalists are (``retime``: the adaptive protocol's windows, or the fixed one's)."""
    import torch

    from benchmarks.finalists import retime_rounds
    from benchmarks.vs_sdpa import make_sets
    from kernel.measure.retime import POWER, all_figures
    from kernel.measure.timing import environment, environment_line, warm_gpu
    from tuner.finalists import judge_rounds
    from tuner.outcome import SDPA_KEYS
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
    rep_ms, settle_ms = protocol
    rounds = retime_rounds(shape, keys, repeats, retime, sets, True, settle_ms, rep_ms, POWER)   # as the finalists
    verdict = judge_rounds(shape.label, rounds)
    every = all_figures(rounds.samples, list(SDPA_KEYS.values()), rounds.alone)
    window = ("each graph captured once, the clock settled once, then short windows" if retime == "adaptive"
              else "each measurement 100 ms of replays to settle the clock, then 200 ms timed")
    header = [environment_line(env),
              f"Command: python -m benchmarks.search stability --study {study_name} --gpu {target_name} "
              f"--shape \"{shape.label}\" --top {top} --repeats {repeats} --retime {retime}",
              f"The top {len(keys)} configs of the store for {shape.label}, each timed {repeats} times in rounds "
              f"whose order rotates with SDPA's backends (GPU time by CUDA-graph replay, {len(sets)} input sets; "
              f"{window}; the SM clock read through NVML as each runs). Decided on: {verdict.figure}.", ""]
    text = "\n".join(header + stability_report(verdict, every, rounds.alone))
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0 if max(t.spread for t in verdict.ranked) <= STABILITY_BAR else 1


def _check_args(args) -> str | None:
    """Every input checked before any work: the first problem as a message, or None."""
    from tuner.gpus import GpuSpec
    from tuner.search import SAMPLERS
    from tuner.store import Store, StoreError
    from tuner.study import StudyError, load

    try:
        if args.command == "record":      # a study as stored, which need not be a study file
            Store(args.storage, create=False)
            return None if not args.out.exists() else f"--out {args.out} exists; name a new file (nothing overwritten)"
        load(args.study)
        if args.command != "speed":
            GpuSpec.from_name(args.gpu)
            if args.command == "quality" and not args.storage:
                if not args.recorded or not args.recorded.is_file():
                    return f"quality needs --storage, or --recorded naming a file (got {args.recorded})"
            else:
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n  python -m benchmarks.search speed\n"
                                            "  python -m benchmarks.search quality --storage sqlite:///h200.db "
                                            "--study article --gpu sm_90 --samplers tpe random --seeds 5")
    sub = parser.add_subparsers(dest="command", required=True)
    p_speed = sub.add_parser("speed", help="@triton.autotune vs the grid sweep, cold cache, one GPU run")
    p_speed.add_argument("--study", default="autotune_race_200",
                         help="the config list: autotune_race_200 (200 configs on an H200, half TMA; default), "
                              "autotune_race_small (48), autotune_race (400), or any study file")
    p_speed.add_argument("--markdown", type=Path)
    p_quality = sub.add_parser("quality", help="trials each sampler needs to reach 2%% of a grid's best")
    p_quality.add_argument("--storage", help="a store holding the grid (or --recorded)")
    p_quality.add_argument("--recorded", type=Path,
                           help="recorded rows as JSON(.gz), e.g. tests/fixtures/h200_results.json.gz, loaded into "
                                "a scratch store instead of --storage")
    p_quality.add_argument("--warm", action="store_true",
                           help="also replay each sampler warm-started from the store's related rows (the same head "
                                "dim, other shapes), as a new study of the sweep is")
    p_quality.add_argument("--study", required=True)
    p_quality.add_argument("--gpu", required=True)
    p_quality.add_argument("--shape", action="append", default=[], help="shape label (repeatable; default all)")
    p_quality.add_argument("--samplers", nargs="+", default=["tpe", "random"])
    p_quality.add_argument("--seeds", type=int, default=5)
    p_quality.add_argument("--markdown", type=Path)
    p_record = sub.add_parser("record", help="write a store's rows of a study to a file --recorded reads")
    p_record.add_argument("--storage", required=True)
    p_record.add_argument("--study", required=True, help="the study name as stored (e.g. article)")
    p_record.add_argument("--out", type=Path, required=True, help="the file, e.g. grid.json.gz")
    p_stability = sub.add_parser("stability", help="re-time a study's top configs and report their spread")
    p_stability.add_argument("--storage", required=True)
    p_stability.add_argument("--study", required=True)
    p_stability.add_argument("--gpu", required=True)
    p_stability.add_argument("--shape", help="shape label (default the study's largest non-causal shape)")
    p_stability.add_argument("--top", type=int, default=5)
    p_stability.add_argument("--repeats", type=int, default=5)
    p_stability.add_argument("--markdown", type=Path)
    p_stability.add_argument("--retime", choices=("adaptive", "fixed"), default="adaptive",
                             help="the finalists' protocol whose windows are used (default adaptive)")
    p_stability.add_argument("--settle-ms", type=float, help="adaptive: settling once (default the finalists')")
    p_stability.add_argument("--rep-ms", type=float, help="adaptive: each timed window (default the finalists')")
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    problem = _check_args(args)
    if problem:
        return usage_error(parser, problem)
    if args.command == "stability":
        return stability(args.storage, args.study, args.gpu, args.shape, args.top, args.repeats, args.markdown,
                         (args.rep_ms, args.settle_ms), args.retime)
    if args.command == "speed":
        return speed(args.study, args.markdown)
    if args.command == "record":
        print(f"{save_recorded(args.storage, args.study, args.out)} rows of study {args.study!r} written to {args.out}")
        return 0
    if args.storage:
        return quality(args.storage, args.study, args.gpu, args.shape, args.samplers, args.seeds, args.markdown,
                       args.warm)
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        return quality(recorded_store(args.recorded, scratch), args.study, args.gpu, args.shape, args.samplers,
                       args.seeds, args.markdown, args.warm)


if __name__ == "__main__":
    sys.exit(main())
