"""Without a GPU: the budget and compile stages for the target over a study's whole space.

Every config is checked against the target's budget and compiled for it on the CPU
(cached), and stored with its verdict, ``pending`` for those that fit and wait for a GPU.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from tuner import budget, records
from tuner.pre_gpu_stages import Rejection, budget_stage, compile_plan, compile_stage
from tuner.records import RunContext
from tuner.status import Stage, Status
from tuner.store import Store


def budget_only(ctx: RunContext, store: Store, jobs: int | None = None) -> Counter:
    """Stages 1 and 2 for the target over the study's whole space, stored in one transaction.

    Returns:
        How many configs ended in each status (``pending``: fits, waits for the GPU).
    """
    study, target = ctx.study, ctx.target
    counts: Counter = Counter()
    configs = study.space.all_configs()
    rejected = {c: budget_stage(c, study, target) for c in configs}
    to_compile = [c for c in configs if rejected[c] is None]
    plans = {c: compile_plan(c, study, target, None) for c in to_compile}
    tasks = [task for c in to_compile for task in plans[c]]
    print(f"budget stage for {target.name}: {len(configs) - len(to_compile)} configs rejected by the restrictions, "
          f"the knob rules and the model; compiling {len(to_compile)} for {target.name} ({len(tasks)} compiles, "
          f"cached after)", file=sys.stderr)
    started = time.perf_counter()
    infos = iter(budget.compile_many(tasks, jobs=jobs, progress=compile_progress(target.name)))
    rows = []
    for config in configs:
        rejection = rejected[config]
        if rejection is None:
            verdict = compile_stage(config, study, target, None, plans[config],
                                    [next(infos) for _ in plans[config]])
            rejection = verdict.rejection or Rejection(
                Status.PENDING, Stage.COMPILE, f"fits {target.name}; timing needs a CUDA GPU", verdict.fields)
        counts[rejection.status] += 1
        rows += records.result_rows(config, ctx, rejection.status, rejection.stage, rejection.reason,
                                    rejection.fields)
    store.replace_results(rows)
    print(f"budget stage: {len(configs)} configs, {len(tasks)} compiles in {time.perf_counter() - started:.0f} s")
    unsupported = Counter(r.reason for r in rejected.values() if r is not None and r.status == Status.UNSUPPORTED)
    for reason, count in unsupported.most_common(3):       # what the target or Triton lacks, said once
        print(f"  {count} config(s) {reason}")
    return counts


def compile_progress(target: str):
    """A progress callback for the compile pool: a live counter on a terminal, a line now and then in a log."""
    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rcompiling for {target}: {done}/{total}", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)
        elif done % 50 == 0 or done == total:     # a log gets a line now and then
            print(f"compiling for {target}: {done}/{total}", file=sys.stderr, flush=True)
    return progress
