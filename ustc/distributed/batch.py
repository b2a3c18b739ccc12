"""Batched work on the runtime's workers: :func:`map`.

``map(fn, items, shared=obj)`` is ``[fn(item, obj) for item in items]`` run on the workers:
``obj`` is scattered once per worker (``broadcast=True``) and every item there reuses it; the
items travel in a few chunks per worker, so the scheduler handles a handful of tasks, not one
per item, and work stealing can still move a chunk from a slow worker to an idle one.
"""

from __future__ import annotations

import builtins

from ..errors import UstcError

#: chunks per worker unless asked otherwise: enough that the last chunks even out a worker
#: slowed by other processes (a chunk is at most 1/8 of a worker's share), few enough that
#: the scheduler's ~1 ms per task stays negligible beside items of milliseconds
CHUNKS_PER_WORKER = 8


class _Nothing:
    """The ``shared`` default: ``fn`` takes the item alone. Pickles to the one instance."""

    def __reduce__(self):
        return (_nothing, ())

    def __repr__(self):
        return "<no shared operand>"


def _nothing():
    return NOTHING


NOTHING = _Nothing()


def apply_chunk(fn, items, shared) -> list:
    """``fn`` over one chunk of items, in order (runs on a worker)."""
    if shared is NOTHING:
        return [fn(item) for item in items]
    return [fn(item, shared) for item in items]


def chunk_bounds(count: int, chunks: int) -> list[int]:
    """``chunks + 1`` bounds splitting ``count`` items into near-even contiguous chunks."""
    return [count * c // chunks for c in range(chunks + 1)]


def map(fn, items, *, shared=NOTHING, chunks_per_worker: int = CHUNKS_PER_WORKER, runtime=None) -> list:  # noqa: A001
    """``[fn(item, shared) for item in items]`` (``fn(item)`` without ``shared``) on the
    workers, in order. ``shared`` (a matrix, a model, ...) is sent once per worker and reused by
    every item there; the items travel in ``chunks_per_worker`` chunks per worker (fewer when
    there are fewer items). ``fn`` and the items must pickle; an exception raised by ``fn``
    propagates. ``runtime``: a :class:`~ustc.distributed.runtime.Runtime` (default the
    process-wide one)."""
    from .runtime import runtime as default

    if not callable(fn):
        raise UstcError(f"map: fn must be callable, got {type(fn).__name__}")
    if isinstance(chunks_per_worker, bool) or not isinstance(chunks_per_worker, int) or chunks_per_worker < 1:
        raise UstcError(f"map: chunks_per_worker must be a positive integer, got {chunks_per_worker!r}")
    items = builtins.list(items)
    if not items:
        return []
    rt = runtime if runtime is not None else default()
    client = rt.client
    nchunks = min(len(items), max(1, len(rt.workers)) * chunks_per_worker)
    bounds = chunk_bounds(len(items), nchunks)
    shared_ref = client.scatter(shared, broadcast=True, hash=False) if shared is not NOTHING else NOTHING
    futures = [client.submit(apply_chunk, fn, items[lo:hi], shared_ref, pure=False)
               for lo, hi in zip(bounds, bounds[1:])]
    try:
        out = []
        for chunk in client.gather(futures):
            out.extend(chunk)
        return out
    finally:
        client.cancel(futures)
        if shared_ref is not NOTHING:
            client.cancel([shared_ref])
