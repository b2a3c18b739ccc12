"""Checkpoints of a distributed Krylov solve: taken on the blocks, held by the driver.

With ``ud.solve(..., checkpoint_every=k)`` each block keeps a copy of its part of the
solver's state every ``k`` iterations (:class:`Watch`; the last two copies). While the solve
runs, the driver pulls the new copies from every block every 0.25 s with a direct actor call
(no scheduler task) and keeps the newest *complete* one (every block at the same iteration)
as a :class:`Checkpoint`: the driver's copy survives the loss of any worker.

What is kept makes a resume exact (the iterations after it are those of the uninterrupted
solve, bit for bit): for CG and BiCGSTAB the whole state of their loops
(``ustc.ops.krylov.KEPT_STATE``: ``x``, residual, directions, the recurrences' scalars),
taken at the end of an iteration; for GMRES only ``x``, taken at a restart, where GMRES
keeps nothing else.

What an "iteration" is: a CG or BiCGSTAB iteration, a GMRES inner step. GMRES changes ``x``
only at its restarts, so its checkpoints fall there (at least ``k`` inner steps apart).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import numpy as np

PRODUCTS_PER_ITERATION = {"cg": 1, "bicgstab": 2, "gmres": 1}


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A distributed solve's iterate after ``iterations`` iterations of ``method``: ``x`` (the
    whole vector, on the driver) and ``state``, the rest of the solver's state (whole vectors
    and scalars by name; empty for GMRES, or for a checkpoint made by hand, which restarts the
    method from ``x``). ``ud.solve(A, b, method, resume=checkpoint)`` continues from it."""

    method: str
    iterations: int
    x: np.ndarray
    state: dict = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        """Whether a resume continues the uninterrupted iterations (the state is complete)."""
        return self.method == "gmres" or bool(self.state)

    def __repr__(self):
        return (f"Checkpoint(method={self.method!r}, iterations={self.iterations}, n={self.x.shape[0]}, "
                f"state={sorted(self.state)})")


class Watch:
    """Block side: keeps copies of the solver's state, each at least ``every`` iterations after
    the last. CG and BiCGSTAB call :meth:`keep` at the end of each iteration; for GMRES the
    backend reports products and changes of ``x`` (:meth:`product`, :meth:`updated`): the
    iterations are counted from the products not of ``x`` itself (the residual products at a
    restart do not count) and ``x`` is copied when it changes. ``offset``: iterations done before
    this solve (a resumed one). The solve thread writes; the actor's event loop reads
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
        self.keep(self.products // self.per, lambda: {"x": self.x})

    def keep(self, it: int, state) -> None:
        """After iteration ``it`` of this solve: a copy of ``state()`` (``{name: vector or
        scalar}``) when due."""
        if it - self.last >= self.every:
            self.last = it
            copy = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in state().items()}
            self.versions.append((self.offset + it, copy))

    def since(self, iterations: int) -> list:
        """The kept copies taken after ``iterations``: ``[(iterations, {name: slice or scalar})]``."""
        return [(it, s) for it, s in list(self.versions) if it > iterations]


class Collector:
    """Driver side: :meth:`poll` pulls new copies from every rank of ``group`` and keeps the
    newest complete :class:`Checkpoint` in :attr:`latest` (``on_checkpoint(latest)`` is called
    with each new one); ``count``: how many complete checkpoints arrived."""

    def __init__(self, group, xname: str, method: str, latest: Checkpoint | None = None, on_checkpoint=None,
                 layout=None):
        self.group, self.xname, self.method = group, xname, method
        self.layout = layout          # the vectors' partition: slices back to global order (labels)
        self.latest = latest
        self.on_checkpoint = on_checkpoint
        self.parts: dict = {}
        self.count = 0

    async def poll(self) -> None:
        since = self.latest.iterations if self.latest is not None else -1
        got = await asyncio.gather(*(actor.checkpoints(self.xname, since) for actor in self.group.actors))
        self.take(got)

    def _whole(self, slices) -> np.ndarray:
        whole = np.concatenate(slices)
        return self.layout.to_global(whole) if self.layout is not None else whole

    def take(self, got) -> None:
        """Keep what the ranks sent (``got[rank]``: ``[(iterations, state)]``, as
        :meth:`Watch.since`); the newest complete one becomes :attr:`latest`."""
        since = self.latest.iterations if self.latest is not None else -1
        for rank, versions in enumerate(got):
            for it, x in versions:
                if it > since:
                    self.parts.setdefault(it, {})[rank] = x
        complete = [it for it, parts in self.parts.items() if len(parts) == self.group.size]
        if not complete:
            return
        it = max(complete)
        parts = [self.parts[it][r] for r in range(self.group.size)]
        whole = {k: (self._whole([p[k] for p in parts]) if isinstance(v, np.ndarray) else v)
                 for k, v in parts[0].items()}          # scalars were all-reduced: alike on every rank
        x = whole.pop("x")
        self.latest = Checkpoint(self.method, it, x, whole)
        self.parts = {k: v for k, v in self.parts.items() if k > it}
        self.count += 1
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.latest)
