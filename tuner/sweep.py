"""``python -m tuner.sweep``: tune the kernel's configs for a GPU with an Optuna study.

Each trial is one config, taken through four stages; each stage's outcome is stored
with its reason, and a config stops at the first stage that rejects it: the budget
(restrictions and the shared-memory model for the target), the compile (for the target
and the GPU present, on all cores), the correctness gate, and the timing next to SDPA.
After the search each shape's finalists are re-timed together. The work is done by
:class:`tuner.driver.Sweep`; this module parses, checks every input before anything is
written, opens the run, and writes the outputs.
"""

from __future__ import annotations

import shlex
import sys

if __name__ == "__main__":      # first: the GPU worker's imports begin beside this module's (tuner.spawn)
    from tuner.spawn import quiet_interrupt_while_starting, start_early_for_sweep

    quiet_interrupt_while_starting()       # seconds of imports: a Ctrl-C there ends the command, no traceback
    start_early_for_sweep(sys.argv[1:])

import argparse
import contextlib
import os
import signal
import socket
import threading
import time

from tuner import retry, search
from tuner.budget import CacheError, settle_caches
from tuner.contenders import EDGE_GATES
from tuner.driver import Sweep, SweepOptions
from tuner.finalists import RETIMES
from tuner.formatting import nonempty, usage_error
from tuner.gate import EDGE_MARGIN
from tuner.outcome import WorkerFailed
from tuner.outputs import budget_only_ending, profile_best, write_outputs
from tuner.pre_gpu_stages import dropped, for_target
from tuner.records import RunContext
from tuner.report import process_line, summary
from tuner.store import (
    DEFAULT_OUT,
    INTERRUPTED,
    Run,
    RunHeartbeat,
    Store,
    StoreError,
    mark_gone_runs,
    now,
)
from tuner.study import PASSES, StudyError, load
from tuner.sweep_args import check_interpreter, check_numbers, check_paths, resolve_gpus, storage_url, workers_for
from tuner.trace import TIMELINE, idle_line

