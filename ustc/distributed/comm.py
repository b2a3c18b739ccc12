"""The Communicator interface of the SPMD block workers, and its transports.

A communicator connects the ``size`` block workers of one partition; each knows
its ``rank``. Three operations, all coroutines so that one SPMD code runs over
any transport:

* ``await send(dst, tag, data)`` — deliver ``data`` (a NumPy array or a small
  Python object) to rank ``dst`` under ``tag``;
* ``await recv(src, tag)`` — the data rank ``src`` sent under ``tag`` (messages
  that arrive early are kept until asked for);
* ``await allreduce(values)`` — the sum over ranks of a 1-D array of scalars,
  bitwise identical on every rank (recursive doubling, each pair adding the
  lower ranks' part first, so every rank branches the same way).

:class:`ActorCommunicator` is the default transport: peer-to-peer calls between
Dask actors (one RPC per message, no scheduler involvement);
:class:`ustc.distributed.sockets.SocketCommunicator` (the block actors' default) connects
them directly, one TCP connection per pair opened once through Dask.
:class:`MPICommunicator` wraps an mpi4py communicator for runs under
``mpiexec``; it needs the ``mpi`` extra (mpi4py and an MPI library).

Each communicator counts what it sent (``messages``, ``bytes``) and how many
collective synchronisations it joined (``syncs``).
"""

from __future__ import annotations

import asyncio

import numpy as np

from ..errors import DistributedError, MissingDependencyError


def payload_bytes(data) -> int:
    """The bytes a message counts: its arrays' sizes, 8 for any other value."""
    if isinstance(data, np.ndarray):
        return int(data.nbytes)
    if isinstance(data, (tuple, list)):
        return sum(payload_bytes(d) for d in data)
    return 8


