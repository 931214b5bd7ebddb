"""The sweep: configs from Optuna, through budget, compile, check and time, into the store.

:class:`Sweep` asks Optuna for trials one at a time, two batches of them in flight
(:mod:`tuner.pipeline`), rejects what the budget rejects (:mod:`tuner.pre_gpu_stages`), compiles
the rest on all cores while earlier trials are checked and timed in the isolated worker
(:mod:`tuner.runner`), each as soon as its own compiles are done, and commits each trial's rows
before telling Optuna its value. Then each shape's finalists are re-timed together
(:mod:`tuner.finalists`). Without a GPU, :meth:`Sweep.budget_only` runs stages 1-2 and stops.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from kernel.measure.timing import WALL
from tuner import finalists, records, report, retry, search, winners
from tuner.budget import CompilePool, CompileTask
from tuner.budget_only import budget_only, search_study_name
from tuner.contenders import Contenders
from tuner.formatting import headline
from tuner.gpus import GpuSpec
from tuner.outcome import TrialOutcome, WorkerFailed
from tuner.pipeline import Abandoned, BinaryClaims, DeviceQueue, stream
from tuner.pre_gpu_stages import Rejection, budget_stage, compile_plan, compile_stage, edge_plan, pool_sizes
from tuner.records import RunContext
from tuner.report import Clock, Progress
from tuner.runner import GpuWorker
from tuner.status import Stage, Status
from tuner.store import Result, Store
from tuner.trace import TIMELINE

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
    rounds: int | None = None    # adaptive: the most rounds (default 10); fixed: the rounds (default 5)
    retime: str = "adaptive"     # or "fixed": the protocol before it (kernel.measure.retime's module doc)
    workers: int = 1             # GPU worker processes, one per device (threads of this sweep drive them)
    edge_gate: str = "contenders"    # or "all": whose edge shapes are checked (tuner.contenders)
    retime_finalists: bool = False   # re-time the finalists even where their stored verdicts stand
    retry_failed: bool = False       # run again the configs stored as timeout or crashed (tuner.retry)


@dataclass
class Asked:
    """A trial asked from Optuna, with its compiles in flight or its rejection."""

    number: int
    config: object
    tasks: list[CompileTask]
    futures: list[Future]
    rejection: Rejection | None = None
    edge_tasks: list[CompileTask] = field(default_factory=list)   # compiled later, for a contender


@dataclass
class Slot:
    """One GPU worker (one device), and the run's context with that device's baselines."""

    index: int
    worker: GpuWorker
    ctx: RunContext


class Sweep:
    """One run of a study on one target (and the GPU present, if any), over one or more devices: each trial goes to
    the next free worker; this process alone writes the database (so SQLite sees one writer), and other sweeps on
    the same study, on other hosts, are coordinated through it (see :meth:`_stored_elsewhere`)."""

    def __init__(self, ctx: RunContext, store: Store, present: GpuSpec | None, options: SweepOptions):
        self.ctx, self.store, self.present, self.options = ctx, store, present, options
        self.counts: Counter = Counter()
        self.clock = Clock()
        self.known: dict[str, list[Result]] = {}      # config key -> its rows, from earlier runs and this one
        for row in store.results(ctx.study.name, ctx.target.name, ctx.gpu_label):
            self.known.setdefault(row.config, []).append(row)
        self.verdicts: dict[str, finalists.ShapeVerdict] = {}
        self.lock = threading.RLock()                 # known, counts, clock, progress
        self.twins = BinaryClaims(self.known, self.lock, 3 * options.trial_timeout_s)
        self.stopping = False         # set as the search ends: workers are being closed
        self.contenders, self.retrying = Contenders(), set()      # the configs --retry-failed runs again

    def budget_only(self) -> Counter:
        """Stages 1 and 2 for the target over the study's whole space, stored (no GPU)."""
        self.counts.update(budget_only(self.ctx, self.store, self.options.jobs))
        return self.counts

    # --------------------------------------------------------------- the search

    def run(self) -> Counter:
        """Stages 1 to 4 over Optuna trials until the grid, --trials or --timeout runs out; then the finalists.
        Raises :class:`WorkerFailed` if SDPA cannot be measured."""
        ctx, options = self.ctx, self.options
        self.search = search.SearchSession(self.store.url, search_study_name(ctx, self.present, options.device),
                                           options.sampler, ctx.study.space, options.seed,
                                           options.trials, {"metric": ctx.study.metric, "target": ctx.target.name,
                                                            "gpu": ctx.gpu_label},
                                           records.warm_configs(self.store, ctx.study, ctx.target, ctx.gpu_label))
        report.resuming(self.search.orphans, self.search.foreign)
        if options.retry_failed:      # the configs stored as timeout or crashed, asked first
            self.retrying = retry.start(self.search, self.known, ctx.study.space, options.sampler)
        self.batch, jobs = pool_sizes(options.sampler, options.workers, ctx.study, ctx.target, self.present,
                                      options.jobs, options.batch, options.edge_gate == "all")
        deadline = time.perf_counter() + options.timeout_s if options.timeout_s else None
        self.progress = Progress(self.search.total, min(self.search.finished(), self.search.total))
        self.clock.workers = options.workers
        timing = (ctx.study.timing.warmup_ms, ctx.study.timing.rep_ms)
        kernel = (ctx.study.kernel_name, ctx.study.pass_)
        self.slots = [Slot(i, GpuWorker(ctx.study.shapes, timing, options.trial_timeout_s, options.device, i, kernel),
                           replace(ctx, baselines={})) for i in range(options.workers)]
        self.pool = CompilePool(jobs)
        self.warm = self.search.done() and self._stored_verdicts() is not None    # nothing to time, nothing to re-time
        if options.device != "cpu" and not self.warm:
            self.pool.start()         # the workers import Triton while Optuna and the GPU worker start
        # Nothing compiles after the search: the pool's processes exit while the finalists are timed.
        pool_closing = threading.Thread(target=self.pool.close, name="fa2-tuner-close-pool")
        try:
            self._search(deadline)
            pool_closing.start()
            with TIMELINE.span("the run's end (finalists, SDPA's drift)", "sweep"):
                self._end_of_run()
        finally:
            self.stopping = True
            self.progress.close()
            with TIMELINE.span("close the workers and the compile pool", "sweep"):
                if pool_closing.ident is None:     # the search raised
                    pool_closing.start()
                closing = [pool_closing] + [threading.Thread(target=slot.worker.close) for slot in self.slots]
                for thread in closing[1:]:
                    thread.start()
                for thread in closing:
                    thread.join()
                self.search.close()
        restarts = sum(slot.worker.restarts for slot in self.slots)
        if restarts:
            print(f"workers were restarted {restarts} time(s) after a crash or timeout", file=sys.stderr)
        return self.counts

    def _search(self, deadline: float | None) -> None:
        """Trials asked one at a time, at most two batches of them in flight (:func:`tuner.pipeline.stream`);
        each waits for its own compiles, then takes a free device for its check and timing only."""
        self.free: DeviceQueue[Slot] = DeviceQueue()
        window, self.failed = 2 * self.batch, threading.Event()
        # A thread for each trial in flight and each device's start: a trial's thread waits for its compiles,
        # a device and its edge compiles, then stores and tells, while other trials hold the devices.
        threads = ThreadPoolExecutor(window + len(self.slots), thread_name_prefix="fa2-tuner-trial")
        for slot in self.slots:       # each device starts and measures SDPA while the first trials compile
            if self.warm:             # ... unless a warm re-run has nothing for it (a trial that comes starts it)
                self.free.put(slot)
            else:
                threads.submit(self._prepare, slot)
        try:
            stream(lambda: self._ask(deadline), self._process, window, threads, self.options.sampler == "tpe",
                   self.failed)
        finally:
            threads.shutdown(wait=True, cancel_futures=True)   # Ctrl-C: the trials in flight finish
            self.free.close()
            self.clock.idle_s = self.free.idle_s

    def _ask(self, deadline: float | None) -> Asked | None:
        """The next trial, its compiles submitted if it passes the budget; None when the search is done."""
        if deadline and time.perf_counter() > deadline:
            return None
        with TIMELINE.span("ask"):
            answer = self.search.ask()
        if answer is None:
            return None
        number, config = answer
        rejection = budget_stage(config, self.ctx.study, self.ctx.target)
        if rejection or config.key in self.known:
            return Asked(number, config, [], [], rejection)
        later = edge_plan(config, self.ctx.study, self.present) if self.options.edge_gate != "all" else []
        tasks = compile_plan(config, self.ctx.study, self.ctx.target, self.present, edges=not later)
        return Asked(number, config, tasks, [self.pool.submit(task) for task in tasks], edge_tasks=later)

    def _rows(self, asked: Asked, status: Status, stage: Stage, reason: str, fields: dict,
              outcome: TrialOutcome | None = None, slot: Slot | None = None) -> list[Result]:
        ctx = slot.ctx if slot else self.ctx
        return records.result_rows(asked.config, ctx, status, stage, reason, fields, outcome, asked.number)

    def _process(self, asked: Asked) -> None:
        config = asked.config
        with self.lock:
            known = self.known.get(config.key)
        if known:
            return self._finish(asked, known, reused=True)
        if asked.rejection:
            r = asked.rejection
            return self._finish(asked, self._rows(asked, r.status, r.stage, r.reason, r.fields))
        with TIMELINE.span("wait for compiles", trial=asked.number):
            infos = [f.result() for f in asked.futures]
        compiled = compile_stage(config, self.ctx.study, self.ctx.target, self.present, asked.tasks, infos)
        if compiled.rejection:
            r = compiled.rejection
            return self._finish(asked, self._rows(asked, r.status, r.stage, r.reason, r.fields))
        elsewhere = self._stored_elsewhere(asked)
        if elsewhere:
            return self._finish(asked, elsewhere, reused=True)
        binary = compiled.fields.get("binary")
        twin, twin_rows = self.twins.claim(binary, config.key)
        if twin_rows:
            return self._finish(asked, records.copied_rows(
                twin_rows, config, self.ctx.run_id, f"same binary as {twin}: its results, not re-timed",
                asked.number, compiled.fields))
        status = None
        try:
            with self._device(asked, "trial") as slot:      # for the check and the timing only
                self._ensure_baselines(slot)
                outcome = slot.worker.trial(config, edges=not asked.edge_tasks, bounds=self.contenders.bounds())
            if asked.edge_tasks and outcome.status == Status.TIMED:
                outcome = self._edge_step(asked, outcome)
            self.contenders.record(outcome)
            status = outcome.status
            if status == Status.CRASHED and outcome.error_type in COMPILE_ERRORS:
                status = Status.COMPILE_ERROR
            stage = Stage.TIME if status == Status.TIMED else Stage.CHECK
            rows = self._rows(asked, status, stage, outcome.reason, compiled.fields, outcome, slot)
            with self.lock:
                self.clock.check_s += outcome.check_s
                self.clock.time_s += outcome.time_s
            self._finish(asked, rows)
        finally:
            self.twins.release(binary, config.key, status)

    def _edge_step(self, asked: Asked, timed: TrialOutcome) -> TrialOutcome:
        """A config timed without its edge shapes: checked on them if a contender (:mod:`tuner.contenders`)."""
        def compile_edges() -> Rejection | None:
            with TIMELINE.span("wait for edge compiles", trial=asked.number):
                infos = [future.result() for future in [self.pool.submit(task, urgent=True)
                                                        for task in asked.edge_tasks]]
            return compile_stage(asked.config, self.ctx.study, self.ctx.target, self.present, asked.edge_tasks,
                                 infos).rejection

        def check() -> TrialOutcome:
            with self._device(asked, "edge check") as slot:
                return slot.worker.check(asked.config)
        return self.contenders.edges(timed, compile_edges, check)

    @contextlib.contextmanager
    def _device(self, asked: Asked, what: str):
        """The next free device, held for the block (a span ``what`` on its lane), then freed."""
        with TIMELINE.span("wait for a device", trial=asked.number):
            slot = self.free.get()
        try:
            with TIMELINE.span(what, f"device {slot.index}", config=asked.config.key):
                yield slot
        finally:
            self.free.put(slot)

    def _stored_elsewhere(self, asked: Asked) -> list[Result] | None:
        """The config's rows if another sweep of this study stored them, or is timing the config under a lower-numbered
        trial (then wait for its rows; if that trial ends without any, this one times the config itself)."""
        where = (self.ctx.study.name, self.ctx.target.name, self.ctx.gpu_label, asked.config.key)

        def stored() -> list[Result]:       # but not the failed rows of a config this sweep retries
            return retry.unless_retrying(self.store.config_rows(*where), self.retrying)

        rows = stored()
        leader = None if rows else self.search.leader(asked.number, asked.config)
        give_up = time.monotonic() + 3 * self.options.trial_timeout_s
        while leader is not None and not rows and time.monotonic() < give_up:
            if self.failed.is_set():        # the leader may be the trial that raised, never to be finished
                raise Abandoned(f"trial {asked.number} stopped waiting for trial {leader}'s rows: the sweep ends")
            if not self.search.alive(leader):
                return stored() or None
            time.sleep(0.5)
            rows = stored()
        return rows or None

    def _finish(self, asked: Asked, rows: list[Result], reused: bool = False) -> None:
        """Commit the rows (unless another sweep stored the config first: then its rows
        count), then tell Optuna (a crash between the two is redone by the next run)."""
        if self.stopping and rows and rows[0].status in (Status.CRASHED, Status.TIMEOUT):
            return      # a worker killed as the sweep stops (a second Ctrl-C) judges nothing: redone on resume
        if not reused:
            with TIMELINE.span("store", trial=asked.number):
                stored = retry.store_rows(self.store, rows, self.retrying, self.lock)
            reused = stored is not rows
            rows = stored
        with self.lock:
            self.known[asked.config.key] = rows
        value = records.objective(rows, self.ctx.study.metric)
        status, stage = Status(rows[0].status), str(rows[0].stage)
        with TIMELINE.span("tell", trial=asked.number):     # "config" was set as it was asked
            self.search.tell(asked.number, value, {"status": str(status), "reason": (rows[0].reason or "")[:300],
                                                   "reused": reused, search.STAGE_ATTR: stage})
        with self.lock:
            self.counts[status] += 1
            if stage != str(Stage.BUDGET):      # a config the budget refuses costs no trial (SearchSession.counted)
                self.progress.update(asked.config, value, status, self.ctx.study.metric)
        if status == Status.COMPILE_ERROR and not reused:    # one line here; the whole error is in the store
            print(f"compile_error {asked.config.key}: {headline(rows[0].reason)}", file=sys.stderr)

    def _prepare(self, slot: Slot) -> None:
        """Start a device's worker and its baselines, then free it (a failure: its first trial retries)."""
        try:
            with contextlib.suppress(WorkerFailed):
                if self.options.device != "cpu":
                    self._ensure_baselines(slot)
        finally:
            self.free.put(slot)

    def _ensure_baselines(self, slot: Slot) -> None:
        """SDPA per shape on the slot's device, once per run, before it times its first config."""
        if slot.ctx.baselines:
            return
        started = time.perf_counter()
        with TIMELINE.span("worker start", f"device {slot.index}"):    # its first request waits for its start
            slot.ctx.device = slot.worker.device_info()
        with TIMELINE.span("baselines", f"device {slot.index}"):
            slot.ctx.baselines = slot.worker.baselines()
        self.ctx.baselines = slot.ctx.baselines if slot.index == 0 else self.ctx.baselines
        self.store.add(*records.baseline_rows(self.ctx.run_id, slot.ctx.baselines, "start", slot.ctx.device))
        took = time.perf_counter() - started
        with self.lock:
            self.clock.start_s += took
        report.baselines_ready(slot.index, slot.ctx.device if len(self.slots) > 1 else None, slot.ctx.baselines, took)

    def _end_of_run(self) -> None:
        """The finalists on the first device, then how far SDPA drifted since the run's start: read off
        the finalists' rounds, which time SDPA at each shape they re-time; else SDPA is measured again."""
        if self.options.finalists > 0:
            self.retime_finalists()
        first = self.slots[0]
        if first.ctx.baselines:
            start = first.ctx.baselines
            end = {label: dict(flash_ms=v.flash_ms, cudnn_ms=v.cudnn_ms, timer="finalists")
                   for label, v in self.verdicts.items() if v.flash_ms or v.cudnn_ms}
            if set(end) != set(start):
                with contextlib.suppress(WorkerFailed):
                    end = first.worker.baselines()
            self.store.add(*records.baseline_rows(self.ctx.run_id, end, "end", first.ctx.device))
            drifts = [abs(end[label][b] / start[label][b] - 1) for label in end for b in ("flash_ms", "cudnn_ms")
                      if end[label].get(b) and start.get(label, {}).get(b)]
            interpreted = self.options.device == "cpu"      # interpreter times are noise: their drift means nothing
            self.clock.drift = max(drifts) if drifts and not interpreted else None

    def retime_finalists(self) -> dict[str, finalists.ShapeVerdict]:
        """Re-time each shape's top configs together and store the verdicts; where this run timed nothing new
        and the store holds verdicts on these very finalists, those stand (:meth:`_stored_verdicts`)."""
        ctx = self.ctx
        stored = self._stored_verdicts()
        if stored is not None:
            print("finalists: nothing new was timed, so their stored verdicts stand (--retime-finalists re-times "
                  "them)", file=sys.stderr)
            self.verdicts = stored
            return stored
        rows = self.store.results(ctx.study.name, ctx.target.name, ctx.gpu_label)
        chosen = finalists.select_finalists(rows, self.options.finalists)
        if not chosen:
            return {}
        started = time.perf_counter()
        parse = ctx.study.kernel.config_type.parse
        try:
            times = finalists.retime_on_devices([slot.worker for slot in self.slots], {
                label: [parse(key) for key in keys] for label, keys in chosen.items()},
                finalists.protocol(self.options.retime, self.options.rounds))
        except WorkerFailed as failure:
            print(f"finalists were not re-timed: {failure.reason}", file=sys.stderr)
            return {}
        self.clock.retime_s += time.perf_counter() - started
        timer = WALL if self.options.device == "cpu" else None
        stored = []
        for label, measured in times.items():
            verdict = self.verdicts[label] = finalists.judge_rounds(label, measured)
            stored += finalists.finalist_rows(ctx, verdict, timer or finalists.timer_of(rows, label))
        self.store.replace_finalists(stored)
        return self.verdicts

    def _stored_verdicts(self) -> dict[str, finalists.ShapeVerdict] | None:
        """The finalists' stored verdicts where a re-run takes them as they are: this run timed nothing new
        and they judge the very finalists chosen now (:func:`tuner.finalists.covers`); so a re-run emits the
        same list, measuring nothing. None otherwise, and under ``--retime-finalists``."""
        ctx, top = self.ctx, self.options.finalists
        if self.options.retime_finalists or top <= 0:
            return None
        rows = self.store.results(ctx.study.name, ctx.target.name, ctx.gpu_label)
        if any(r.run_id == ctx.run_id and r.status == Status.TIMED for r in rows):
            return None
        stored = winners.verdicts_of(self.store, ctx.study.name, ctx.target.name, ctx.gpu_label)
        return stored if finalists.covers(finalists.select_finalists(rows, top), stored) else None
