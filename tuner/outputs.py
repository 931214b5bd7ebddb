"""What a sweep leaves besides the store: the dashboards and the emitted config list, the
``--profile`` of each shape's best configs, and the closing lines of a run without a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.budget_only import optuna_study_name
from tuner.records import RunContext
from tuner.status import Status
from tuner.store import Store

__all__ = ["budget_only_ending", "profile_best", "write_outputs"]


def budget_only_ending(args, ctx: RunContext, db: Store, counts) -> str:
    """The closing lines of a run without a GPU: what it wrote, what it could not, what to run next."""
    fit = counts.get(Status.PENDING, 0)
    configs = Path(args.out) / "configs" / f"{ctx.study.name}_{ctx.target.name}_configs.py"
    return "\n".join([
        "",
        f"No CUDA GPU here, so the sweep stopped after the budget stage: {fit} of {sum(counts.values())} configs fit "
        f"{ctx.target.name} and wait to be checked and timed, which needs the GPU itself.",
        f"No config list was written ({configs} lists timed configs, and none was timed). To time them, run the "
        f"same command on a machine with the GPU (--gpu {ctx.target.name}, or --gpu auto there), with this database "
        f"copied along or --storage naming one both machines reach.",
        f"Results: {db.url}; the verdicts are also the Optuna study {optuna_study_name(ctx)!r} "
        f"(pip install optuna-dashboard && optuna-dashboard {db.url}): fits are COMPLETE trials valued by the "
        f"shared memory they use, rejections "
        f"PRUNED, compile errors FAIL, each with its reason."])


def profile_best(args, ctx: RunContext, db: Store) -> None:
    """``--profile``: counters for each shape's best configs; a missing ncu or GPU skips it, saying why."""
    if not args.profile:
        return
    from tuner import profile

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    try:
        ncu = profile.find_ncu()
        if args.device != "cuda":
            raise profile.ProfileError("ncu profiles GPU kernels, and this sweep ran in the interpreter")
        rows = profile.profile_study(db, ctx.study, ctx.target.name, ctx.gpu_label, args.profile, ncu=ncu, say=say)
    except profile.ProfileError as exc:
        say(f"profile skipped: {exc}")
        return
    print("\n".join(profile.verdict_lines(rows)))


def write_outputs(args, ctx: RunContext, db: Store) -> None:
    """Dashboards and the emitted config list, from the store (skipped with --no-outputs)."""
    if args.no_outputs:
        return
    from tuner import dashboard, emit

    folder = Path(args.out) / "dashboards"
    pages = dashboard.build_all(db, folder, reuse=True)      # a re-run that stored nothing new keeps them
    print(f"dashboards: {len(pages)} pages in {folder}/ (open {folder / 'index.html'})")
    rows = db.results(ctx.study.name, ctx.target.name, ctx.gpu_label)
    if any(r.status == Status.TIMED for r in rows):
        path = Path(args.out) / "configs" / f"{ctx.study.name}_{ctx.target.name}_configs.py"
        try:
            emitted = emit.emit(db, ctx.study, ctx.target, ctx.gpu_label)
        except emit.EmitError as exc:
            print(f"no config list emitted: {exc}", file=sys.stderr)
            return
        emit.write(emitted, path)
        print(f"config list: {path} ({len(emitted.entries)} configs for @triton.autotune)")
