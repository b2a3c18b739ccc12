"""The runtime's transport choice: ``"auto"`` (the default) gives the block workers shared-memory
rings when every one of them runs on the driver's host, TCP otherwise; a machine without a usable
/dev/shm, or whose rings cannot be created, falls back to TCP and still delivers; a runtime made
without a transport takes ``$USTC_DIST_TRANSPORT`` (how the suite is run over another one)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from comm_helpers import close, group, spmd

pytest.importorskip("distributed")

import ustc  # noqa: E402
import ustc.distributed as ud  # noqa: E402
from ustc.distributed import shm  # noqa: E402
from ustc.distributed.comm import run_inline  # noqa: E402
from ustc.distributed.runtime import DEFAULT_TRANSPORT, rings_wanted  # noqa: E402
from ustc.distributed.sockets import SocketCommunicator  # noqa: E402


def _exchange(comms):
    """Every rank sends its neighbour an array and all-reduces; the values that arrive."""
    def step(comm):
        n = comm.size
        tag = comm.next_tag("x")
        run_inline(comm.send((comm.rank + 1) % n, tag, np.full(5, comm.rank, np.float64)))
        got = run_inline(comm.recv((comm.rank - 1) % n, tag))
        return got, run_inline(comm.allreduce(np.array([1.0])))
    return spmd(comms, step)


def _check(out):
    n = len(out)
    for r, (got, total) in enumerate(out):
        assert (got == (r - 1) % n).all() and total[0] == n


def test_rings_only_when_every_worker_is_on_the_driver_host():
    here, there = "host-a/boot-1", "host-b/boot-1"
    assert rings_wanted("auto", here, [here, here])
    assert not rings_wanted("auto", here, [here, there])          # a foreign host: TCP
    assert not rings_wanted("auto", here, [])
    assert rings_wanted("shm", here, [there])                      # forced: per pair
    assert not rings_wanted("socket", here, [here])


def test_no_dev_shm_falls_back_to_tcp(monkeypatch, tmp_path):
    monkeypatch.setattr(shm, "SHM_DIR", str(tmp_path / "missing"))
    assert not shm.shm_capable()
    comms = group(lambda *args: shm.listening(True, *args), 2)
    try:
        assert all(type(c) is SocketCommunicator for c in comms)
        _check(_exchange(comms))
    finally:
        close(comms)


@pytest.mark.skipif(not shm.shm_capable(), reason="shared-memory rings need x86-64 and /dev/shm")
def test_rings_that_cannot_be_created_leave_tcp(monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(shm.Ring, "create", classmethod(full))
    comms = group(shm.ShmCommunicator, 3)
    try:
        assert all(c.shared_peers == () for c in comms)
        _check(_exchange(comms))
    finally:
        close(comms)


def test_transport_from_the_environment(monkeypatch):
    monkeypatch.setenv("USTC_DIST_TRANSPORT", "carrier pigeon")
    with pytest.raises(ustc.UstcError, match="carrier pigeon"):
        ud.Runtime(n_workers=1)


@pytest.mark.skipif(not shm.shm_capable(), reason="shared-memory rings need x86-64 and /dev/shm")
@pytest.mark.skipif(bool(os.environ.get("USTC_DIST_TRANSPORT")), reason="a transport is forced")
def test_default_runtime_uses_rings_on_one_host(rt):
    assert rt.transport == DEFAULT_TRANSPORT == "auto"
    kinds = rt.group(2).call("transport")
    assert kinds == [("ShmCommunicator", (1,)), ("ShmCommunicator", (0,))]
