"""Checkpoints of a distributed Krylov solve: taken on the blocks, held by the driver.

With ``ud.solve(..., checkpoint_every=k)`` each block keeps a copy of its slice of the
iterate ``x`` every ``k`` iterations (:class:`Watch`; the last two copies). While the solve
runs, the driver pulls the new copies from every block every 0.25 s with a direct actor call
(no scheduler task) and keeps the newest *complete* one (every block at the same iteration)
as a :class:`Checkpoint`: the driver's copy survives the loss of any worker. The solvers
are :mod:`ustc.ops.krylov`'s own, whose internal state (search directions, the GMRES basis)
is not reachable from outside, so a resume restarts the method from the checkpointed ``x``:
it converges to the same solution, possibly in a different number of iterations than an
uninterrupted run (CG loses the conjugacy built so far).

What an "iteration" is: a CG or BiCGSTAB iteration, a GMRES inner step. GMRES changes ``x``
only at its restarts, so its checkpoints fall there (at least ``k`` inner steps apart).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import numpy as np

PRODUCTS_PER_ITERATION = {"cg": 1, "bicgstab": 2, "gmres": 1}


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A distributed solve's iterate after ``iterations`` iterations of ``method``: ``x`` (the
    whole vector, on the driver). ``ud.solve(A, b, method, resume=checkpoint)`` continues
    from it."""

    method: str
    iterations: int
    x: np.ndarray

    def __repr__(self):
        return f"Checkpoint(method={self.method!r}, iterations={self.iterations}, n={self.x.shape[0]})"


class Watch:
    """Block side: counts the solver's iterations from its products (those not of ``x`` itself:
    the residual products at a (re)start do not count) and keeps a copy of ``x`` when ``x``
    changes at least ``every`` iterations after the last copy. ``offset``: iterations done
    before this solve (a resumed one). The solve thread writes; the actor's event loop reads
    :meth:`since`."""

    def __init__(self, x: np.ndarray, method: str, every: int, offset: int = 0):
        self.x, self.every, self.offset = x, int(every), int(offset)
        self.per = PRODUCTS_PER_ITERATION[method]
        self.products = 0
        self.last = 0
        self.versions: deque = deque(maxlen=2)

    def product(self, v) -> None:
        if v is not self.x:
            self.products += 1

    def updated(self, y) -> None:
        """Called after the backend changed ``y`` in place; a copy when ``y`` is ``x`` and due."""
        if y is not self.x:
            return
        it = self.products // self.per
        if it - self.last >= self.every:
            self.last = it
            self.versions.append((self.offset + it, self.x.copy()))

    def since(self, iterations: int) -> list:
        """The kept copies taken after ``iterations``: ``[(iterations, x slice)]``."""
        return [(it, x) for it, x in list(self.versions) if it > iterations]


class Collector:
    """Driver side: :meth:`poll` pulls new copies from every rank of ``group`` and keeps the
    newest complete :class:`Checkpoint` in :attr:`latest` (``on_checkpoint(latest)`` is called
    with each new one); ``count``: how many complete checkpoints arrived."""

    def __init__(self, group, xname: str, method: str, latest: Checkpoint | None = None, on_checkpoint=None):
        self.group, self.xname, self.method = group, xname, method
        self.latest = latest
        self.on_checkpoint = on_checkpoint
        self.parts: dict = {}
        self.count = 0

    async def poll(self) -> None:
        since = self.latest.iterations if self.latest is not None else -1
        got = await asyncio.gather(*(actor.checkpoints(self.xname, since) for actor in self.group.actors))
        for rank, versions in enumerate(got):
            for it, x in versions:
                self.parts.setdefault(it, {})[rank] = x
        complete = [it for it, parts in self.parts.items() if len(parts) == self.group.size]
        if not complete:
            return
        it = max(complete)
        parts = self.parts[it]
        self.latest = Checkpoint(self.method, it, np.concatenate([parts[r] for r in range(self.group.size)]))
        self.parts = {k: v for k, v in self.parts.items() if k > it}
        self.count += 1
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.latest)
