"""The direct transport: one TCP connection per pair of block workers, opened once.

:class:`SocketCommunicator` is what the block actors use by default. At set-up (through Dask,
once per group) every rank listens on an ephemeral port of its worker's host
(``127.0.0.1`` on a LocalCluster), the addresses are handed round by the driver, and rank
``r`` connects to the ranks below it and accepts the ranks above it. From then on messages go
straight from the sending thread into the peer's socket; a reader thread per connection
takes them off the wire into a mailbox, so a send never waits on the peer's computation (no
deadlock when both sides send first) and a ``recv`` is a wait on that mailbox: tens of
microseconds, no event loop and no scheduler on the way.

Its coroutines never suspend (``synchronous``): the block worker drives them inline in its
own thread (:func:`ustc.distributed.comm.run_inline`). A lost peer closes the connection:
receives from it fail at once with :class:`ustc.DistributedError` naming the block;
``abort`` fails every pending and later receive; ``close`` shuts the connections and joins
the reader threads.

Wire format of a message: a 12-byte header (pickle length, buffer count), the buffer lengths,
the pickled ``(tag, data)`` (protocol 5, NumPy arrays out of band) and the raw buffers.
"""

from __future__ import annotations

import hmac
import pickle
import secrets
import socket
import struct
import threading
import time

from ..errors import DistributedError
from .comm import Communicator, payload_bytes

_HEAD = struct.Struct("<QI")
_RANK = struct.Struct("<q")
#: bytes of the key a connecting rank must present before anything it sends is read (unpickled)
_KEY = 16
#: socket buffers asked for (the kernel caps them at net.core.[rw]mem_max): a halo plane fits
_BUFFER = 4 << 20


def _read_into(sock, view) -> None:
    """Fill ``view`` from ``sock``; ``EOFError`` when the peer closed."""
    while len(view):
        got = sock.recv_into(view)
        if not got:
            raise EOFError("connection closed")
        view = view[got:]


def _read(sock, n: int) -> bytearray:
    buf = bytearray(n)
    _read_into(sock, memoryview(buf))
    return buf


def _send_parts(sock, parts) -> None:
    """Send every byte of ``parts`` (buffers) with gathering writes."""
    views = [memoryview(p).cast("B") for p in parts if len(memoryview(p).cast("B"))]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]


def _tune(sock) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, _BUFFER)
        except OSError:  # pragma: no cover - a platform refusing the size keeps its default
            pass


