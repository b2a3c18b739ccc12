"""Lanes, warps and memory of the lock-step warp model (:mod:`codegen.warp_model`).

Every value of a kernel variable is either uniform (a Python or NumPy scalar) or one
entry per thread of the launch (a NumPy array of length ``threads``); ``mask`` is a
boolean array of the threads executing a statement. The warp intrinsics here act on
whole warps of 32 consecutive threads, as on the GPU, and refuse what the hardware
leaves undefined: a ``*_sync`` whose member mask names a lane that is not executing
the call (divergence), or a shuffle that reads a lane outside the mask.

:class:`Memory` wraps one kernel argument array: bounds-checked gathers and scatters
for the active lanes, atomics applied in lane order, and a race detector — an element
written plainly by one thread and read, written or updated atomically by another in
the same launch is a :class:`ModelError` (on a GPU the order is unspecified).
"""

from __future__ import annotations

import numpy as np

WARP = 32
NONE, MANY = -1, -2


class ModelError(Exception):
    """The kernel did something a GPU leaves undefined, or the model cannot run."""


def lanes_of(value, n: int) -> np.ndarray:
    """``value`` as one entry per thread (a uniform scalar broadcast)."""
    return value if isinstance(value, np.ndarray) and value.shape == (n,) else np.broadcast_to(np.asarray(value), (n,))


# -- warp intrinsics ------------------------------------------------------------------------

def _members(member_mask, mask: np.ndarray, what: str) -> np.ndarray:
    """The member-lane bits per thread; raises unless every member lane executes the call."""
    n = mask.shape[0]
    bits = lanes_of(member_mask, n).astype(np.int64) & 0xFFFFFFFF
    active = active_bits(mask)
    named = bits[mask]
    missing = named & ~active[mask]
    if np.any(missing):
        t = int(np.nonzero(mask)[0][np.nonzero(missing)[0][0]])
        raise ModelError(f"{what}: warp {t // WARP} names lanes {_lanes(int(missing[np.nonzero(missing)[0][0]]))} "
                         f"in its mask, but they do not execute the call (divergent warp)")
    lane = np.arange(n)[mask] % WARP
    if np.any((named >> lane) & 1 == 0):
        raise ModelError(f"{what}: a lane calls with a member mask that leaves itself out")
    return bits


def _lanes(bits: int) -> list[int]:
    return [k for k in range(WARP) if bits >> k & 1]


def active_bits(mask: np.ndarray) -> np.ndarray:
    """Per thread: the bit set of its warp's executing lanes (``cuda.activemask()``)."""
    warps = mask.reshape(-1, WARP).astype(np.int64)
    bits = (warps << np.arange(WARP)).sum(axis=1)
    return np.repeat(bits, WARP)


def shuffle(mask: np.ndarray, member_mask, value, source: np.ndarray, what: str):
    """Each executing lane reads ``value`` of lane ``source`` of its warp (a lane number, or
    -1 for "keep your own", as shfl_up/down past the warp's edge do)."""
    n = mask.shape[0]
    bits = _members(member_mask, mask, what)
    values = lanes_of(value, n)
    own = source < 0
    base = np.arange(n) - np.arange(n) % WARP
    src = np.where(own, np.arange(n), base + np.where(own, 0, source))
    readable = own | ((bits >> np.where(own, 0, source)) & 1 == 1)
    if np.any(mask & ~readable):
        raise ModelError(f"{what}: a lane reads a lane outside the member mask (undefined)")
    return np.where(mask, values[np.where(mask, src, np.arange(n))], 0).astype(values.dtype)


def ballot(mask: np.ndarray, member_mask, predicate) -> np.ndarray:
    """``cuda.ballot_sync``: the bits of the member lanes whose predicate holds."""
    n = mask.shape[0]
    bits = _members(member_mask, mask, "ballot_sync")
    votes = (mask & lanes_of(predicate, n).astype(bool)).reshape(-1, WARP).astype(np.int64)
    found = np.repeat((votes << np.arange(WARP)).sum(axis=1), WARP) & bits
    return found.astype(np.uint32)


def sync_warp(mask: np.ndarray, member_mask) -> None:
    _members(member_mask, mask, "syncwarp")


# -- memory -----------------------------------------------------------------------------------

