"""Whose trial a sweep may take over at once: only one its own host ran in a process that is gone.

A pid means something only on the host that wrote it: a remote sweep's pid that happens to
be alive here (or dead here) says nothing about that sweep, whose trials wait for the heartbeat.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import types

import pytest

from tuner import search


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _trial(owner: str | None):
    return types.SimpleNamespace(user_attrs={} if owner is None else {search.OWNER_ATTR: owner})


HOST = socket.gethostname()


@pytest.mark.parametrize("owner, dead", [
    (lambda: f"{HOST}:{_dead_pid()}", True),                     # this host, its process gone: take it now
    (lambda: f"{HOST}:{os.getpid()}", False),                    # this host, alive
    (lambda: f"elsewhere:{os.getpid()}", False),                 # another host whose pid is alive here
    (lambda: f"elsewhere:{_dead_pid()}", False),                 # another host whose pid is dead here
    (lambda: f"{HOST}.example:{_dead_pid()}", False),            # a host whose name starts as ours
    (lambda: f"{HOST}:", False), (lambda: "garbage", False), (lambda: None, False),
], ids=["local-dead", "local-alive", "remote-pid-alive-here", "remote-pid-dead-here", "longer-host", "no-pid",
        "garbage", "no-owner"])
def test_only_a_dead_process_of_this_host_is_an_orphan(owner, dead):
    assert search.owner_dead(_trial(owner())) is dead


def test_the_owner_names_this_host_and_process():
    assert search.owner() == f"{HOST}:{os.getpid()}"
    assert not search.owner_dead(_trial(search.owner()))
