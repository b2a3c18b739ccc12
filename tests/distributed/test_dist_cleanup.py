"""A runtime leaves no worker or nanny process behind once it is closed (checked on a private
runtime, so the test holds in any order and under pytest-xdist)."""

from __future__ import annotations

import numpy as np
from dist_helpers import children, wait_gone

import ustc.distributed as ud


def test_no_leftover_worker_processes():
    before = children()
    runtime = ud.Runtime(n_workers=2)
    try:
        started = children() - before
        assert len(started) >= 2                   # the two workers (and their nannies) are ours
        assert runtime.client.submit(np.add, 1, 2).result() == 3
    finally:
        runtime.close()
    assert not wait_gone(started)
