"""Runs last in this directory: once the runtimes are shut down, no worker or nanny process
that a test started is left."""

from __future__ import annotations

import time

import psutil

import ustc.distributed as ud


def _children():
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" not in cmd:
            out.append((p.pid, cmd))
    return out


def test_no_leftover_worker_processes(rt):
    ud.shutdown()                    # the session runtime too; the fixture's shutdown is then a no-op
    deadline = time.monotonic() + 10
    while _children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _children() == []
