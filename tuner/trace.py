"""The sweep's timeline (``python -m tuner.sweep --trace FILE``): when each trial was asked,
compiled, waited for a device, checked, timed and stored, in Chrome's trace-event format (open
the file in https://ui.perfetto.dev or chrome://tracing).

It answers "where did the wall time go?" where the summary's split cannot: the split sums each
stage's seconds, and the stages overlap. :func:`idle_line` says how long the devices sat idle,
and what was going on meanwhile. Off by default; when off, a span costs one attribute check.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

__all__ = ["TIMELINE", "Timeline", "idle_line"]

DEVICE_LANE = "device"      # lanes named "device N" hold what runs on GPU N: baselines, checks, timings


class Timeline:
    """Complete events ("X": a start and a duration) on named lanes, collected from any thread."""

    def __init__(self) -> None:
        self.events: list[dict] | None = None
        self.lanes: dict[str, int] = {}
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.marks: list[tuple[str, float]] = []      # the start's parts (:meth:`mark`), kept while off

    def mark(self, done: str, first: bool = False) -> None:
        """The start's part ``done`` ends now (``first``: the marks before it were another run's): kept even
        while the timeline is off (the sweep turns it on once every input is checked), and made the
        start's spans by :meth:`enable`."""
        if first:
            self.marks = []
        self.marks.append((done, time.perf_counter()))

    @property
    def on(self) -> bool:
        return self.events is not None

    def enable(self) -> None:
        """Start collecting, the timeline's zero at the process's start where it is known (Linux),
        with the interpreter's start, the imports and the other parts of the start (:meth:`mark`) as the
        first spans."""
        now = time.perf_counter()
        self.events, self.lanes, self.t0 = [], {}, now - (process_age_s() or 0.0)
        begun = self.t0
        for done, end in [*self.marks, ("the rest", now)]:
            if begun <= end and begun < now:
                self.add(f"start: {done}", "sweep", begun, end)
                begun = end
        self.marks = []

    def disable(self) -> None:
        """Stop collecting and drop what was collected (the process may run another sweep)."""
        with self.lock:
            self.events, self.lanes = None, {}

    def add(self, name: str, lane: str, start: float, end: float, **args) -> None:
        """A span from ``start`` to ``end`` (``time.perf_counter()`` seconds) on ``lane``."""
        if self.events is None:
            return
        with self.lock:
            tid = self.lanes.setdefault(lane, len(self.lanes) + 1)
            self.events.append({"name": name, "ph": "X", "pid": 1, "tid": tid, "ts": round((start - self.t0) * 1e6),
                                "dur": round((end - start) * 1e6), "args": args})

    @contextlib.contextmanager
    def span(self, name: str, lane: str | None = None, **args):
        """Time the block as a span on ``lane`` (default: the calling thread's name)."""
        if self.events is None:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, lane or threading.current_thread().name, start, time.perf_counter(), **args)

    def device_spans(self) -> list[tuple[float, float]]:
        """(start, end) in seconds of every span on a device lane, sorted."""
        ids = {tid for lane, tid in self.lanes.items() if lane.startswith(DEVICE_LANE)}
        return sorted((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in self.events or [] if e["tid"] in ids)

    def write(self, path: str | Path) -> None:
        """The trace file (the lanes named, as Perfetto shows them)."""
        with self.lock:
            names = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": lane}}
                     for lane, tid in self.lanes.items()]
            body = {"traceEvents": names + list(self.events or []), "displayTimeUnit": "ms"}
        Path(path).write_text(json.dumps(body))


def process_age_s() -> float | None:
    """Seconds since this process started (from /proc), or None where that is not known."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def idle_line(timeline: Timeline) -> str:
    """How much of the wall time so far (from :attr:`Timeline.t0`) the devices were busy (a span on any
    device lane), and how long they sat idle before their first span, between spans, and after their last."""
    total_s = time.perf_counter() - timeline.t0
    spans = timeline.device_spans()
    if not spans:
        return "timeline: nothing ran on a device"
    busy, gaps, end = 0.0, 0.0, spans[0][0]
    for start, stop in spans:
        gaps += max(0.0, start - end)
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return (f"timeline: devices busy {busy:.1f} s of {total_s:.1f} s; idle {spans[0][0]:.1f} s before the first "
            f"span, {gaps:.1f} s between spans, {max(0.0, total_s - end):.1f} s after the last")


TIMELINE = Timeline()
