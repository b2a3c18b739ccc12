"""Shared-memory mailboxes for the block workers of one host (``transport="shm"``, and the default
``"auto"`` when every block worker runs on the driver's host; see docs/distributed.md).

:class:`ShmCommunicator` is the :class:`~ustc.distributed.sockets.SocketCommunicator` with, for
every pair of ranks on the same host (the same machine: host name and boot id), one
single-producer single-consumer ring per direction in a shared-memory segment (a file of ``/dev/shm``
mapped by both). A send pickles as the socket transport does (protocol 5, arrays out of band) and
copies the frame into the ring; the receiving block thread takes it out itself, so a message
between two ranks of one host costs two copies and no system call, no reader thread and no
wake-up. A receive first spins a short while (adaptively: twice the last
wait when that was under ``_SPIN_MAX``, else half the last spin; and only while the machine has
no more runnable threads than cores, so a loaded machine is not burnt and a spinning receiver
never takes the core its sender needs), then sleeps on the communicator's condition after raising the ring's
*waiting* flag (a new generation per sleep); a sender that sees a generation it has not rung
for rings a doorbell (an empty frame) over the pair's
TCP connection, whose reader thread wakes the receiver. The TCP connections stay: they carry
the doorbells, frames too large for the free ring space (then the message goes over TCP, which
the mailbox keyed by ``(tag, source)`` makes harmless), pairs on different hosts, and the
loss detection (a peer that goes away closes them: receives from it fail at once naming the
block).

Segments are named ``ustc_<random>``, created by the sending side with mode 0600 and unlinked
by it as soon as every rank has attached (a barrier over the sockets at connect), so nothing
is left in ``/dev/shm`` even when a worker is killed afterwards; ``close`` unmaps them.

Memory order: the payload is written before the ring's write position and read after it;
x86-64 keeps stores in order and loads in order, so the ring is used on x86-64 only (other
machines keep the socket path). The waiting flag and the write position are separated by a
full fence on both sides (an uncontended lock), and a sleeping receiver looks at its rings
again every ``_NAP`` seconds regardless, so a doorbell missed in a race costs at most that.
"""

from __future__ import annotations

import mmap
import os
import pickle
import platform
import secrets
import socket
import struct
import threading
import time

import numpy as np

from ..errors import DistributedError
from .comm import payload_bytes
from .sockets import _HEAD, SocketCommunicator

#: bytes of data per ring (one direction of one pair): a side-114 halo plane is 104 KiB
RING_BYTES = 2 << 20
_CTRL = 64                     # u64 slots before the data: [0] write pos, [8] read pos, [16] waiting
_W, _R, _WAIT = 0, 8, 16       # slots 64 bytes apart: the writer's and the reader's words on their own lines
_DATA = _CTRL * 8
_FRAME = struct.Struct("<QII")  # frame bytes (8-aligned), pickle bytes, buffer count
_SPIN_START, _SPIN_MAX, _SPIN_MIN = 50e-6, 200e-6, 1e-6
_NAP = 0.01                    # a sleeping receiver re-reads its rings this often
_BARRIER = ("ustc-shm-attached",)


#: where the segments live (a tmpfs on Linux)
SHM_DIR = "/dev/shm"


def shm_capable() -> bool:
    """Whether this machine may use the rings: x86-64 (stores and loads stay in order) with a
    writable ``/dev/shm``."""
    return (platform.machine().lower() in ("x86_64", "amd64") and os.path.isdir(SHM_DIR)
            and os.access(SHM_DIR, os.W_OK))


def listening(shared: bool, rank: int, size: int, host: str, timeout: float) -> SocketCommunicator:
    """The communicator a block worker listens with: a :class:`ShmCommunicator` when ``shared``
    and this machine can hold the rings (:func:`shm_capable`; one whose rings cannot be created
    keeps TCP alone), else a :class:`SocketCommunicator`."""
    kind = ShmCommunicator if shared and shm_capable() else SocketCommunicator
    return kind(rank, size, host, timeout)


