"""The runtime: a Dask client, started on first use or attached to a given one.

``runtime()`` returns the process-wide :class:`Runtime`. The first call without a
prior :func:`connect` starts a ``LocalCluster`` on 127.0.0.1: one worker process
per core, one thread each (Numba and OpenMP limited to one thread in the
workers), no dashboard unless ``dashboard=True``; it is closed at interpreter
exit or by :func:`shutdown`. ``connect(client_or_address)`` attaches to an
existing ``distributed.Client`` or scheduler address instead (never closed by
ustc). ``transport="auto"`` (default) connects the block actors directly, through
shared-memory rings when every one of them runs on the driver's host and over TCP otherwise
(opened once per group through Dask); ``"socket"`` TCP only, ``"shm"`` rings between the
blocks of each host, ``"actor"`` has them call each other.

A runtime keeps one group of block actors per partition size ``P`` (rank ``b``
on worker ``b mod workers``), connected peer to peer; every distributed matrix
and vector of that size lives in that group. A group that lost a worker is
repaired on its next use (:func:`ustc.distributed.recipe.repair`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import threading
import weakref

from ..errors import DistributedError, UstcError, require
from .quiet import paused
from .shm import host_id

_LOCK = threading.RLock()
_RUNTIME = None
#: how the block actors of a group talk: ``"socket"`` direct TCP connections between them, opened
#: once through Dask (:class:`~ustc.distributed.sockets.SocketCommunicator`); ``"shm"`` the same
#: with shared-memory rings between the blocks of one host (:class:`~ustc.distributed.shm.
#: ShmCommunicator`, x86-64 Linux with a writable /dev/shm; TCP elsewhere); ``"auto"``: ``"shm"``
#: when every block worker of the group runs on the driver's host, ``"socket"`` otherwise;
#: ``"actor"`` calls between the Dask actors (:class:`~ustc.distributed.comm.ActorCommunicator`)
TRANSPORTS = ("auto", "socket", "shm", "actor")
#: the transport of a Runtime made without one: ``$USTC_DIST_TRANSPORT`` if set, else this
DEFAULT_TRANSPORT = "auto"
WORKER_ENV = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
#: Dask's nannies set these before spawning a worker unless told otherwise; ustc's LocalCluster
#: does not. ``MALLOC_TRIM_THRESHOLD_`` (Dask: 65536, to hand freed memory back) switches off
#: glibc's adaptive mmap threshold, so every NumPy temporary above 128 KiB is a fresh mapping
#: whose pages fault in again: 3,200 instead of 550 page faults and ~5 ms more system time an
#: item of bench_distributed's map (ten 1.2 MB temporaries), 13 -> 18.7 ms of CPU. A value in
#: the driver's own environment is still inherited.
UNSET_PRE_SPAWN = ("MALLOC_TRIM_THRESHOLD_",)
#: Dask settings of the scheduler ustc starts. The active memory manager's ReduceReplicas drops a
#: replica that no task assigned to that worker waits on yet, so the copy of ``map``'s shared
#: operand that ``scatter(broadcast=True)`` put on a worker whose tasks were still queued went
#: away and came again with its first task: unpickled twice there (a CI run, under load).
SCHEDULER_CONFIG = {"distributed.scheduler.active-memory-manager.start": False}


def rings_wanted(transport: str, driver_host: str, worker_hosts) -> bool:
    """Whether a group's ranks listen with shared-memory rings: always for ``"shm"`` (each pair
    still decides by its own hosts), for ``"auto"`` when every block worker's host id
    (:func:`~ustc.distributed.shm.host_id`) is the driver's."""
    hosts = list(worker_hosts)
    return transport == "shm" or (transport == "auto" and bool(hosts) and all(h == driver_host for h in hosts))


