"""Compiles on many cores: :class:`CompilePool`, and :func:`compile_many` over it.

The pool hands the process pool no more tasks than it has processes, and keeps the rest in a
queue of its own, so that an urgent task (a contender's edge binary, :mod:`tuner.contenders`) is
the next one compiled instead of waiting behind a whole batch that was submitted before it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor, as_completed
from functools import partial

import tuner.budget._compile as _compile  # compile_config looked up at each call (the tests replace it)
from tuner.budget._compile import (
    CompileInfo,
    CompileTask,
    cached_info,
    import_compiler,
    without_interpreter,
    worker_init,
)
from tuner.spawn import compile_context, sigint_blocked
from tuner.trace import TIMELINE

__all__ = ["MAX_JOBS", "CompilePool", "compile_many"]

MAX_JOBS = 1024     # compile processes a command may ask for: more than any machine's cores, each importing Triton


class CompilePool:
    """Compiles on many cores in fresh processes, kept for many batches.

    Forked by the compile server (:func:`tuner.spawn.compile_context`), or spawned; never forked from
    this process, which may hold a CUDA context that fork would corrupt.
    Cache hits are answered at once, without a worker. Tasks wait in the pool's own queue,
    urgent ones first, then in the order they came; at most ``jobs`` are in the processes.

    Args:
        jobs: worker processes; default every core.
    """

    def __init__(self, jobs: int | None = None):
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self._executor: ProcessPoolExecutor | None = None
        self._waiting: list[tuple[int, int, CompileTask, Future]] = []     # a heap: (urgency, order, ...)
        self._order = itertools.count()
        self._busy = 0
        self._lanes: list[int] = []      # the timeline's free compile lanes (--trace)
        self._changed = threading.Condition()
        self._feeder: threading.Thread | None = None
        self._closing = False

    def _ensure_executor(self) -> ProcessPoolExecutor:
        if self._executor is None:
            environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
            self._executor = ProcessPoolExecutor(max_workers=self.jobs, mp_context=compile_context(),
                                                 initializer=worker_init, initargs=(environment, os.getpid()))
        return self._executor

    def start(self) -> None:
        """Begin every worker now, each importing the compiler, without waiting: a spawned worker
        takes seconds to import Triton (3.6 s for one worker on the loaded 2-core CPU of
        docs/results/2026-12-01-compile.md), which otherwise falls on the first batch's compiles
        (a forked one has it from the compile server, which may still be importing it)."""
        executor = self._ensure_executor()
        with without_interpreter(), sigint_blocked():       # a process is spawned by each submit
            for _ in range(self.jobs):
                executor.submit(import_compiler)

    def submit(self, task: CompileTask, urgent: bool = False) -> Future:
        """Compile one task (ahead of every task not ``urgent``); the future's result is a
        :class:`CompileInfo`."""
        done: Future = Future()
        cached = cached_info(task)
        if cached is not None:
            done.set_result(cached)
            return done
        with self._changed:
            heapq.heappush(self._waiting, (0 if urgent else 1, next(self._order), task, done))
            if self._feeder is None:
                self._feeder = threading.Thread(target=self._feed, name="fa2-tuner-compile-feed", daemon=True)
                self._feeder.start()
            self._changed.notify_all()
        return done

    def _feed(self) -> None:
        """Hand the next waiting task to a free process, until the pool closes."""
        while True:
            with self._changed:
                while not self._closing and (not self._waiting or self._busy >= self.jobs):
                    self._changed.wait()
                if self._closing:
                    return
                _, _, task, done = heapq.heappop(self._waiting)
                if not done.set_running_or_notify_cancel():
                    continue
                self._busy += 1
                lane = self._lanes.pop() if self._lanes else self._busy
            with without_interpreter(), sigint_blocked():     # workers are spawned inside submit, as they are needed
                running = self._ensure_executor().submit(_compile.compile_config, task)
            running.add_done_callback(partial(self._finished, done, (lane, time.perf_counter(), task)))

    def _finished(self, done: Future, traced: tuple, running: Future) -> None:
        lane, started, task = traced
        if TIMELINE.on:
            about = (dict(config=task.config.key, shape=task.problem.label, sm=task.capability)
                     if isinstance(task, CompileTask) else {"task": str(task)})
            TIMELINE.add("compile", f"compile {lane}", started, time.perf_counter(), **about)
        with self._changed:
            self._busy -= 1
            self._lanes.append(lane)
            self._changed.notify_all()
        try:
            done.set_result(running.result())
        except BaseException as exc:         # the compile's own failure, or the process pool's
            done.set_exception(exc)

    def close(self) -> None:
        with self._changed:
            self._closing = True
            waiting, self._waiting = self._waiting, []
            self._changed.notify_all()
        for *_, done in waiting:
            if not done.cancel() and not done.done():
                done.set_exception(CancelledError())
        if self._feeder is not None:
            self._feeder.join(5)
        if self._executor is not None:
            try:
                self._executor.shutdown(wait=True, cancel_futures=True)
            except KeyboardInterrupt:       # Ctrl-C again: the compiles in flight are dropped
                self._kill()
                raise
            self._executor = None
        with self._changed:               # closed, it may be used again: a new feeder and processes
            self._feeder, self._closing = None, False

    def _kill(self) -> None:
        """End every process now, SIGKILL: one still starting holds SIGTERM blocked (:func:`tuner.spawn.sigint_blocked`)
        and, once this process is gone, fails to read its start-up state with a traceback on the shared stderr
        (the battery of 2026-12-05: Ctrl-C twice as the pool started)."""
        processes = list((getattr(self._executor, "_processes", None) or {}).values())
        for process in processes:
            with contextlib.suppress(OSError, ValueError):
                process.kill()
        for process in processes:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                process.join(5)
        self._executor = None

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def compile_many(tasks: Sequence[CompileTask], jobs: int | None = None, progress=None,
                 pool: CompilePool | None = None) -> list[CompileInfo]:
    """Compile many tasks on all cores (see :class:`CompilePool`), in order.

    Args:
        tasks: what to compile.
        jobs: worker processes; default every core (ignored when ``pool`` is given).
        progress: optional callable(done, total), called as results arrive.
        pool: a pool to reuse; default a new one for this call.
    """
    own = pool is None
    pool = pool or CompilePool(jobs)
    try:
        futures = [pool.submit(task) for task in tasks]
        pending = [f for f in futures if not f.done()]
        done = len(futures) - len(pending)
        if progress:
            progress(done, len(tasks))
        for _ in as_completed(pending):
            done += 1
            if progress:
                progress(done, len(tasks))
        return [f.result() for f in futures]
    finally:
        if own:
            pool.close()