DEFAULT_STUDY = "article"
EXAMPLES = f"""examples:
  python -m tuner.sweep --gpu sm_89
  python -m tuner.sweep --gpu sm_90 --study article --sampler grid
  python -m tuner.sweep --gpu sm_89 --study my_study.toml --sampler tpe --trials 120
  python -m tuner.sweep --gpu auto --study long_context --timeout 1800 --storage sqlite:///my.db
  python -m tuner.sweep --gpu sm_90 --study head_dim_128 --profile 3
  python -m tuner.sweep --gpu sm_90 --study hopper_knobs --sampler grid   # TMA, warp specialization, ...
  python -m tuner.sweep --gpu sm_90 --sampler grid --workers 2
  python -m tuner.sweep --gpu sm_90 --storage postgresql+psycopg://tuner@dbhost/fa2   # same command on each host
  python -m tuner.sweep --gpu sm_90 --trial-timeout 600 --retry-failed   # the configs that timed out, again

Outputs go to --out ({DEFAULT_OUT}/ by default): the database tuning.db, dashboards/ and
configs/<study>_<target>_configs.py, a @triton.autotune list to paste into your code.
Interrupted (Ctrl-C, kill -9, a crash)? Run the same command again to resume: finished trials are
kept, the one in flight is redone, nothing is timed twice (configs stored as timeout or crashed
are run again only under --retry-failed). Ctrl-C marks the run interrupted in the
store (exit 130); a run whose process is gone is marked so by the next sweep. Without a CUDA GPU the
sweep runs the budget stage for --gpu (compiling for it on the CPU), stores it, and stops; its
verdicts are also the Optuna study <study>@<target>-budget, for optuna-dashboard.
A study restriction that raises for a config (e.g. divides by zero) rejects that config as
restricted, naming the error; one that cannot be parsed refuses the study file.
--storage refuses a database that holds other tables and none of ours, unless --storage-init.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.sweep",
        description="Tune the FA2 kernel's tiles, warps and stages for a GPU: budget check, compile, "
                    "correctness gate and timing against SDPA, stored in a database an Optuna study shares.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="auto",
                        help="target whose shared-memory and register budget configs must fit: sm_80, sm_89, "
                             "sm_90, a card name (rtx4090, h200, ...) or auto, the GPU present (default auto)")
    parser.add_argument("--study", default=DEFAULT_STUDY,
                        help=f"a study file, or the name of a shipped study (default {DEFAULT_STUDY})")
    parser.add_argument("--pass", dest="pass_", choices=PASSES, default=None,
                        help="the pass to tune: fwd, bwd (the backward, against SDPA's) or fwd+bwd (a training step's "
                             "attention); default the study's own (fwd). Another pass than the study file's tunes its "
                             "shapes over that pass's default space, stored as study <name>-<pass>")
    parser.add_argument("--sampler", default="tpe", help=f"one of {', '.join(search.SAMPLERS)} (default tpe; "
                                                          "grid times every config of the space once)")
    parser.add_argument("--trials", type=int, help="total trials for the study, counting earlier runs "
                                                   "(default 100; ignored by grid, which stops when the space is "
                                                   "done). A config the budget refuses costs none: Optuna learns it "
                                                   "is infeasible and is asked again (as many again at most)")
    parser.add_argument("--timeout", type=float, help="stop asking for new trials after this many seconds")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--storage", type=nonempty, help="SQLAlchemy database URL for results and the Optuna study "
                                          "(default sqlite:///OUT/tuning.db)")
    parser.add_argument("--storage-init", action="store_true",
                        help="add the tuner's tables to a database that holds other tables and none of ours (refused "
                             "without it); its journal mode is left as it is")
    parser.add_argument("--seed", type=int, help="sampler seed, for a reproducible search")
    parser.add_argument("--jobs", type=int, help="compile processes (default: all cores but two)")
    parser.add_argument("--batch", type=int, help="half the trials in flight: asked ahead, compiling or waiting "
                                                  "for a device (default: two waves of the compile pool, at least "
                                                  "cores - 2; tpe: 4 to 16)")
    parser.add_argument("--trial-timeout", type=float, default=180.0,
                        help="seconds before a trial's worker is killed and the config recorded as a timeout "
                             "(default 180)")
    parser.add_argument("--workers", type=int,
                        help="GPU worker processes, one per visible device, all on one study (default: every "
                             "visible GPU). Several hosts share a study through --storage postgresql+psycopg://...")
    _finalist_flags(parser)
    parser.add_argument("--edge-gate", choices=EDGE_GATES, default=EDGE_GATES[0],
                        help="whose gate edge shapes (one valid row and key in the last tiles, odd lengths) are "
                             "checked where they need a binary of their own: contenders (configs timed within "
                             f"{EDGE_MARGIN}x of the best so far at some shape; default) or all")
    parser.add_argument("--profile", type=int, nargs="?", const=3, metavar="K",
                        help="at the end, profile each shape's best K configs (default 3) and SDPA with Nsight "
                             "Compute, as python -m tuner.profile does; skipped, saying why, without ncu")
    parser.add_argument("--retry-failed", action="store_true", help=retry.HELP)
    parser.add_argument("--no-outputs", action="store_true", help="skip the dashboards and the emitted config list")
    parser.add_argument("--trace", metavar="FILE", help="write the run's timeline (each trial's ask, compiles, check, "
                                                        "timing and store) to FILE, a new Chrome trace-event JSON "
                                                        "file for ui.perfetto.dev; and say how long the GPU sat idle")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    return parser


def _finalist_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the finalists' re-timing after the search."""
    parser.add_argument("--finalists", type=int, default=5,
                        help="configs per shape re-timed together after the search (default 5; 0: none)")
    parser.add_argument("--retime", choices=RETIMES, default="adaptive",
                        help="the finalists' protocol: adaptive (each graph built once, the clock settled once "
                             "per shape, rounds until the leader is outside the noise; default) or fixed (5 rounds, "
                             "each measurement settled 100 ms and timed 200 ms: the protocol before)")
    parser.add_argument("--retime-finalists", action="store_true",
                        help="re-time the finalists even when this run timed nothing new and the store holds "
                             "their verdicts (which otherwise stand: a re-run emits the same list, measuring nothing)")
    parser.add_argument("--rounds", type=int,
                        help="adaptive: the most rounds (default 10); fixed: the rounds (default 5)")


