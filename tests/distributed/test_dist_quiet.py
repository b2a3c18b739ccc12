"""Dask's bookkeeping paused while a solve runs (ustc.distributed.quiet): the pause itself on
stand-in servers (nested, only running callbacks, restarted exactly once), and on the shared
LocalCluster: the workers' profiler and ticks and the scheduler's ticks are stopped while a CG
solve runs and running again after it, heartbeats never stopped."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from dist_helpers import poisson2d

pytest.importorskip("distributed")

import ustc  # noqa: E402
import ustc.distributed as ud  # noqa: E402
from ustc.distributed.quiet import PAUSED, paused  # noqa: E402


class _Callback:
    def __init__(self, running):
        self.running, self.starts, self.stops = running, 0, 0

    def is_running(self):
        return self.running

    def start(self):
        self.running, self.starts = True, self.starts + 1

    def stop(self):
        self.running, self.stops = False, self.stops + 1


class _Server:
    def __init__(self):
        self.periodic_callbacks = {"profile": _Callback(True), "tick": _Callback(False),
                                   "heartbeat": _Callback(True), "monitor": _Callback(True)}


def test_paused_nests_and_restarts_what_it_stopped():
    server = _Server()
    pcs = server.periodic_callbacks
    with paused(server):
        assert not pcs["profile"].running and not pcs["monitor"].running
        with paused(server):                       # a second block on the same worker
            assert pcs["profile"].stops == 1
        assert not pcs["profile"].running          # the outer solve still runs
        assert pcs["heartbeat"].running            # liveness is never paused
    assert pcs["profile"].running and pcs["monitor"].running and pcs["profile"].starts == 1
    assert not pcs["tick"].running and pcs["tick"].starts == 0   # was not running: left alone
    assert pcs["heartbeat"].stops == 0 and "heartbeat" not in PAUSED
    with paused(None):                             # outside a Dask worker: nothing to pause
        pass


def test_paused_restarts_after_an_error():
    server = _Server()
    with pytest.raises(RuntimeError):
        with paused(server):
            raise RuntimeError("the solve failed")
    assert server.periodic_callbacks["profile"].running


def _workers_running(rt) -> bool:
    """Whether the workers' profile, tick and heartbeat callbacks all run (asked through their
    event loops, which are free while the block threads solve)."""
    got = rt.client.run(lambda dask_worker: all(dask_worker.periodic_callbacks[n].is_running()
                                                for n in ("profile", "tick", "heartbeat")))
    return all(got.values())


def _scheduler_running(rt) -> bool:
    sched = rt.cluster.scheduler.periodic_callbacks
    return sched["tick"].is_running() and sched["worker-ttl"].is_running()


def test_a_solve_pauses_the_bookkeeping_of_its_own_cluster(rt):
    m = poisson2d(60)
    a = ud.DTensor.from_tensor(ustc.Tensor.from_package(m), 2)
    b = np.ones(m.shape[0])
    assert _workers_running(rt) and _scheduler_running(rt)
    seen, done = [], threading.Event()

    def watch():            # the workers asked while the scheduler showed a solve running
        while not done.is_set():
            if not _scheduler_running(rt):
                workers = _workers_running(rt)
                if not _scheduler_running(rt):          # still the same solve: a valid look
                    seen.append(workers)
            time.sleep(0.002)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        for _ in range(10):                        # until the watcher has looked during a solve
            x, info = ud.solve(a, b, "cg", rtol=1e-12, return_info=True)
            if seen:
                break
    finally:
        done.set()
        thread.join()
    assert seen and not any(seen)
    assert _workers_running(rt) and _scheduler_running(rt)
    assert info.converged and np.linalg.norm(m @ x - b) <= 1e-11 * np.linalg.norm(b)
    a.free()
