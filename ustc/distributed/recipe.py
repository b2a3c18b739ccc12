"""Block recipes (how each block of a distributed matrix or vector was made) and the repair of a
group of block actors after a worker loss.

A :class:`DTensor` built by :meth:`~DTensor.from_tensor` keeps a :class:`Scattered` recipe:
the driver holds the matrix (as SciPy CSR) and cuts a block's rows again. One built by
:meth:`~DTensor.from_loader` or :meth:`~DTensor.from_file` keeps a :class:`Loaded` recipe:
the loader runs again on the block's new worker. A :class:`DVector` made by
:meth:`~DVector.from_array` keeps a reference to the driver's array (not a copy: change it
and the rebuilt slice changes). Results of products and solves have no recipe.

When a worker is lost the group of block actors is marked broken; the next use of the
group (:func:`repair`, called by ``Runtime.group``) places new actors for the lost ranks on
the workers alive, reconnects every rank (survivors keep their blocks), and rebuilds the
lost blocks of every live matrix and vector of the group from their recipes. Objects
without a recipe are marked lost: using them raises :class:`ustc.DistributedError`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class Scattered:
    """Blocks cut from a matrix the driver holds (``csr``: SciPy CSR, duplicates summed)."""

    csr: object
    fmt: object
    ghost_fmt: object

    def call(self, name: str, rows, cols, b: int) -> tuple:
        """``(method, args)`` of the block actor call that makes block ``b`` of the partitions
        ``rows`` / ``cols`` (``csr`` is in their position order: permuted by the driver)."""
        lo, hi = rows.range(b)
        blk = self.csr[lo:hi].tocoo()
        return "set_block", (name, (lo, hi), cols.range(b), (blk.row, blk.col, blk.data), self.fmt, self.ghost_fmt)


@dataclass(frozen=True, eq=False)
class Loaded:
    """Blocks a loader makes on their own workers: ``loader(row_start, row_stop)``, or
    ``loader(rows)`` (the block's global rows, ascending) for a :class:`~.partition.Labels`
    partition; the worker maps the global columns to positions when the columns are labelled."""

    loader: object
    ncols: int
    fmt: object
    ghost_fmt: object

    def call(self, name: str, rows, cols, b: int) -> tuple:
        index = rows.members(b) if rows.perm is not None else None
        return "load_block", (name, rows.range(b), cols.range(b), self.ncols, self.loader, self.fmt,
                              self.ghost_fmt, index, cols.inverse)


def repair(group) -> None:
    """New actors for ``group.lost`` on the workers alive, every rank reconnected, the lost blocks
    of the group's live members rebuilt (or the members marked lost); ``group.generation`` + 1."""
    rt, lost = group.runtime, sorted(group.lost)
    survivors = [r for r in range(group.size) if r not in lost]
    if survivors:               # again, in case the first abort did not arrive: their calls end now
        group.call("abort", {r: ("the group is being repaired",) for r in survivors}, ranks=survivors)
    rt.client.cancel([group.futures[r] for r in lost])
    workers = rt.workers
    for r in lost:
        where = workers[r % len(workers)]
        fut = rt.place(group.size, r, where)
        group.actors[r], group.futures[r], group.workers[r] = fut.result(), fut, where
    group.connect()
    group.lost = ()
    group.generation += 1
    for member in list(group.members.values()):
        member._rebuild(lost)
