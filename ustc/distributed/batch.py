"""Batched work on the runtime's workers: :func:`map`.

``map(fn, items, shared=obj)`` is ``[fn(item, obj) for item in items]`` run on the workers:
``obj`` is scattered once per worker (``broadcast=True``) and every item there reuses it; the
items travel in chunks, so the scheduler handles a few tasks per worker, not one per item. The
scheduler hands the chunks out as the workers free up (Dask's task queuing, two per worker at a
time), and the last chunks shrink to single items, so the workers finish together (a worker
slowed by other processes takes fewer chunks). The first failing item cancels the chunks not
started and its exception, naming the item, propagates.
"""

from __future__ import annotations

import builtins
import reprlib

from ..errors import UstcError
from .quiet import MAP_PAUSED, pause, resume

#: chunks per worker in the bulk of a map: few enough that the scheduler's ~1 ms per task stays
#: negligible beside items of milliseconds, small enough that no worker holds much of the work
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


def chunk_bounds(count: int, workers: int, chunks_per_worker: int = CHUNKS_PER_WORKER) -> list[int]:
    """Bounds of contiguous chunks covering ``count`` items for ``workers`` workers: chunks of
    ``ceil(count / (workers * chunks_per_worker))`` items while plenty remain, then, once fewer
    than two such chunks per worker are left, ``ceil(left / (2 * workers))`` (guided
    self-scheduling: every worker holds up to two chunks, the one it runs and the next), down to
    one item, so the last chunks to finish are short and the workers end together."""
    if count < 0 or workers < 1 or chunks_per_worker < 1:
        raise UstcError(f"chunk_bounds: bad arguments {count}, {workers}, {chunks_per_worker}")
    bulk = -(-count // (workers * chunks_per_worker))
    bounds = [0]
    while bounds[-1] < count:
        left = count - bounds[-1]
        bounds.append(bounds[-1] + min(bulk, -(-left // (2 * workers))))
    return bounds


def _running_worker():
    """The Dask worker running this task, or None (run outside a worker)."""
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


def apply_chunk(fn, items, start, shared, quiet=()) -> list:
    """``fn`` over one chunk of items, in order (runs on a worker). ``start``: the index of the
    first item in the whole map, for the note an exception gets. ``quiet``: the worker's periodic
    callbacks paused while the chunk runs (:mod:`ustc.distributed.quiet`)."""
    worker = _running_worker() if quiet else None
    if worker is not None:
        worker.loop.add_callback(pause, worker, quiet)      # thread-safe: runs on the worker's loop
    try:
        out = []
        for offset, item in enumerate(items):
            try:
                out.append(fn(item) if shared is NOTHING else fn(item, shared))
            except Exception as exc:
                exc.add_note(f"ustc.distributed.map: fn failed on item {start + offset}: {reprlib.repr(item)}")
                raise
        return out
    finally:
        if worker is not None:
            worker.loop.add_callback(resume, worker)


def _check(fn, chunks_per_worker) -> None:
    if not callable(fn):
        raise UstcError(f"map: fn must be callable, got {type(fn).__name__}")
    if isinstance(chunks_per_worker, bool) or not isinstance(chunks_per_worker, int) or chunks_per_worker < 1:
        raise UstcError(f"map: chunks_per_worker must be a positive integer, got {chunks_per_worker!r}")


def map(fn, items, *, shared=NOTHING, chunks_per_worker: int = CHUNKS_PER_WORKER, runtime=None) -> list:  # noqa: A001
    """``[fn(item, shared) for item in items]`` (``fn(item)`` without ``shared``) on the
    workers, in order. ``shared`` (a matrix, a model, ...) is sent once per worker and reused by
    every item there; the items travel in chunks (:func:`chunk_bounds`: ``chunks_per_worker``
    per worker in the bulk, shrinking at the end). ``fn`` and the items must pickle. An exception
    raised by ``fn`` propagates with a note naming the item (its index and repr); the chunks not
    started by then are cancelled. ``runtime``: a :class:`~ustc.distributed.runtime.Runtime`
    (default the process-wide one). On a cluster the runtime started, Dask's sampling callbacks
    (the profiler, tick and system monitors: :data:`~ustc.distributed.quiet.MAP_PAUSED`) pause
    while chunks run, on the workers and on the scheduler and nannies in this process."""
    from distributed import as_completed

    from .runtime import runtime as default

    _check(fn, chunks_per_worker)
    items = builtins.list(items)
    if not items:
        return []
    rt = runtime if runtime is not None else default()
    client = rt.client
    bounds = chunk_bounds(len(items), max(1, len(rt.workers)), chunks_per_worker)
    quiet = MAP_PAUSED if rt.owned else ()
    local = rt.local_servers() if rt.owned else []
    for server in local:
        client.loop.add_callback(pause, server, quiet)
    futures, shared_ref = [], NOTHING
    try:
        shared_ref = client.scatter(shared, broadcast=True, hash=False) if shared is not NOTHING else NOTHING
        futures = [client.submit(apply_chunk, fn, items[lo:hi], lo, shared_ref, quiet, pure=False)
                   for lo, hi in zip(bounds, bounds[1:])]
        where = {f.key: k for k, f in enumerate(futures)}
        chunks = [None] * len(futures)
        for future, chunk in as_completed(futures, with_results=True):
            chunks[where[future.key]] = chunk
    except BaseException:
        held = futures + ([shared_ref] if shared_ref is not NOTHING else [])
        if held:
            client.cancel(held)          # chunks not started never start
        raise
    finally:
        for server in local:
            client.loop.add_callback(resume, server)
    return [value for chunk in chunks for value in chunk]