def main(argv=None) -> int:
    TIMELINE.mark("the interpreter, imports", first=True)
    parser = build_parser()
    args = parser.parse_args(argv)
    # Every input is checked before anything is created or written.
    try:
        study = load(args.study).for_pass(getattr(args, "pass_", None))
    except StudyError as exc:
        return usage_error(parser, f"--study: {exc}")
    if args.sampler not in search.SAMPLERS:
        return usage_error(parser, f"--sampler {args.sampler!r} is not one of {', '.join(search.SAMPLERS)}")
    try:
        search.distributions(study.space, args.sampler)      # what the sampler cannot encode, before any work
    except ValueError as exc:
        return usage_error(parser, f"--study {study.path} [space] under --sampler {args.sampler}: {exc}; "
                                   f"or use --sampler grid or random")
    problem = check_numbers(args)
    if problem:
        return usage_error(parser, problem)
    problem = check_paths(args)
    if problem:
        return usage_error(parser, problem)
    url, problem = storage_url(args)
    if problem:
        return usage_error(parser, problem)
    problem = check_interpreter(args, study)
    if problem:
        return usage_error(parser, problem)
    resolved = resolve_gpus(args, parser)
    if isinstance(resolved, int):
        return resolved
    target, present, gpu_label = resolved
    TIMELINE.mark("the study, the inputs, the GPU present")
    workers, problem = workers_for(args, present)
    if problem:
        return usage_error(parser, problem)
    args.workers = workers
    try:
        warning = settle_caches()      # before any compile worker starts, and before anything is written
    except CacheError as exc:
        return usage_error(parser, str(exc))
    if warning:
        print(warning, file=sys.stderr)
    try:
        db = Store(url, adopt=args.storage_init)
        stored = db.claim_study(study.name, study.fingerprint, study.path)
    except StoreError as exc:
        return usage_error(parser, f"--storage: {exc}")
    if stored.fingerprint != study.fingerprint:
        return usage_error(parser, f"--study: {study.path} is named {study.name!r}, but {url} already holds a "
                                   f"different study under that name (from {stored.path}); rename the new study "
                                   f"or use another --storage, so that the two are never mixed")
    TIMELINE.mark("the caches, the store")
    return _run(args, parser, for_target(study, target), target, present, gpu_label, db, argv)