def host_id() -> str:
    """Same value in every process of this machine (and boot): host name and boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_LOOK = 0.02                   # how often a receiver looks whether the machine has a core to spin on
_busy = [0.0, True]            # (when looked, spinning allowed)


def _may_spin() -> bool:
    """Whether a receive may spin: no more runnable threads on the machine than cores (the 4th
    field of ``/proc/loadavg``, this thread included), looked at every ``_LOOK`` seconds. A
    spinning receiver on a machine with no idle core takes the core its sender needs."""
    now = time.monotonic()
    if now - _busy[0] >= _LOOK:
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            running = int(os.getloadavg()[0]) + 1
        _busy[:] = [now, running <= _CORES]
    return _busy[1]


_FENCE = threading.Lock()


def _fence() -> None:
    """A full memory fence on x86-64 (a locked instruction, taking an uncontended lock)."""
    _FENCE.acquire()
    _FENCE.release()


class Ring:
    """One direction of one pair: the sender :meth:`put` s frames, the receiver :meth:`take` s them.
    The segment is a file of ``/dev/shm`` (no ``multiprocessing`` resource tracker: Dask's workers
    share the driver's, where one process's attachment would cancel another's registration)."""

    def __init__(self, path: str, owner: bool, size: int = 0):
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if owner else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if owner:
                os.ftruncate(fd, _DATA + size)
            self.map = mmap.mmap(fd, os.fstat(fd).st_size)
        except OSError:
            if owner:
                os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.path, self.owner = path, owner
        self.ctrl = np.frombuffer(self.map, np.uint64, _CTRL)
        self.data = np.frombuffer(self.map, np.uint8, offset=_DATA)
        self.cap = self.data.size // 8 * 8
        self.lock = threading.Lock()
        self.gen = 0               # receiver: sleep generations so far; sender: the last one rung for

    @classmethod
    def create(cls, size: int | None = None) -> "Ring":
        size = RING_BYTES if size is None else size
        return cls(os.path.join(SHM_DIR, f"ustc_{secrets.token_hex(12)}"), True, size)

    @classmethod
    def attach(cls, name: str) -> "Ring":
        return cls(os.path.join(SHM_DIR, name), False)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    # -- sender ---------------------------------------------------------------------------
    def put(self, parts, nbytes: int, plen: int) -> bool:
        """Write one frame (``parts``: the buffer lengths, the pickle, the buffers) if it fits in
        the free space; False (nothing written) if not."""
        size = (_FRAME.size + nbytes + 7) // 8 * 8
        w = int(self.ctrl[_W])
        free = self.cap - (w - int(self.ctrl[_R]))
        pos = w % self.cap
        skip = self.cap - pos if pos + size > self.cap else 0
        if size + skip > free or size > self.cap // 2:
            return False
        if skip:                                   # a zero-length frame: continue at the start
            self.data[pos:pos + 8] = np.frombuffer(_FRAME.pack(0, 0, 0)[:8], np.uint8)
            pos = 0
        at = pos + _FRAME.size
        self.data[pos:at] = np.frombuffer(_FRAME.pack(size, plen, len(parts) - 2), np.uint8)
        for part in parts:
            n = part.nbytes
            if n:
                self.data[at:at + n] = np.frombuffer(part, np.uint8)
                at += n
        self.ctrl[_W] = w + skip + size       # published: the receiver may read it now
        return True

    def waiting(self) -> int:
        """The receiver's sleep generation (0: awake): a sender rings once per generation."""
        _fence()
        return int(self.ctrl[_WAIT])

    # -- receiver -------------------------------------------------------------------------
    def ready(self) -> bool:
        return self.ctrl[_W] != self.ctrl[_R]

    def set_waiting(self, flag: bool) -> None:
        """Raise the waiting flag as a new sleep generation (each deserves one doorbell), or lower it."""
        if flag:
            self.gen += 1
            self.ctrl[_WAIT] = self.gen
            _fence()
        else:
            self.ctrl[_WAIT] = 0

    def take(self):
        """Every complete frame in the ring, unpickled, as ``(tag, data)`` pairs."""
        out = []
        with self.lock:
            r, w = int(self.ctrl[_R]), int(self.ctrl[_W])
            while r != w:
                pos = r % self.cap
                size, plen, nbuf = _FRAME.unpack(self.data[pos:pos + _FRAME.size].tobytes()) \
                    if pos + _FRAME.size <= self.cap else (0, 0, 0)
                if size == 0:
                    r += self.cap - pos
                    continue
                at = pos + _FRAME.size
                lens = struct.unpack(f"<{nbuf}Q", self.data[at:at + 8 * nbuf].tobytes()) if nbuf else ()
                at += 8 * nbuf
                head = self.data[at:at + plen].tobytes()
                at += plen
                bufs = []
                for n in lens:
                    buf = bytearray(n)             # writable, like the socket path's buffers
                    np.frombuffer(buf, np.uint8)[:] = self.data[at:at + n]
                    bufs.append(buf)
                    at += n
                out.append(pickle.loads(head, buffers=bufs))
                r += size
                self.ctrl[_R] = r
        return out

    def close(self) -> None:
        """Unmap the segment (and unlink it if this side created it and has not yet)."""
        self.unlink()
        del self.ctrl, self.data
        try:
            self.map.close()
        except BufferError:  # pragma: no cover - a view still alive: unmapped when it goes
            pass

    def unlink(self) -> None:
        if self.owner:
            self.owner = False
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class ShmCommunicator(SocketCommunicator):
    """:class:`SocketCommunicator` plus a shared-memory ring per direction for every pair on one
    host (see the module docstring). Build with the listening ``host``; :attr:`endpoint` carries
    the host id and the names of this rank's outgoing rings."""

    def __init__(self, rank: int, size: int, host: str = "127.0.0.1", timeout: float = 120.0):
        super().__init__(rank, size, host, timeout)
        self._out: dict = {}
        self._in: dict = {}
        self._spin: dict = {}
        try:
            for peer in range(size):
                if peer != rank:
                    self._out[peer] = Ring.create()
        except OSError:              # no shared memory here (a full /dev/shm): sockets only
            self._drop_rings()

    @property
    def endpoint(self) -> tuple:
        """``(host, port, key, (host id, {rank: ring name}))``: :class:`SocketCommunicator`'s
        endpoint and what a rank of the same host attaches to."""
        rings = {peer: ring.name for peer, ring in self._out.items()}
        return (*super().endpoint, (host_id(), rings) if rings else None)

    @property
    def shared_peers(self) -> tuple:
        """The ranks this one exchanges with through shared memory."""
        return tuple(sorted(self._in))

    def connect(self, endpoints, timeout: float = 30.0) -> None:
        """Attach the rings of the peers on this host, open the TCP connections, then wait until
        every such peer has attached this rank's rings (a barrier over TCP) and unlink them."""
        try:
            self._attach_rings(endpoints)
            super().connect([tuple(ep[:3]) for ep in endpoints], timeout)
            self._barrier()
        finally:                     # attached or failed: the names go (the mappings stay)
            for ring in self._out.values():
                ring.unlink()

    def _attach_rings(self, endpoints) -> None:
        """Attach the ring each peer of this host writes to this rank; drop the rings to others."""
        mine = endpoints[self.rank][3] if len(endpoints[self.rank]) > 3 else None
        here = mine[0] if mine is not None else None        # both sides of a pair decide alike
        for peer, ep in enumerate(endpoints):
            shm = ep[3] if len(ep) > 3 else None
            if peer == self.rank or peer not in self._out:
                continue
            if shm is None or here is None or shm[0] != here or self.rank not in shm[1]:
                self._out.pop(peer).close()
                continue
            self._in[peer] = Ring.attach(shm[1][self.rank])
            self._spin[peer] = _SPIN_START
        for peer in [p for p in self._out if p not in self._in]:
            self._out.pop(peer).close()

    def _barrier(self) -> None:
        for peer in self._in:
            self._raw(peer, pickle.dumps((_BARRIER, None), protocol=5))
        for peer in self._in:
            _wait(self, (_BARRIER, peer), peer)

    def _raw(self, peer: int, head: bytes) -> None:
        """One frame (no out-of-band buffers) or, with ``head`` empty, a doorbell, over TCP."""
        try:
            with self._locks[peer]:
                self._socks[peer].sendall(_HEAD.pack(len(head), 0) + head)
        except (OSError, KeyError) as exc:
            raise DistributedError(f"block {self.rank} could not reach block {peer}: {exc!r}",
                                   lost_blocks=(peer,)) from exc

    def _drop_rings(self) -> None:
        for ring in list(self._out.values()) + list(self._in.values()):
            ring.close()
        self._out.clear()
        self._in.clear()

    def close(self) -> None:
        """Shut the connections (joining the reader threads), then unmap every ring."""
        super().close()
        with self._cond:
            self._drop_rings()

    async def send(self, dst: int, tag, data) -> None:
        ring = self._out.get(dst) if dst in self._in else None
        if ring is None:
            return await super().send(dst, tag, data)
        if self._aborted:
            raise DistributedError(self._aborted)
        if dst in self._lost:
            raise DistributedError(self._lost[dst], lost_blocks=(dst,))
        bufs: list = []
        head = pickle.dumps((tag, data), protocol=5, buffer_callback=bufs.append)
        raws = [b.raw() for b in bufs]
        lens = memoryview(struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws)))
        parts = [lens, memoryview(head), *raws]
        if not ring.put(parts, sum(p.nbytes for p in parts), len(head)):
            return await super().send(dst, tag, data)      # no room: over TCP (counted there)
        self.messages += 1
        self.bytes += payload_bytes(data)
        gen = ring.waiting()
        if gen and gen != ring.gen:                 # asleep, and not yet rung for this sleep
            ring.gen = gen
            self._raw(dst, b"")

    async def recv(self, src: int, tag):
        ring = self._in.get(int(src))
        if ring is None:
            return await super().recv(src, tag)
        src, key = int(src), (tag, int(src))
        found = self._collect(ring, key)
        if found:
            return found[0]
        t0 = time.perf_counter()
        end = t0 + (self._spin[src] if _may_spin() else 0.0)
        while time.perf_counter() < end:            # no yield: a yield on a loaded machine costs a time slice
            if ring.ready():
                found = self._collect(ring, key)
                if found:
                    self._adapt(src, time.perf_counter() - t0)
                    return found[0]
        data = _wait(self, key, src, ring)
        self._adapt(src, time.perf_counter() - t0)
        return data

    def _adapt(self, src: int, waited: float) -> None:
        """The next spin for ``src``: twice a wait that spinning would have caught, else half."""
        if waited < _SPIN_MAX:
            self._spin[src] = min(2 * waited, _SPIN_MAX)
        else:
            spin = self._spin[src] / 2
            self._spin[src] = spin if spin >= _SPIN_MIN else 0.0

    def _collect(self, ring, key):
        """Move the ring's frames into the mailbox; ``(data,)`` if ``key`` is there, else ``()``."""
        frames = ring.take() if ring.ready() else ()
        with self._cond:
            for tag, data in frames:
                self._box[(tag, key[1])] = data
            if key in self._box:
                return (self._box.pop(key),)
        return ()


def _wait(comm: SocketCommunicator, key, src: int, ring: Ring | None = None):
    """Sleep on ``comm``'s condition until ``key`` is in its mailbox (moving ``ring``'s frames
    there after raising its waiting flag); the socket transport's errors on abort, loss, timeout."""
    deadline = time.monotonic() + comm.timeout
    with comm._cond:
        try:
            while True:
                if ring is not None:
                    ring.set_waiting(True)
                    for tag, data in ring.take():
                        comm._box[(tag, src)] = data
                if key in comm._box:
                    return comm._box.pop(key)
                if comm._aborted:
                    raise DistributedError(comm._aborted)
                if src in comm._lost:
                    raise DistributedError(comm._lost[src], lost_blocks=(src,))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DistributedError(f"block {comm.rank} waited {comm.timeout:g} s for block {src}",
                                           lost_blocks=(src,))
                comm._cond.wait(min(left, _NAP) if ring is not None else left)
        finally:
            if ring is not None:
                ring.set_waiting(False)