class Runtime:
    """A Dask client plus the block actors ustc placed on its workers."""

    def __init__(self, client=None, *, address=None, n_workers=None, dashboard=False, timeout=120.0,
                 transport=None):
        require("distributed", "distributed")
        if transport is None:
            transport = os.environ.get("USTC_DIST_TRANSPORT") or DEFAULT_TRANSPORT
        if transport not in TRANSPORTS:
            raise UstcError(f"Runtime: transport must be one of {TRANSPORTS}, got {transport!r}")
        self.transport = transport
        from distributed import Client, LocalCluster

        self.cluster = None
        self.owned = client is None and address is None       # the cluster is ours
        self.owns_client = client is None
        if client is not None:
            self.client = client
        elif address is not None:
            self.client = Client(address)
        else:
            import dask

            n = n_workers or os.cpu_count() or 1
            unset = {f"distributed.nanny.pre-spawn-environ.{k}": None for k in UNSET_PRE_SPAWN}
            # the nannies read theirs as they are made (restarts too), the scheduler its own as it starts
            with dask.config.set({**unset, **SCHEDULER_CONFIG}):
                self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                            dashboard_address="127.0.0.1:0" if dashboard else None,
                                            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                                            env=dict(WORKER_ENV), silence_logs=40, worker_dashboard_address=None)
            self.client = Client(self.cluster)
            from ._setup import WorkerSetup
            self.client.register_plugin(WorkerSetup())
        self.timeout = float(timeout)
        self.groups: dict = {}
        self._names = itertools.count()

    # -- workers and actors ---------------------------------------------------------------
    @property
    def workers(self) -> list:
        """Worker addresses, sorted."""
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def name(self, kind: str) -> str:
        return f"{kind}-{next(self._names)}"

    def place(self, size: int, rank: int, worker: str):
        """A new block actor for ``rank`` of ``size`` on ``worker``: its future (the actor is
        ``future.result()``). On a cluster this runtime started, the actor pauses its worker's
        profiler and bookkeeping callbacks while it solves (:mod:`ustc.distributed.quiet`)."""
        from .worker import BlockWorker

        return self.client.submit(BlockWorker, rank, size, self.timeout, self.owned, actor=True, workers=[worker],
                                  allow_other_workers=False, pure=False,
                                  key=f"ustc-block-{size}-{rank}-{os.urandom(4).hex()}")

    def group(self, size: int):
        """The ``size`` block actors (created and connected on first use; repaired first when a
        worker was lost: :func:`ustc.distributed.recipe.repair`)."""
        group = self.groups.get(size)
        if group is not None:
            if group.lost:
                from .recipe import repair
                repair(group)
            return group
        workers = self.workers
        if not workers:          # seen once under heavy load: the client listed no worker yet
            self.client.wait_for_workers(1, timeout=self.timeout)
            workers = self.workers
        where = [workers[r % len(workers)] for r in range(size)]
        futures = [self.place(size, rank, where[rank]) for rank in range(size)]
        actors = [f.result() for f in futures]
        group = _Group(self, size, actors, futures, where)
        group.connect()
        self.groups[size] = group
        return group

    def local_servers(self) -> list:
        """The Dask servers of the LocalCluster this runtime started that run in this process (its
        scheduler and nannies), whose bookkeeping a solve pauses (:mod:`ustc.distributed.quiet`);
        empty on a cluster ustc attached to."""
        if self.cluster is None:
            return []
        servers = [getattr(self.cluster, "scheduler", None), *self.cluster.workers.values()]
        return [s for s in servers if hasattr(s, "periodic_callbacks")]

    def scheduler_transitions(self) -> int:
        """The scheduler's transition counter: tasks created or moved since it started."""
        return self.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)

    def close(self) -> None:
        """Close the block actors' connections, the client and, when this runtime started it, the
        cluster."""
        for group in self.groups.values():
            group.close()
        self.groups.clear()
        if self.owns_client:
            try:
                self.client.close()
            finally:
                if self.cluster is not None:
                    self.cluster.close()