def _combine(old: np.ndarray, flat: np.ndarray, threads: np.ndarray) -> None:
    """``old[e]`` becomes the one thread that touched element ``e`` so far, or MANY."""
    order = np.lexsort((threads, flat))
    f, t = flat[order], threads[order]
    starts = np.r_[0, np.nonzero(np.diff(f))[0] + 1]
    lo, hi = np.minimum.reduceat(t, starts), np.maximum.reduceat(t, starts)
    elems = f[starts]
    now = np.where(lo == hi, lo, MANY)
    before = old[elems]
    old[elems] = np.where((before == NONE) | (before == now), now, MANY)


def _foreign(record: np.ndarray, flat: np.ndarray, threads: np.ndarray) -> np.ndarray:
    seen = record[flat]
    return (seen != NONE) & (seen != threads)


class Memory:
    """One array argument of a kernel: ``load`` / ``store`` / ``atomic`` for the active lanes.
    ``tracked``: the kernel writes it, so accesses are recorded for the race detector."""

    def __init__(self, name: str, array: np.ndarray, tracked: bool):
        self.name, self.array = name, array
        self.flat_view = array.reshape(-1) if array.ndim else array.reshape(1)
        self.shape = array.shape if array.ndim else (1,)
        self.records = {k: np.full(self.flat_view.shape[0], NONE, np.int64) for k in ("plain", "atomic", "read")} \
            if tracked else None

    def flat(self, index: tuple, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(threads, flat element indices) of the active lanes; bounds-checked."""
        threads = np.nonzero(mask)[0]
        if len(index) != len(self.shape):
            raise ModelError(f"{self.name}: {len(index)} indices for {len(self.shape)} dimensions")
        parts = []
        for axis, (i, extent) in enumerate(zip(index, self.shape)):
            values = lanes_of(i, mask.shape[0])[threads]
            if values.dtype.kind not in "iub":
                raise ModelError(f"{self.name}: index of dtype {values.dtype}")
            if values.dtype.kind == "u":
                bad = values >= np.uint64(extent)
            else:
                bad = (values < 0) | (values >= extent)
            if np.any(bad):
                k = int(np.nonzero(bad)[0][0])
                raise ModelError(f"{self.name}: index {values[k]} out of bounds for axis {axis} of extent {extent} "
                                 f"(thread {threads[k]})")
            parts.append(values.astype(np.int64))
        return threads, (np.ravel_multi_index(parts, self.shape) if parts else np.zeros(len(threads), np.int64))

    def _check(self, kinds: tuple, flat: np.ndarray, threads: np.ndarray, what: str) -> None:
        if self.records is None or not len(flat):
            return
        for kind in kinds:
            bad = _foreign(self.records[kind], flat, threads)
            if np.any(bad):
                k = int(np.nonzero(bad)[0][0])
                raise ModelError(f"race on {self.name}: thread {threads[k]} {what} element {flat[k]} that thread "
                                 f"{self.records[kind][flat[k]]} ({'several' if self.records[kind][flat[k]] == MANY else 'one'}) "
                                 f"accessed ({kind})")

    def load(self, index: tuple, mask: np.ndarray) -> np.ndarray:
        threads, flat = self.flat(index, mask)
        self._check(("plain", "atomic"), flat, threads, "reads")
        if self.records is not None and len(flat):
            _combine(self.records["read"], flat, threads)
        out = np.zeros(mask.shape[0], self.array.dtype)
        out[threads] = self.flat_view[flat]
        return out

    def store(self, index: tuple, value, mask: np.ndarray) -> None:
        threads, flat = self.flat(index, mask)
        self._check(("plain", "atomic", "read"), flat, threads, "writes")
        if len(np.unique(flat)) != len(flat):
            raise ModelError(f"race on {self.name}: two threads store the same element at once")
        if self.records is not None and len(flat):
            _combine(self.records["plain"], flat, threads)
        self.flat_view[flat] = lanes_of(value, mask.shape[0])[threads].astype(self.array.dtype)

    def atomic(self, op: str, index: tuple, value, mask: np.ndarray) -> np.ndarray:
        """``cuda.atomic.<op>`` in lane order; returns each lane's old value."""
        threads, flat = self.flat(index, mask)
        self._check(("plain", "read"), flat, threads, "updates atomically")
        if self.records is not None and len(flat):
            _combine(self.records["atomic"], flat, threads)
        values = lanes_of(value, mask.shape[0])[threads].astype(self.array.dtype)
        old = np.zeros(mask.shape[0], self.array.dtype)
        fold = {"add": np.add, "min": np.minimum, "max": np.maximum}[op]
        for t, e, v in zip(threads, flat, values):
            old[t] = self.flat_view[e]
            self.flat_view[e] = fold(self.flat_view[e], v)
        return old