class SocketCommunicator(Communicator):
    """Point-to-point TCP between the ranks of one group (see the module docstring). Build with
    the listening ``host``, give :meth:`connect` every rank's :attr:`address`."""

    synchronous = True

    def __init__(self, rank: int, size: int, host: str = "127.0.0.1", timeout: float = 120.0):
        super().__init__(rank, size)
        self.timeout = float(timeout)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((host, 0))
        self._listener.listen(max(size, 1))
        #: ``(host, port)`` the other ranks connect to
        self.address = self._listener.getsockname()[:2]
        self.key = secrets.token_bytes(_KEY)
        self._socks: dict = {}
        self._locks: dict = {}
        self._threads: list = []
        self._box: dict = {}
        self._cond = threading.Condition()
        self._lost: dict = {}
        self._aborted: str | None = None
        self._closed = False

    # -- set-up and shutdown --------------------------------------------------------------
    @property
    def endpoint(self) -> tuple:
        """``(host, port, key)``: what another rank needs to connect here; the key is random per
        communicator and travels only through Dask, so a stranger reaching the port is dropped
        before anything it sends is unpickled."""
        return (*self.address, self.key)

    def connect(self, endpoints, timeout: float = 30.0) -> None:
        """Open the connections: to every lower rank (presenting its key and this rank's
        number), from every higher one (accepted on the listener, which is then closed; a
        connection with a wrong key or an unexpected rank is closed unread). Blocking; every
        rank calls it at the same time from its own thread with every rank's :attr:`endpoint`."""
        for peer in range(self.rank):
            host, port, key = endpoints[peer]
            sock = socket.create_connection((host, port), timeout)
            _tune(sock)
            sock.sendall(bytes(key) + _RANK.pack(self.rank))
            self._attach(peer, sock)
        try:
            self._accept(set(range(self.rank + 1, self.size)), time.monotonic() + timeout)
        finally:
            self._listener.close()

    def _accept(self, expected: set, deadline: float) -> None:
        """Accept the ``expected`` ranks before ``deadline``; ``TimeoutError`` names the missing."""
        while expected:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"block {self.rank}: blocks {sorted(expected)} did not connect")
            self._listener.settimeout(left)
            try:
                sock, _ = self._listener.accept()
            except socket.timeout:
                continue
            try:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                hello = _read(sock, _KEY + _RANK.size)
            except (OSError, EOFError):
                sock.close()
                continue
            peer = _RANK.unpack(hello[_KEY:])[0]
            if not hmac.compare_digest(bytes(hello[:_KEY]), self.key) or peer not in expected:
                sock.close()
                continue
            expected.discard(peer)
            _tune(sock)
            self._attach(peer, sock)

    def _attach(self, peer: int, sock) -> None:
        sock.settimeout(None)
        self._socks[peer] = sock
        self._locks[peer] = threading.Lock()
        thread = threading.Thread(target=self._reader, args=(peer, sock), daemon=True,
                                  name=f"ustc-sock-{self.rank}-from-{peer}")
        self._threads.append(thread)
        thread.start()

    def close(self) -> None:
        """Shut every connection and wait for the reader threads (a few seconds at most)."""
        self._closed = True
        for sock in list(self._socks.values()) + [self._listener]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(5)
        self.abort("the communicator was closed")

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the wire -------------------------------------------------------------------------
    def _reader(self, peer: int, sock) -> None:
        try:
            while True:
                plen, nbuf = _HEAD.unpack(_read(sock, _HEAD.size))
                if not plen:                    # a doorbell (shared-memory rings): wake the receiver
                    with self._cond:
                        self._cond.notify_all()
                    continue
                lens = struct.unpack(f"<{nbuf}Q", _read(sock, 8 * nbuf)) if nbuf else ()
                head = _read(sock, plen)
                bufs = [_read(sock, n) for n in lens]
                tag, data = pickle.loads(head, buffers=bufs)
                with self._cond:
                    self._box[(tag, peer)] = data
                    self._cond.notify_all()
        except Exception as exc:  # noqa: BLE001 - EOF, reset, or a broken message: the peer is gone
            with self._cond:
                if not self._closed:
                    self._lost[peer] = f"block {self.rank} lost its connection to block {peer} ({exc!r})"
                self._cond.notify_all()

    async def send(self, dst: int, tag, data) -> None:
        if self._aborted:
            raise DistributedError(self._aborted)
        self.messages += 1
        self.bytes += payload_bytes(data)
        if dst == self.rank:
            with self._cond:
                self._box[(tag, dst)] = data
                self._cond.notify_all()
            return
        bufs: list = []
        head = pickle.dumps((tag, data), protocol=5, buffer_callback=bufs.append)
        raws = [b.raw() for b in bufs]
        lens = struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
        try:
            with self._locks[dst]:
                _send_parts(self._socks[dst], [_HEAD.pack(len(head), len(raws)), lens, head, *raws])
        except (OSError, KeyError) as exc:
            raise DistributedError(f"block {self.rank} could not reach block {dst}: {exc!r}",
                                   lost_blocks=(dst,)) from exc

    async def recv(self, src: int, tag):
        key = (tag, int(src))
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while key not in self._box:
                if self._aborted:
                    raise DistributedError(self._aborted)
                if src in self._lost:
                    raise DistributedError(self._lost[src], lost_blocks=(src,))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DistributedError(f"block {self.rank} waited {self.timeout:g} s for block {src}",
                                           lost_blocks=(src,))
                self._cond.wait(left)
            return self._box.pop(key)

    def abort(self, reason: str) -> None:
        """Fail every pending and later ``recv`` / ``send`` with ``reason``."""
        with self._cond:
            self._aborted = reason
            self._cond.notify_all()