class _Group:
    """The block actors of one partition size and the driver's way of calling them all.
    ``lost``: ranks whose worker died (repaired on the next ``Runtime.group``); ``generation``
    counts repairs; ``members``: the live matrices and vectors of the group, by name (weak)."""

    def __init__(self, runtime, size, actors, futures, workers):
        self.runtime, self.size, self.actors, self.futures, self.workers = runtime, size, actors, futures, workers
        self.lost = ()
        self.generation = 0
        self.members = weakref.WeakValueDictionary()

    def connect(self) -> None:
        """Give every rank a fresh communicator to the others (the runtime's transport): for
        sockets and rings each rank listens, the driver hands the addresses round and every rank
        connects (``"auto"``: with rings when the workers report the driver's host id)."""
        transport = self.runtime.transport
        addresses = None
        if transport != "actor":
            hosts = self.runtime.client.run(host_id, workers=sorted(set(self.workers))) if transport == "auto" else {}
            shared = rings_wanted(transport, host_id(), hosts.values())
            addresses = self.call("listen", [(shared,)] * self.size)
        self.call("connect", [(self.actors, addresses)] * self.size)

    def close(self) -> None:
        """Close the ranks' communicators (connections, reader threads), then drop the actors."""
        if not self.lost and self.actors:
            try:
                self.runtime.client.sync(self._close_all)
            except Exception:  # noqa: BLE001 - a worker already gone: its threads went with it
                pass
        self.futures.clear()

    async def _close_all(self):
        async def one(actor):
            await actor.close()
        await asyncio.wait_for(asyncio.gather(*(one(a) for a in self.actors), return_exceptions=True), 10)

    def call(self, method: str, args=None, kwargs=None, ranks=None, poll=None, quiet=False):
        """Call ``method`` on ``ranks`` (all by default; ``args[r]`` a tuple per rank)
        concurrently, SPMD; the results in rank order. When one rank fails because its worker
        is gone, the others are aborted, the group is marked broken and
        :class:`ustc.DistributedError` names the lost blocks. ``poll``: a coroutine function
        awaited while the call runs, every 0.25 s (its failures are ignored). ``quiet``: the
        runtime's :meth:`Runtime.local_servers` pause their bookkeeping while the call runs."""
        ranks = list(range(self.size)) if ranks is None else list(ranks)
        args = args if args is not None else [()] * self.size
        return self.runtime.client.sync(self._call, method, ranks, args, kwargs or {}, poll, quiet)

    async def _call(self, method, ranks, args, kwargs, poll=None, quiet=False):
        with contextlib.ExitStack() as stack:      # on the client's loop, which runs the servers here
            for server in self.runtime.local_servers() if quiet else ():
                stack.enter_context(paused(server))
            return await self._call_all(method, ranks, args, kwargs, poll)

    async def _call_all(self, method, ranks, args, kwargs, poll=None):
        async def one(rank):
            return await getattr(self.actors[rank], method)(*args[rank], **kwargs)

        tasks = {asyncio.ensure_future(one(r)): r for r in ranks}
        watch = asyncio.ensure_future(self._watch(ranks, poll))
        lost, failed = [], None
        waiting = set(tasks)
        while waiting:
            done, _ = await asyncio.wait(waiting | {watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done:
                lost = watch.result()
                break
            waiting -= done
            failed = next((t for t in done if t.exception() is not None), None)
            if failed is not None:
                lost = await self._lost(ranks)
                break
        watch.cancel()
        if not lost and failed is None:
            return [t.result() for t in sorted(tasks, key=tasks.get)]
        survivors = [r for r in ranks if r not in lost]
        reason = (f"blocks {lost} were lost" if lost else
                  f"block {tasks[failed]} failed: {failed.exception()!r}")
        await asyncio.gather(*(self._abort(r, reason) for r in survivors), return_exceptions=True)
        pending = [t for t in tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=3)
        for t in tasks:
            if t.done():
                t.exception()          # retrieved: no "never retrieved" warning
            else:
                t.cancel()
        if lost:
            self.lost = tuple(sorted(set(self.lost) | set(lost)))      # the next Runtime.group repairs
            raise DistributedError(f"{method}: the workers holding blocks {lost} of {self.size} were lost "
                                   f"({', '.join(sorted({self.workers[b] for b in lost}))})",
                                   lost_blocks=lost)
        raise failed.exception()

    async def _abort(self, rank, reason):
        await asyncio.wait_for(self.actors[rank].abort(reason), 2)

    async def _alive_workers(self):
        info = await self.runtime.client.scheduler.identity(n_workers=-1)
        return set(info["workers"])

    async def _watch(self, ranks, poll=None, interval=0.25):
        """Returns the ranks whose worker left the cluster (polls the scheduler, no tasks);
        awaits ``poll()`` after each look while all are alive."""
        while True:
            await asyncio.sleep(interval)
            alive = await self._alive_workers()
            lost = [r for r in ranks if self.workers[r] not in alive]
            if lost:
                return lost
            if poll is not None:
                try:
                    await poll()
                except Exception:  # noqa: BLE001 - a lost worker is found by the next look
                    pass

    async def _lost(self, ranks, wait=3.0):
        """After a failure: the ranks whose worker the scheduler no longer lists (waits up to
        ``wait`` seconds for the scheduler to notice a death)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            alive = await self._alive_workers()
            lost = [r for r in ranks if self.workers[r] not in alive]
            if lost or loop.time() > deadline:
                return lost
            await asyncio.sleep(0.2)


def runtime(**options) -> Runtime:
    """The process-wide runtime, started on first use (``options`` go to :class:`Runtime`:
    ``n_workers``, ``dashboard``, ``timeout``)."""
    global _RUNTIME
    with _LOCK:
        if _RUNTIME is None:
            _RUNTIME = Runtime(**options)
        return _RUNTIME


def connect(client_or_address=None, **options) -> Runtime:
    """Use an existing ``distributed.Client`` (or a scheduler address) from now on; with no
    argument, start a LocalCluster with ``options``. A runtime started before is shut down."""
    global _RUNTIME
    with _LOCK:
        shutdown()
        if client_or_address is None:
            _RUNTIME = Runtime(**options)
        elif isinstance(client_or_address, str):
            _RUNTIME = Runtime(address=client_or_address, **options)
        else:
            _RUNTIME = Runtime(client_or_address, **options)
        return _RUNTIME


def shutdown() -> None:
    """Close the process-wide runtime (and its LocalCluster, if ustc started it)."""
    global _RUNTIME
    with _LOCK:
        if _RUNTIME is not None:
            rt, _RUNTIME = _RUNTIME, None
            rt.close()


atexit.register(shutdown)
