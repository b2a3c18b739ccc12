"""A runtime leaves no worker or nanny process behind once it is closed (checked on a private
runtime, so the test holds in any order and under pytest-xdist)."""

from __future__ import annotations

import time

import numpy as np
import psutil

import ustc.distributed as ud


def _children() -> set[int]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.Error:
            continue
    return out


def test_no_leftover_worker_processes():
    before = _children()
    runtime = ud.Runtime(n_workers=2)
    try:
        started = _children() - before
        assert len(started) >= 2                   # the two workers (and their nannies) are ours
        assert runtime.client.submit(np.add, 1, 2).result() == 3
    finally:
        runtime.close()
    deadline = time.monotonic() + 10
    while _children() & started and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (_children() & started)
