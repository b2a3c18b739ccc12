"""The recursive-doubling all-reduce of Communicator over an in-process transport: for 1 to 9
ranks every rank gets bitwise the same sum, equal to the exact sum to rounding, in
ceil(log2(size)) rounds (two more for ranks past the largest power of two)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

pytest.importorskip("distributed")

from ustc.distributed.comm import Communicator  # noqa: E402


class _Local(Communicator):
    """Ranks in one event loop: a shared mailbox of futures keyed by (dst, src, tag)."""

    def __init__(self, rank, size, box):
        super().__init__(rank, size)
        self.box = box

    def _slot(self, key):
        if key not in self.box:
            self.box[key] = asyncio.get_running_loop().create_future()
        return self.box[key]

    async def send(self, dst, tag, data):
        self.messages += 1
        self._slot((dst, self.rank, tag)).set_result(np.array(data, copy=True))

    async def recv(self, src, tag):
        return await self._slot((self.rank, src, tag))


@pytest.mark.parametrize("size", range(1, 10))
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_recursive_doubling(size, dtype):
    rng = np.random.default_rng(size)
    parts = [(rng.standard_normal(3) * 10.0 ** rng.integers(-8, 8, 3)).astype(dtype) for _ in range(size)]
    if np.dtype(dtype).kind == "c":
        parts = [p + 1j * p[::-1] for p in parts]
    originals = [p.copy() for p in parts]

    async def run():
        box = {}
        comms = [_Local(r, size, box) for r in range(size)]
        out = await asyncio.gather(*(c.allreduce(p) for c, p in zip(comms, parts)))
        return out, comms

    out, comms = asyncio.run(run())
    for got in out:
        assert got.tobytes() == out[0].tobytes()              # bitwise the same on every rank
        assert got.dtype == np.dtype(dtype)
    exact = np.sum(np.array(parts, dtype=np.complex256 if np.dtype(dtype).kind == "c" else np.longdouble), axis=0)
    np.testing.assert_allclose(out[0], exact.astype(dtype), rtol=10 * np.finfo(dtype).eps * size,
                               atol=10 * np.finfo(dtype).eps * float(np.abs(np.array(parts)).sum()))
    p2 = 1 << (size.bit_length() - 1)
    rounds = int(math.log2(p2)) + (2 if size > p2 else 0)
    assert max(c.messages for c in comms) <= max(rounds, 0)
    assert sum(c.messages for c in comms) <= size * int(math.log2(p2)) + 2 * (size - p2)
    assert all(c.syncs == 1 for c in comms)
    for p, orig in zip(parts, originals):
        np.testing.assert_array_equal(p, orig)                 # inputs not mutated