def run_inline(coro):
    """Run a coroutine that never suspends (a synchronous communicator's) to its end in this
    thread and return its value."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a synchronous communicator's coroutine suspended")


class Communicator:
    """Abstract transport: ``rank``, ``size``, ``send``, ``recv``, ``allreduce`` (coroutines)."""

    rank: int
    size: int
    #: True when ``send`` / ``recv`` never suspend (they block the calling thread instead): SPMD
    #: code then runs them inline (:func:`run_inline`) rather than on an event loop
    synchronous = False

    def __init__(self, rank: int, size: int):
        self.rank, self.size = int(rank), int(size)
        self.messages = 0
        self.bytes = 0
        self.syncs = 0
        self._seq = 0

    def next_tag(self, kind: str):
        """A fresh tag; SPMD code calls this in the same order on every rank, so tags agree."""
        self._seq += 1
        return (kind, self._seq)

    def reset_counters(self) -> None:
        self.messages = self.bytes = self.syncs = 0

    async def gather(self, *aws) -> list:
        """Await ``aws`` (sends and receives of one step) and return their results in order:
        concurrently on an event loop, one after the other on a synchronous transport (whose
        sends complete without the peer's help)."""
        if self.synchronous:
            return [await a for a in aws]
        return list(await asyncio.gather(*aws))

    async def send(self, dst: int, tag, data) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    async def recv(self, src: int, tag):  # pragma: no cover - interface
        raise NotImplementedError

    async def allreduce(self, values):
        """Sum of ``values`` (1-D array) over ranks by recursive doubling: ``ceil(log2(size))``
        rounds of one message each way (ranks past the largest power of two first hand their part
        to ``rank - p2`` and get the result back: two more rounds). Each pair adds the lower
        ranks' partial sum first, so every rank ends with bitwise the same sum (one
        synchronisation)."""
        values = np.asarray(values)
        self.syncs += 1
        if self.size == 1:
            return values.copy()
        tag = self.next_tag("allreduce")
        rank, size = self.rank, self.size
        p2 = 1 << (size.bit_length() - 1)
        total = np.array(values, copy=True)
        if rank >= p2:                                  # fold in, then wait for the result
            await self.send(rank - p2, tag, total)
            return await self.recv(rank - p2, tag)
        if rank + p2 < size:
            total = total + await self.recv(rank + p2, tag)
        mask = 1
        while mask < p2:
            partner = rank ^ mask
            got = (await self.gather(self.send(partner, tag, total), self.recv(partner, tag)))[1]
            total = total + got if rank < partner else got + total
            mask <<= 1
        if rank + p2 < size:
            await self.send(rank + p2, tag, total)
        return total

    async def allgather(self, data) -> list:
        """Every rank's ``data``, in rank order (``size - 1`` messages per rank)."""
        if self.size == 1:
            return [data]
        tag = self.next_tag("allgather")
        others = [r for r in range(self.size) if r != self.rank]
        got = await self.gather(*(self.send(dst, tag, data) for dst in others),
                                *(self.recv(src, tag) for src in others))
        parts = dict(zip(others, got[len(others):]))
        parts[self.rank] = data
        return [parts[r] for r in range(self.size)]

    async def reduce_scatter(self, parts):
        """``parts[r]`` goes to rank ``r``; returns the sum of what every rank gave this one, added
        in rank order (bitwise the same whichever rank adds; ``size - 1`` messages per rank)."""
        if self.size == 1:
            return np.array(parts[0], copy=True)
        tag = self.next_tag("reduce_scatter")
        others = [r for r in range(self.size) if r != self.rank]
        got = await self.gather(*(self.send(dst, tag, parts[dst]) for dst in others),
                                *(self.recv(src, tag) for src in others))
        mine = dict(zip(others, got[len(others):]))
        mine[self.rank] = parts[self.rank]
        total = np.array(mine[0], copy=True)
        for r in range(1, self.size):
            total = total + mine[r]
        return total


class SubCommunicator(Communicator):
    """The ranks ``ranks`` (global ranks, ascending) of ``parent`` as a communicator of their own
    (a process row or column of a 2-D grid): local rank ``k`` is ``ranks[k]``. Messages travel
    through ``parent`` (which counts them) under tags prefixed by ``name``, so several
    sub-communicators and the parent never mix their messages."""

    def __init__(self, parent: Communicator, ranks, name):
        ranks = [int(r) for r in ranks]
        super().__init__(ranks.index(parent.rank), len(ranks))
        self.parent, self.ranks, self.name = parent, ranks, name

    def next_tag(self, kind: str):
        self._seq += 1
        return (self.name, kind, self._seq)

    @property
    def synchronous(self):
        return self.parent.synchronous

    async def gather(self, *aws) -> list:
        return await self.parent.gather(*aws)

    async def send(self, dst: int, tag, data) -> None:
        await self.parent.send(self.ranks[dst], tag, data)

    async def recv(self, src: int, tag):
        return await self.parent.recv(self.ranks[src], tag)


class ActorCommunicator(Communicator):
    """Peer-to-peer messages between Dask actors: ``send`` calls the peer actor's ``put``
    method (a direct worker-to-worker RPC), ``recv`` waits for what ``put`` delivered.
    ``abort(reason)`` fails every pending and later ``recv`` with :class:`ustc.DistributedError`;
    a ``recv`` waiting longer than ``timeout`` seconds fails the same way."""

    def __init__(self, rank: int, peers, timeout: float = 120.0):
        super().__init__(rank, len(peers))
        self.peers = list(peers)
        self.timeout = float(timeout)
        self._box: dict = {}
        self._aborted: str | None = None

    def _slot(self, key):
        fut = self._box.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._box[key] = fut
        return fut

    def deliver(self, tag, src, data) -> None:
        """Called by the actor's ``put``: keep ``data`` until ``recv(src, tag)``."""
        fut = self._slot((tuple(tag) if isinstance(tag, list) else tag, int(src)))
        if not fut.done():
            fut.set_result(data)

    def abort(self, reason: str) -> None:
        self._aborted = reason
        for fut in self._box.values():
            if not fut.done():
                fut.set_exception(DistributedError(reason))

    async def send(self, dst: int, tag, data) -> None:
        if self._aborted:
            raise DistributedError(self._aborted)
        self.messages += 1
        self.bytes += payload_bytes(data)
        try:
            await self.peers[dst].put(tag, self.rank, data)
        except DistributedError:
            raise
        except Exception as exc:  # noqa: BLE001 - a lost peer surfaces as OSError / CommClosedError
            raise DistributedError(f"block {self.rank} could not reach block {dst}: {exc}",
                                   lost_blocks=(dst,)) from exc

    async def recv(self, src: int, tag):
        if self._aborted:
            raise DistributedError(self._aborted)
        key = (tag, int(src))
        fut = self._slot(key)
        try:
            return await asyncio.wait_for(fut, self.timeout)
        except asyncio.TimeoutError:
            raise DistributedError(f"block {self.rank} waited {self.timeout:g} s for block {src}",
                                   lost_blocks=(src,)) from None
        finally:
            self._box.pop(key, None)


def mpi():
    """``mpi4py.MPI``, or :class:`ustc.MissingDependencyError` naming the ``mpi`` extra."""
    try:
        from mpi4py import MPI
    except Exception as exc:  # noqa: BLE001 - ImportError, or mpi4py present without an MPI library
        raise MissingDependencyError(
            "the mpi transport needs mpi4py and an MPI library (libmpi): pip install 'ustc[mpi]' "
            f"and an MPI implementation such as Open MPI or MPICH ({exc})") from exc
    return MPI


class MPICommunicator(Communicator):
    """The same interface over an mpi4py communicator (``COMM_WORLD`` by default), for SPMD
    code started with ``mpiexec``. Point-to-point messages use ``isend`` / ``recv`` of
    pickled objects (NumPy arrays travel as buffers), ``allreduce`` uses MPI's own
    (rank-ordered for identical results: ``gather`` to every rank then a rank-order sum).
    Synchronous: sends are ``isend``, receives block the calling thread."""

    synchronous = True

    def __init__(self, comm=None):
        MPI = mpi()
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        super().__init__(self.comm.Get_rank(), self.comm.Get_size())
        self._tags: dict = {}
        self._next_tag = 0
        self._pending: list = []

    def _mpi_tag(self, tag) -> int:
        """The MPI tag of ``tag``: numbered in order of first use (the same order on every rank,
        SPMD); only the newest 1024 are remembered (older phases are over)."""
        number = self._tags.get(tag)
        if number is None:
            number = self._tags[tag] = self._next_tag
            self._next_tag = (self._next_tag + 1) % 32000
            if len(self._tags) > 1024:
                del self._tags[next(iter(self._tags))]
        return number

    async def send(self, dst: int, tag, data) -> None:
        self.messages += 1
        self.bytes += payload_bytes(data)
        self._pending.append(self.comm.isend(data, dest=dst, tag=self._mpi_tag(tag)))

    async def recv(self, src: int, tag):
        data = self.comm.recv(source=src, tag=self._mpi_tag(tag))
        self.flush()
        return data

    def flush(self) -> None:
        """Wait for this rank's outstanding sends."""
        pending, self._pending = self._pending, []
        for request in pending:
            request.wait()

    async def allreduce(self, values):
        values = np.asarray(values)
        self.syncs += 1
        self.flush()
        parts = self.comm.allgather(values)
        total = np.array(parts[0], copy=True)
        for part in parts[1:]:
            total = total + part
        return total
