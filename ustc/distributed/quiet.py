"""Dask's periodic sampling paused on the servers ustc started while a block solve runs.

A Dask worker wakes its event loop about 150 times a second for bookkeeping: the statistical
profiler's trigger (every 10 ms, ``distributed.worker.profile.interval``), the event-loop tick
monitor (20 ms), the system monitor (500 ms) and a few slower counters. Each wake takes the GIL
from the block's thread and, on a machine with one core per block, the core from a rank that
the other ranks then wait for at the next synchronisation. None of it observes a solve: the
profiler samples only Dask's task threads, and a block solve runs in the block actor's own
thread. The scheduler and the nannies of a LocalCluster run in the driver's process, on the
client's event loop, and tick the same way (and the scheduler balances work every 100 ms, with
no task to balance during a solve). :func:`paused` stops those callbacks for the duration of a
solve and starts them again after it (heartbeats, keep-alives, the worker TTL and the nannies'
memory monitors keep running, so no worker is taken for lost or left to outgrow its memory, and
the dashboard's plots resume when the solve returns). Several blocks on one worker share one pause
(counted). ustc pauses only the servers of a LocalCluster it started: the block actors of its
workers (``BlockWorker(quiet=True)``) and, from the driver, its scheduler and nannies
(:meth:`ustc.distributed.runtime.Runtime.local_servers`).

Measured on the side-114 stencil CG (2 workers, load 15-16, one solve each way alternately):
each worker's event-loop thread used 0.86-1.18 CPU s per solve, 0.06-0.10 paused (2,200-2,900
wake-ups, 110-140 paused); the driver's loop thread 1.35-1.56 s, 0.23-0.33 paused.
"""

from __future__ import annotations

import contextlib
import weakref

#: the periodic callbacks of a Dask server paused during a solve: sampling and bookkeeping only
PAUSED = ("profile", "profile-cycle", "tick", "ticks", "monitor", "find-missing", "shift_counters", "stealing")
#: on a worker also its memory manager's 100 ms look at its RSS (it spills managed data and holds
#: back tasks, neither of which a solve has); the nanny's, which ends a worker that outgrows its
#: memory limit, keeps running
WORKER_PAUSED = PAUSED + ("memory_monitor",)
#: paused on the workers, the scheduler and the nannies while :func:`ustc.distributed.map` runs
#: (the map's chunks are Dask tasks: work stealing keeps running to even out a slowed worker, and
#: the memory monitors, which spill and hold back tasks, keep watching the user's functions)
MAP_PAUSED = ("profile", "profile-cycle", "tick", "ticks", "monitor", "shift_counters")

#: server -> [solves running, names of the callbacks this module stopped]
_STATE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _stop(server, names) -> list:
    stopped = []
    for name in names:
        pc = server.periodic_callbacks.get(name)
        if pc is not None and pc.is_running():
            pc.stop()
            stopped.append(name)
    return stopped


def pause(server, names=PAUSED) -> None:
    """Stop ``server``'s periodic callbacks ``names`` (those running), or, while an earlier
    :func:`pause` on it is not resumed yet, count one more (the first pause's ``names`` count).
    Call it on the server's event loop; pair every call with :func:`resume`."""
    state = _STATE.get(server)
    if state is None:
        state = _STATE[server] = [0, _stop(server, names)]
    state[0] += 1


def resume(server) -> None:
    """End one :func:`pause` of ``server``; the last one starts the stopped callbacks again.
    Call it on the server's event loop."""
    state = _STATE.get(server)
    if state is None:
        return
    state[0] -= 1
    if state[0] == 0:
        del _STATE[server]
        for name in state[1]:
            pc = server.periodic_callbacks.get(name)
            if pc is not None and not pc.is_running():
                pc.start()


@contextlib.contextmanager
def paused(server, names=PAUSED):
    """Stop ``server``'s periodic callbacks ``names`` (those running) until the last of the
    nested or concurrent ``paused`` blocks on it ends, then start the same ones again (the first
    block's ``names`` count). Call it on the server's event loop (a block actor's coroutine is).
    ``server`` None: nothing paused."""
    if server is None:
        yield
        return
    pause(server, names)
    try:
        yield
    finally:
        resume(server)