def _run(args, parser, study, target, present, gpu_label, db: Store, argv) -> int:
    from kernel.measure.timing import environment

    if args.trace:        # every input checked: the run starts here (its first span, from the process's start)
        TIMELINE.enable()
    with TIMELINE.span("the environment (versions, GPU, driver)", "sweep"):
        env = environment()
    command = " ".join(["python -m tuner.sweep", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    for gone in mark_gone_runs(db, search.GRACE_S):
        print(f"note: run {gone.id} ({gone.command!r} on {gone.host}, pid {gone.pid}) was left running by a process "
              f"that is gone (kill -9, a crash, a lost host): marked {INTERRUPTED}", file=sys.stderr)
    run = Run(study=study.name, target=target.name, gpu=gpu_label, sampler=args.sampler, command=command,
              torch_version=env["torch"], triton_version=env["triton"], driver=env["driver"],
              kernel=study.kernel_name, pass_=study.pass_, host=socket.gethostname(), pid=os.getpid(),
              heartbeat_at=now())
    db.add(run)
    ctx = RunContext(study=study, target=target, gpu_label=gpu_label, env=env, run_id=run.id)
    heartbeat = RunHeartbeat(db, run.id, search.HEARTBEAT_S)
    heartbeat.start()
    main_thread = threading.current_thread() is threading.main_thread()      # signals are the main thread's
    previous = signal.signal(signal.SIGINT, _first_interrupt) if main_thread else None
    try:
        with TIMELINE.span("sweep", "sweep"):
            return _search_and_outputs(args, ctx, present, db, command)
    except KeyboardInterrupt:
        if main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN)     # the message and the row come first
        return _interrupted(db, ctx, command, budget_only=present is None and args.device != "cpu")
    except BaseException:     # an error no stage expected: the run is never left marked running
        _mark(db, study.name, run.id, "failed")
        raise
    finally:
        heartbeat.stop()
        if main_thread:
            signal.signal(signal.SIGINT, previous)
        if args.trace:
            TIMELINE.write(args.trace)
            print(f"{idle_line(TIMELINE)}; trace in {args.trace}", file=sys.stderr)
            TIMELINE.disable()


def _mark(db: Store, study: str, run_id: int, status: str) -> None:
    """Mark a run that is still ``running`` (an error on the way out must not hide the first one)."""
    with contextlib.suppress(Exception):
        if next((r.status for r in db.runs(study) if r.id == run_id), None) == "running":
            db.finish_run(run_id, status)


def _first_interrupt(_signum, _frame) -> None:
    """Ctrl-C: say what happens now; a second Ctrl-C drops the trials in flight as well."""
    print("\nCtrl-C: stopping; the trials in flight are finished and stored first (Ctrl-C again to drop them)",
          file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raise KeyboardInterrupt


def _interrupted(db: Store, ctx: RunContext, command: str, budget_only: bool) -> int:
    """After Ctrl-C: the run marked interrupted, what was kept, and the command that resumes."""
    if next((r.status for r in db.runs(ctx.study.name) if r.id == ctx.run_id), None) == "running":
        db.finish_run(ctx.run_id, INTERRUPTED)
    rows = db.results(ctx.study.name, ctx.target.name, ctx.gpu_label)
    mine = len({r.config for r in rows if r.run_id == ctx.run_id})
    kept = (f"interrupted: {mine} config(s) stored by this run, {len({r.config for r in rows})} in the store for "
            f"{ctx.study.name} on {ctx.target.name}")
    if budget_only and not mine:
        kept += " (the budget stage stores its verdicts at its end; its compiles so far are cached, so a rerun "\
                "starts from them)"
    print(f"{kept}; run {ctx.run_id} is marked {INTERRUPTED} in {db.url}. Resume with the same command (nothing "
          f"stored is redone):\n  {command}", file=sys.stderr)
    again = retry.advice(rows, command)
    if again:
        print(again, file=sys.stderr)
    return 130


def _search_and_outputs(args, ctx: RunContext, present, db: Store, command: str) -> int:
    """The search (or, without a GPU, the budget stage), the run's end in the store, and the outputs."""
    sweep = Sweep(ctx, db, present, SweepOptions(
        sampler=args.sampler, trials=args.trials, timeout_s=args.timeout, seed=args.seed, jobs=args.jobs,
        batch=args.batch, trial_timeout_s=args.trial_timeout, device=args.device, finalists=args.finalists,
        rounds=args.rounds, retime=args.retime, workers=args.workers, edge_gate=args.edge_gate,
        retime_finalists=args.retime_finalists, retry_failed=args.retry_failed))
    study, target = ctx.study, ctx.target
    left_out = f" ({', '.join(dropped(study))} left out: {target.name} cannot run them)" if dropped(study) else ""
    print(f"study {study.name} ({study.path}): {len(study.shapes)} shape(s), {len(study.space.all_configs())} "
          f"configs{left_out}; target {target.name}; GPU used: {ctx.gpu_label}"
          + (f" x {args.workers} workers" if args.workers > 1 else "") + f"; storage {db.url}", file=sys.stderr)
    if present is None and args.device != "cpu":
        if args.retry_failed:
            print(f"{retry.FLAG}: no GPU here, so only the budget stage runs; nothing is retried", file=sys.stderr)
        counts = sweep.budget_only()
        db.finish_run(ctx.run_id, "budget-only")
        run_ended = time.perf_counter()
        print(summary(ctx, db.results(study.name, target.name, ctx.gpu_label), counts, None))
        if args.profile:
            print("profile skipped: profiling needs the GPU, and there is none here", file=sys.stderr)
        write_outputs(args, ctx, db)
        print(process_line(sweep.clock.started, run_ended))
        print(budget_only_ending(args, ctx, db, counts))
        return 0
    try:
        counts = sweep.run()
    except (WorkerFailed, RuntimeError) as exc:
        db.finish_run(ctx.run_id, "failed")
        what = ("the GPU worker could not measure the SDPA baselines" if isinstance(exc, WorkerFailed)
                else f"the sweep stopped on {type(exc).__name__}")
        print(f"error: {what}: {exc}. Finished trials are stored; fix the cause and run the same command to resume.",
              file=sys.stderr)
        again = retry.advice(db.results(study.name, target.name, ctx.gpu_label), command)
        if again:
            print(again, file=sys.stderr)
        return 1
    db.finish_run(ctx.run_id, "finished")
    run_ended = time.perf_counter()
    with TIMELINE.span("summary", "sweep"):
        rows = db.results(study.name, target.name, ctx.gpu_label)
        print(summary(ctx, rows, counts, sweep.clock, sweep.verdicts))
        again = retry.advice(rows, command)
        if again:
            print(again)
    profile_best(args, ctx, db)
    write_outputs(args, ctx, db)
    print(process_line(sweep.clock.started, run_ended))
    return 0


if __name__ == "__main__":
    from tuner.console import run

    run(main)
