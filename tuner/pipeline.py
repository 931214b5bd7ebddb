"""How trials flow through the sweep: asked one at a time, each on its own thread from its
compiles to its rows, at most a window of them in flight; and the devices they share.

A trial goes to a device as soon as its own compiles are done, not when a whole batch's are:
a batch that waits for its slowest compile leaves the devices idle, and a device that waits for
a batch leaves the compile pool idle (measured: ``python -m tuner.sweep --trace``,
docs/results/2026-12-01-h200-tuner-speed.md, round 4). The window bounds how far the search
runs ahead of what it has learnt (TPE learns from the trials told so far).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from tuner.status import Status

__all__ = ["Abandoned", "BinaryClaims", "DeviceQueue", "stream"]

T = TypeVar("T")


class Abandoned(RuntimeError):
    """A trial given up as it waited on another (its rows, its device): a trial has failed and the stream ends."""


class DeviceQueue(Generic[T]):
    """The free devices, each handed to one trial at a time; how long they sat idle in all
    (from each device's first :meth:`put` to the :meth:`get` that took it, and to :meth:`close`)."""

    def __init__(self) -> None:
        self._free: queue.Queue = queue.Queue()
        self._since: dict[int, float] = {}
        self._lock = threading.Lock()
        self.idle_s = 0.0

    def put(self, device: T) -> None:
        with self._lock:
            self._since[id(device)] = time.perf_counter()
        self._free.put(device)

    def get(self) -> T:
        device = self._free.get()
        with self._lock:
            self.idle_s += time.perf_counter() - self._since.pop(id(device), time.perf_counter())
        return device

    def close(self) -> None:
        """Count the idle time of the devices that are free now, up to now."""
        with self._lock:
            now = time.perf_counter()
            self.idle_s += sum(now - since for since in self._since.values())
            self._since = dict.fromkeys(self._since, now)


def stream(ask: Callable[[], T | None], process: Callable[[T], None], window: int,
           threads: ThreadPoolExecutor, in_order: bool = False, failed: threading.Event | None = None) -> None:
    """Ask trials and process each on ``threads``, with at most ``window`` asked and unfinished.

    ``in_order``: a trial's place is given back once every trial asked before it is done too (no trial is asked
    more than ``window`` after the oldest unfinished one). A sampler that learns needs it: rejected configs finish
    at once, and let the search ask on before any compiled config is timed (TPE, told of rejections only, proposed
    rejected configs: 3 of 100 trials timed). ``ask`` returns None when the search has nothing to give now; the
    trials in flight are then finished and ``ask`` is called once more (another sweep's trial may have died and
    come back); a second None ends the stream. A trial's exception is raised here once the trials in flight are
    done; ``failed`` is set as it fails: a trial waiting on another (maybe that one) gives up (:class:`Abandoned`)."""
    room = threading.BoundedSemaphore(window)
    in_flight: set[Future] = set()
    order: list[Future] = []        # in_order: the unreleased trials, oldest first
    failures: list[BaseException] = []
    lock = threading.Lock()

    def done(future: Future) -> None:
        with lock:
            in_flight.discard(future)
            if not future.cancelled() and future.exception() is not None:
                failures.append(future.exception())
                if failed is not None:
                    failed.set()
            released = 1
            if in_order:
                released = 0
                while order and order[0].done():
                    order.pop(0)
                    released += 1
        for _ in range(released):
            room.release()

    drained = False
    while True:
        room.acquire()
        with lock:
            if failures:
                room.release()
                raise failures[0]
        item = ask()
        if item is None:
            room.release()
            with lock:
                waiting = list(in_flight)
            if drained and not waiting:
                if failures:
                    raise failures[0]
                return
            for future in waiting:
                future.exception()        # waits; a failure is raised on the next turn
            drained = True
            continue
        drained = False
        future = threads.submit(process, item)
        with lock:
            in_flight.add(future)
            if in_order:
                order.append(future)
        future.add_done_callback(done)


class BinaryClaims:
    """Which trial times each binary: configs that compile to the same binary (knobs that change
    nothing) are timed once. The first trial claims the binary; its twins wait for it and copy its
    rows where it was timed, or time the binary themselves where it was not.

    Args:
        known: config key -> its rows (the sweep's, shared; read under ``lock``), the timed ones'
            binaries already claimed.
        lock: the sweep's lock over ``known``.
        wait_s: the longest a twin waits for the claimant.
    """

    def __init__(self, known: dict, lock, wait_s: float):
        self.known, self.lock, self.wait_s = known, lock, wait_s
        self.by_binary: dict[str, str] = {}           # binary hash -> config key that timed or times it
        for key, rows in known.items():
            for row in rows:
                if row.binary and row.status == Status.TIMED:
                    self.by_binary.setdefault(row.binary, key)
        self.timing: dict[str, threading.Event] = {}     # binary -> set when its claimant is done

    def claim(self, binary: str | None, key: str) -> tuple[str | None, list | None]:
        """(config, rows) of an earlier config with the same binary, timed already or being timed
        now by another trial (then wait for it). (None, None): this trial times the binary, and
        claims it so that its twins wait instead of timing it too."""
        if not binary:
            return None, None
        with self.lock:
            twin = self.by_binary.get(binary)
            if twin is None:
                self.by_binary[binary] = key
                self.timing[binary] = threading.Event()
                return None, None
            event = self.timing.get(binary)
        if event is not None:
            event.wait(self.wait_s)
        with self.lock:
            twin = self.by_binary.get(binary)
            rows = self.known.get(twin) if twin and twin != key else None
        return (twin, rows) if rows and Status(rows[0].status) == Status.TIMED else (None, None)

    def release(self, binary: str | None, key: str, status: Status | None) -> None:
        """The claimant is done: its binary stays claimed only if it was timed; its twins may go on."""
        with self.lock:
            if binary and self.by_binary.get(binary) == key:
                if status != Status.TIMED:
                    del self.by_binary[binary]
                event = self.timing.pop(binary, None)
                if event is not None:
                    event.set()
