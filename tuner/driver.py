"""The sweep: configs from Optuna, through budget, compile, check and time, into the store.

:class:`Sweep` asks Optuna for a batch of trials, rejects what the budget rejects
(:mod:`tuner.stages`), compiles the rest on all cores while the previous batch is being
checked and timed in the isolated worker (:mod:`tuner.runner`), and commits each
trial's rows before telling Optuna its value. After the search, each shape's finalists
are re-timed together (:mod:`tuner.finalists`). Without a GPU, :meth:`Sweep.budget_only`
runs the first two stages for the target over the whole space and stops.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass

from kernel.timing import WALL
from tuner import budget, finalists, records, search
from tuner.budget import CompilePool, CompileTask
from tuner.gpus import GpuSpec
from tuner.records import RunContext
from tuner.report import Clock, Progress
from tuner.runner import GpuWorker, TrialOutcome, WorkerFailed
from tuner.space import Config
from tuner.stages import Rejection, budget_stage, compile_plan, compile_stage
from tuner.status import Stage, Status
from tuner.store import Finalist, Result, Store

# Exceptions that mean the compiler or the launch refused the config, not that it crashed.
COMPILE_ERRORS = ("OutOfResources", "CompilationError", "PTXASError", "CompileTimeAssertionFailure")


@dataclass(frozen=True)
class SweepOptions:
    """How the sweep runs (the CLI's flags)."""

    sampler: str = "tpe"
    trials: int | None = None
    timeout_s: float | None = None
    seed: int | None = None
    jobs: int | None = None
    batch: int | None = None
    trial_timeout_s: float = 180.0
    device: str = "cuda"
    finalists: int = 5           # re-timed per shape after the search (0: none)
    rounds: int = 5


@dataclass
class Asked:
    """A trial asked from Optuna, with its compiles in flight or its rejection."""

    number: int
    config: Config
    tasks: list[CompileTask]
    futures: list[Future]
    rejection: Rejection | None = None


class Sweep:
    """One run of a study on one target (and the GPU present, if any)."""

    def __init__(self, ctx: RunContext, store: Store, present: GpuSpec | None, options: SweepOptions):
        self.ctx, self.store, self.present, self.options = ctx, store, present, options
        self.counts: Counter = Counter()
        self.clock = Clock()
        self.known: dict[str, list[Result]] = {}      # config key -> its rows, from earlier runs and this one
        self.by_binary: dict[str, str] = {}           # binary hash -> config key already timed
        for row in store.results(ctx.study.name, ctx.target.name, ctx.gpu_label):
            self.known.setdefault(row.config, []).append(row)
            if row.binary and row.status == Status.TIMED:
                self.by_binary.setdefault(row.binary, row.config)
        self.verdicts: dict[str, finalists.ShapeVerdict] = {}

    # ----------------------------------------------------------------- no GPU

    def budget_only(self) -> Counter:
        """Stages 1 and 2 for the target over the study's whole space, stored."""
        study, target = self.ctx.study, self.ctx.target
        configs = study.space.all_configs()
        rejected = {c: budget_stage(c, study, target) for c in configs}
        to_compile = [c for c in configs if rejected[c] is None]
        plans = {c: compile_plan(c, study, target, None) for c in to_compile}
        tasks = [task for c in to_compile for task in plans[c]]
        print(f"budget stage for {target.name}: {len(configs) - len(to_compile)} configs rejected by the model and "
              f"restrictions; compiling {len(to_compile)} for {target.name} ({len(tasks)} compiles, cached after)",
              file=sys.stderr)
        started = time.perf_counter()
        infos = iter(budget.compile_many(tasks, jobs=self.options.jobs, progress=_compile_progress(target.name)))
        rows = []
        for config in configs:
            rejection = rejected[config]
            if rejection is None:
                verdict = compile_stage(config, study, target, None, plans[config],
                                        [next(infos) for _ in plans[config]])
                rejection = verdict.rejection or Rejection(
                    Status.PENDING, Stage.COMPILE, f"fits {target.name}; timing needs a CUDA GPU", verdict.fields)
            self.counts[rejection.status] += 1
            rows += records.result_rows(config, self.ctx, rejection.status, rejection.stage, rejection.reason,
                                        rejection.fields)
        self.store.replace_results(rows)
        print(f"budget stage: {len(configs)} configs, {len(tasks)} compiles in {time.perf_counter() - started:.0f} s")
        return self.counts

    # --------------------------------------------------------------- the search

    def run(self) -> Counter:
        """Stages 1 to 4 over Optuna trials until the grid, --trials or --timeout runs out;
        then the finalists. Raises :class:`WorkerFailed` if SDPA cannot be measured."""
        ctx, options = self.ctx, self.options
        name = f"{ctx.study.name}@{ctx.target.name}"
        if self.present is not None and self.present.name != ctx.target.name:
            name += f"-on-{self.present.name}"
        if options.device == "cpu":
            name += "-interpreter"
        self.search = search.SearchSession(self.store.url, name, options.sampler, ctx.study.space, options.seed,
                                           options.trials, {"metric": ctx.study.metric, "target": ctx.target.name,
                                                            "gpu": ctx.gpu_label})
        if self.search.orphans:
            print(f"resuming: {len(self.search.orphans)} trial(s) left in flight by a stopped sweep will be finished "
                  f"first ({', '.join(o.config.key for o in self.search.orphans)})", file=sys.stderr)
        if self.search.foreign:
            print(f"note: {self.search.foreign} trial(s) are running in another live sweep of this study",
                  file=sys.stderr)
        cores = os.cpu_count() or 1
        self.batch = options.batch or (max(2, cores - 2) if options.sampler != "tpe" else 4)
        jobs = options.jobs or (max(1, cores - 2) if cores > 4 else cores)
        deadline = time.perf_counter() + options.timeout_s if options.timeout_s else None
        self.progress = Progress(self.search.total, min(self.search.finished(), self.search.total))
        self.worker = GpuWorker(ctx.study.shapes, (ctx.study.timing.warmup_ms, ctx.study.timing.rep_ms),
                                options.trial_timeout_s, options.device)
        self.pool = CompilePool(jobs)
        try:
            current = self._ask_batch(deadline)
            while current:
                waited = time.perf_counter()
                for asked in current:
                    for future in asked.futures:
                        future.result()
                self.clock.compile_s += time.perf_counter() - waited
                upcoming = self._ask_batch(deadline)     # compiles while this batch is checked and timed
                for asked in current:
                    self._process(asked)
                current = upcoming
            self._end_of_run()
        finally:
            self.progress.close()
            self.worker.close()
            self.pool.close()
        if self.worker.restarts:
            print(f"the worker was restarted {self.worker.restarts} time(s) after a crash or timeout", file=sys.stderr)
        return self.counts

    def _ask_batch(self, deadline: float | None) -> list[Asked]:
        """Ask up to a batch of trials; submit the compiles of those that pass the budget."""
        asked = []
        while len(asked) < self.batch and not (deadline and time.perf_counter() > deadline):
            answer = self.search.ask()
            if answer is None:
                break
            number, config = answer
            rejection = budget_stage(config, self.ctx.study, self.ctx.target)
            if rejection or config.key in self.known:
                asked.append(Asked(number, config, [], [], rejection))
                continue
            tasks = compile_plan(config, self.ctx.study, self.ctx.target, self.present)
            asked.append(Asked(number, config, tasks, [self.pool.submit(task) for task in tasks]))
        return asked

    def _rows(self, asked: Asked, status: Status, stage: Stage, reason: str, fields: dict,
              outcome: TrialOutcome | None = None) -> list[Result]:
        return records.result_rows(asked.config, self.ctx, status, stage, reason, fields, outcome, asked.number)

    def _process(self, asked: Asked) -> None:
        config = asked.config
        if config.key in self.known:
            return self._finish(asked, self.known[config.key], reused=True)
        if asked.rejection:
            r = asked.rejection
            return self._finish(asked, self._rows(asked, r.status, r.stage, r.reason, r.fields))
        compiled = compile_stage(config, self.ctx.study, self.ctx.target, self.present, asked.tasks,
                                 [f.result() for f in asked.futures])
        if compiled.rejection:
            r = compiled.rejection
            return self._finish(asked, self._rows(asked, r.status, r.stage, r.reason, r.fields))
        twin = self.by_binary.get(compiled.fields.get("binary"))
        if twin and twin in self.known:
            return self._finish(asked, records.copied_rows(
                self.known[twin], config, self.ctx.run_id, f"same binary as {twin}: its results, not re-timed",
                asked.number, compiled.fields))
        self._ensure_baselines()
        outcome = self.worker.trial(config)
        self.clock.check_s += outcome.check_s
        self.clock.time_s += outcome.time_s
        status = outcome.status
        if status == Status.CRASHED and outcome.error_type in COMPILE_ERRORS:
            status = Status.COMPILE_ERROR
        stage = Stage.TIME if status == Status.TIMED else Stage.CHECK
        rows = self._rows(asked, status, stage, outcome.reason, compiled.fields, outcome)
        if status == Status.TIMED and compiled.fields.get("binary"):
            self.by_binary.setdefault(compiled.fields["binary"], config.key)
        self._finish(asked, rows)

    def _finish(self, asked: Asked, rows: list[Result], reused: bool = False) -> None:
        """Commit the rows, then tell Optuna (a crash between the two is redone by the next run)."""
        if not reused:
            self.store.replace_results(rows)
            self.known[asked.config.key] = rows
        value = records.objective(rows, self.ctx.study.metric)
        status = Status(rows[0].status)
        self.search.tell(asked.number, value, {"status": str(status), "reason": (rows[0].reason or "")[:300],
                                               "config": asked.config.key, "reused": reused})
        self.counts[status] += 1
        self.progress.update(asked.config, value, status, self.ctx.study.metric)

    # ----------------------------------------------------------- baselines, finalists

    def _ensure_baselines(self) -> None:
        """SDPA per shape, once per run, before the first config is timed."""
        if self.ctx.baselines:
            return
        started = time.perf_counter()
        self.ctx.baselines = self.worker.baselines()
        self.store.add(*records.baseline_rows(self.ctx.run_id, self.ctx.baselines, "start"))
        for label, times in self.ctx.baselines.items():
            print(f"SDPA {label}: flash {_ms(times.get('flash_ms'))}, cuDNN {_ms(times.get('cudnn_ms'))} "
                  f"({times.get('timer')})", file=sys.stderr)
        print(f"worker ready: inputs, references and SDPA baselines in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)

    def _end_of_run(self) -> None:
        """SDPA again (how far the machine drifted), then the finalists."""
        if self.ctx.baselines:
            try:
                end = self.worker.baselines()
            except WorkerFailed:
                end = {}
            self.store.add(*records.baseline_rows(self.ctx.run_id, end, "end"))
            start = self.ctx.baselines
            drifts = [abs(end[label][b] / start[label][b] - 1) for label in end for b in ("flash_ms", "cudnn_ms")
                      if end[label].get(b) and start.get(label, {}).get(b)]
            self.clock.drift = max(drifts) if drifts else None
        if self.options.finalists > 0:
            self.retime_finalists()

    def retime_finalists(self) -> dict[str, finalists.ShapeVerdict]:
        """Re-time each shape's top configs together and store the verdicts."""
        ctx = self.ctx
        rows = self.store.results(ctx.study.name, ctx.target.name, ctx.gpu_label)
        chosen = finalists.select_finalists(rows, self.options.finalists)
        if not chosen:
            return {}
        started = time.perf_counter()
        orders = {label: [[Config.parse(key) for key in order] for order in
                          finalists.round_orders(keys, self.options.rounds)] for label, keys in chosen.items()}
        try:
            times = self.worker.retime(orders)
        except WorkerFailed as failure:
            print(f"finalists were not re-timed: {failure.reason}", file=sys.stderr)
            return {}
        self.clock.retime_s += time.perf_counter() - started
        timer = WALL if self.options.device == "cpu" else None
        stored = []
        for label, per_config in times.items():
            verdict = finalists.judge(label, per_config)
            self.verdicts[label] = verdict
            for rank, timing in enumerate(verdict.ranked, start=1):
                stored.append(Finalist(
                    run_id=ctx.run_id, study=ctx.study.name, target=ctx.target.name, gpu=ctx.gpu_label, shape=label,
                    config=timing.config, rank=rank, rounds=len(timing.times), median_ms=timing.median,
                    min_ms=min(timing.times), max_ms=max(timing.times), spread=timing.spread,
                    times=json.dumps(list(timing.times)), timer=timer or _timer_of(rows, label)))
        self.store.replace_finalists(stored)
        return self.verdicts


def _timer_of(rows: list[Result], label: str) -> str | None:
    return next((r.timer for r in rows if r.shape == label and r.timer), None)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f} ms"


def _compile_progress(target: str):
    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rcompiling for {target}: {done}/{total}", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)
        elif done % 50 == 0 or done == total:     # a log gets a line now and then
            print(f"compiling for {target}: {done}/{total}", file=sys.stderr, flush=True)
    return progress
