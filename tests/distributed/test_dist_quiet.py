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
from ustc.distributed.quiet import PAUSED, WORKER_PAUSED, paused  # noqa: E402


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
    assert pcs["heartbeat"].stops == 0 and "heartbeat" not in PAUSED + WORKER_PAUSED
    assert "memory_monitor" in WORKER_PAUSED and "memory_monitor" not in PAUSED   # the nannies' stays
    with paused(None):                             # outside a Dask worker: nothing to pause
        pass


def test_paused_restarts_after_an_error():
    server = _Server()
    with pytest.raises(RuntimeError):
        with paused(server):
            raise RuntimeError("the solve failed")
    assert server.periodic_callbacks["profile"].running


def _workers(rt) -> tuple:
    """``(paused ones running, heartbeats running)`` on the workers: whether their profile, tick
    and memory-monitor callbacks all run, and their heartbeats (asked through their event loops,
    which are free while the block threads solve)."""
    got = rt.client.run(lambda dask_worker: (
        all(dask_worker.periodic_callbacks[n].is_running() for n in ("profile", "tick", "memory_monitor")),
        dask_worker.periodic_callbacks["heartbeat"].is_running()))
    return all(g[0] for g in got.values()), all(g[1] for g in got.values())


def _scheduler_running(rt) -> bool:
    return rt.cluster.scheduler.periodic_callbacks["tick"].is_running()


def test_a_solve_pauses_the_bookkeeping_of_its_own_cluster(rt):
    m = poisson2d(60)
    a = ud.DTensor.from_tensor(ustc.Tensor.from_package(m), 2)
    b = np.ones(m.shape[0])
    assert _workers(rt) == (True, True) and _scheduler_running(rt)
    seen, done, solves = [], threading.Event(), [0]     # solves[0] odd: a solve is running

    def watch():            # the workers asked while the scheduler showed the same solve running
        while not done.is_set():
            n = solves[0]
            if n % 2 and not _scheduler_running(rt):
                workers = _workers(rt)
                if solves[0] == n and not _scheduler_running(rt):
                    seen.append(workers)
            time.sleep(0.002)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        for _ in range(10):            # until a look fell inside a solve (not at its edges)
            solves[0] += 1
            x, info = ud.solve(a, b, "cg", rtol=1e-12, return_info=True)
            solves[0] += 1
            if (False, True) in seen:
                break
    finally:
        done.set()
        thread.join()
    assert (False, True) in seen                          # paused, heartbeats running
    assert all(heartbeats for _, heartbeats in seen)
    assert _workers(rt) == (True, True) and _scheduler_running(rt)
    assert rt.cluster.scheduler.periodic_callbacks["worker-ttl"].is_running()
    assert info.converged and np.linalg.norm(m @ x - b) <= 1e-11 * np.linalg.norm(b)
    a.free()
