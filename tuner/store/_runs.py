"""Which runs are alive: each sweep records its host and pid in its ``fa2_runs`` row and
beats a heartbeat there; a run left ``running`` by a process that is gone (``kill -9``, a
crash, a lost host) is marked ``interrupted`` by the next sweep on that store.

Gone means: on this host, its pid is not a live process (decided at once); on another
host, its heartbeat is older than the grace period (a pid says nothing across hosts, even
when the same number happens to be alive here). Rows written before these columns existed
name no owner and are left as they are.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading

from sqlalchemy import select, update

from tuner.store._tables import Run, now

INTERRUPTED = "interrupted"


def pid_alive(pid: int) -> bool:
    """A process with this pid exists on this host (one we may not signal counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_gone(run: Run, grace_s: float, host: str | None = None, at: dt.datetime | None = None) -> bool:
    """Whether a ``running`` row's process is gone (see the module's rules)."""
    if run.status != "running" or not run.host or run.pid is None:
        return False
    if run.host == (host or socket.gethostname()):
        return not pid_alive(run.pid)
    last = run.heartbeat_at or run.started_at
    return last is None or ((at or now()) - last).total_seconds() > grace_s


def mark_gone_runs(store, grace_s: float) -> list[Run]:
    """Mark every ``running`` run whose process is gone as ``interrupted``; returns them."""
    with store.session() as session:
        running = list(session.scalars(select(Run).where(Run.status == "running")))
        gone = [run for run in running if run_gone(run, grace_s)]
        for run in gone:
            session.execute(update(Run).where(Run.id == run.id, Run.status == "running")
                            .values(status=INTERRUPTED, finished_at=now()))
    return gone


class RunHeartbeat(threading.Thread):
    """Stamps the run's ``heartbeat_at`` every ``interval_s`` until stopped (a daemon thread:
    a dying process stops beating, which is the point)."""

    def __init__(self, store, run_id: int, interval_s: float):
        super().__init__(daemon=True, name="fa2-tuner-run-heartbeat")
        self.store, self.run_id, self.interval_s = store, run_id, interval_s
        self.stopped = threading.Event()

    def beat(self) -> None:
        with self.store.session() as session:
            session.execute(update(Run).where(Run.id == self.run_id).values(heartbeat_at=now()))

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            with contextlib.suppress(Exception):      # a lost connection: the next beat tries again
                self.beat()

    def stop(self) -> None:
        self.stopped.set()
