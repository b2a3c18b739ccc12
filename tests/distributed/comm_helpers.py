"""Ranks of a direct transport (SocketCommunicator, ShmCommunicator) in threads of the test
process, connected on 127.0.0.1: shared by test_dist_sockets and test_dist_shm."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def group(kind, size: int, timeout: float = 30.0, endpoints=None) -> list:
    """``size`` connected ranks of the communicator class ``kind``; ``endpoints(list)``, if given,
    may rewrite the endpoints the ranks exchange (say, a rank claiming another host)."""
    comms = [kind(r, size, "127.0.0.1", timeout) for r in range(size)]
    assert all(c.address[0] == "127.0.0.1" for c in comms)
    eps = [c.endpoint for c in comms]
    if endpoints is not None:
        eps = endpoints(eps)
    with ThreadPoolExecutor(size) as pool:
        list(pool.map(lambda c: c.connect(eps, 10), comms))
    return comms


def spmd(comms, fn) -> list:
    """``fn(comm)`` on every rank at once (one thread each), results in rank order."""
    with ThreadPoolExecutor(len(comms)) as pool:
        return list(pool.map(fn, comms))


def reader_threads(comms) -> list:
    """The reader threads of ``comms`` still alive."""
    return [t for c in comms for t in c._threads if t.is_alive()]


def close(comms) -> None:
    """Close every rank; none may leave a reader thread behind."""
    for c in comms:
        c.close()
    assert not reader_threads(comms)
