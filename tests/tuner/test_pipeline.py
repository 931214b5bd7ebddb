"""How trials flow (tuner.pipeline): at most a window in flight, a failure raised after the
trials in flight finish, the search asked again once the trials in flight are done, and the
devices' idle time."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tuner.pipeline import DeviceQueue, stream


def _asker(items):
    items = list(items)

    def ask():
        return items.pop(0) if items else None
    return ask


def test_no_more_trials_are_in_flight_than_the_window_and_every_one_is_processed():
    lock, state, seen = threading.Lock(), {"now": 0, "most": 0}, []

    def process(item):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.01 * (item % 3))
        with lock:
            state["now"] -= 1
            seen.append(item)

    with ThreadPoolExecutor(16) as threads:
        stream(_asker(range(40)), process, 5, threads)
    assert sorted(seen) == list(range(40))
    assert state["most"] == 5


def test_a_trial_waiting_for_its_compile_does_not_hold_back_the_ones_asked_after_it():
    release, order = threading.Event(), []

    def process(item):
        if item == 0:
            release.wait(5)       # its compile is slow
        order.append(item)
        if item == 3:
            release.set()

    with ThreadPoolExecutor(8) as threads:
        stream(_asker(range(4)), process, 4, threads)
    assert order == [1, 2, 3, 0]


def test_a_failing_trial_is_raised_after_the_trials_in_flight_finish():
    finished = []

    def process(item):
        if item == 2:
            raise RuntimeError("the store is gone")
        time.sleep(0.05)
        finished.append(item)

    threads = ThreadPoolExecutor(4)
    with pytest.raises(RuntimeError, match="the store is gone"):
        try:
            stream(_asker(range(100)), process, 3, threads)
        finally:
            threads.shutdown(wait=True, cancel_futures=True)
    assert 0 in finished and 1 in finished and len(finished) < 97


def test_a_failing_trial_sets_the_event_the_waiting_trials_watch():
    failed, seen_by_the_waiter = threading.Event(), []

    def process(item):
        if item == 0:
            time.sleep(0.2)        # item 1 is asked and waiting by now
            raise RuntimeError("dies before it is told")
        seen_by_the_waiter.append(failed.wait(5))      # a twin waiting for item 0's rows

    with ThreadPoolExecutor(4) as threads, pytest.raises(RuntimeError, match="dies before"):
        stream(_asker(range(2)), process, 2, threads, failed=failed)
    assert seen_by_the_waiter == [True]


def test_the_search_is_asked_again_once_the_trials_in_flight_are_done():
    """A None from the search while trials are in flight: another sweep's trial may come back
    (re-queued) once they are done, so the search is asked again; a second None ends it."""
    done, calls = [], []

    def ask():
        calls.append(len(done))
        if len(calls) == 1:
            return "first"
        if len(calls) == 2:
            return None            # nothing now: "first" is still in flight
        if len(calls) == 3:
            return "requeued" if done == ["first"] else None
        return None

    def process(item):
        time.sleep(0.05)
        done.append(item)

    with ThreadPoolExecutor(2) as threads:
        stream(ask, process, 4, threads)
    assert done == ["first", "requeued"]
    assert calls == [0, 0, 1, 1, 2]     # each None first waits for the trials in flight


def test_the_devices_idle_time_counts_from_put_to_get_and_to_close():
    devices = DeviceQueue()
    devices.put("gpu0")
    time.sleep(0.1)
    assert devices.get() == "gpu0"
    assert 0.09 <= devices.idle_s < 0.5
    devices.put("gpu0")
    time.sleep(0.1)
    devices.close()
    assert 0.19 <= devices.idle_s < 0.8


@pytest.mark.parametrize("in_order", [False, True])
def test_in_order_no_trial_is_asked_more_than_a_window_after_the_oldest_unfinished_one(in_order):
    """The first trial waits (its compile, a device still starting); the others finish at once, as
    rejected configs do. Out of order they free the window and the search asks on; in order, it
    asks no more than the window until the first is done."""
    first_done, asked, while_first_waits = threading.Event(), [], []

    def ask():
        if len(asked) >= 30:
            return None
        asked.append(len(asked))
        if not first_done.is_set():
            while_first_waits.append(asked[-1])
        return asked[-1]

    def process(item):
        if item == 0:
            time.sleep(0.3)
            first_done.set()

    with ThreadPoolExecutor(8) as threads:
        stream(ask, process, 4, threads, in_order=in_order)
    assert len(asked) == 30
    assert while_first_waits == ([0, 1, 2, 3] if in_order else list(range(30)))
