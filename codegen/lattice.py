"""Merge lattices: which combinations of co-iterated levels produce a value.

At a loop over variable ``v`` several operands may iterate a stored level
(their *iterators*). For every subset ``H`` of them, the statement's value at a
coordinate where exactly the iterators in ``H`` hold an entry is the
expression with the others replaced by zero (``notation.substitute``). The
lattice keeps the subsets where that is not identically zero:

* ``A * B``: only ``{A, B}`` (intersection: stop when either runs out);
* ``A + B``: ``{A, B}``, ``{A}``, ``{B}`` (union);
* ``A + 1`` or ``A * x + y[i]``: also ``{}`` — the *universe* point, so the loop
  must visit every coordinate of ``v`` and treat the iterators as cursors.

Under a semiring other than plus-times the same holds with its operators: absent
entries are its ``𝟘``, which annihilates ⊗ (``A ⊗ x`` is an intersection even
when ⊗ is ``+``, as in min-plus) and is the identity of ⊕ (a union); see
``notation.substitute``.

The loop continues while some point has all its iterators unexhausted
(:meth:`Lattice.alive_sets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from ustc.errors import UnsupportedOperation

from .notation import ZERO, Expr, substitute
from .semiring import PLUS_TIMES, Semiring

MAX_ITERATORS = 6


@dataclass(frozen=True)
class Point:
    present: frozenset[int]  # slots of the iterators holding an entry here
    expr: Expr               # the statement's value there


@dataclass(frozen=True)
class Lattice:
    iterators: tuple[int, ...]
    points: tuple[Point, ...]  # largest first

    @property
    def universe(self) -> bool:
        return any(not p.present for p in self.points)

    @property
    def intersection(self) -> bool:
        """Only the full set produces values (a pure product)."""
        return len(self.points) == 1 and self.points[0].present == frozenset(self.iterators)

    def alive_sets(self) -> list[frozenset[int]]:
        """Minimal points: the loop runs while all iterators of one of them are unexhausted."""
        sets = [p.present for p in self.points]
        return [s for s in sets if not any(t < s for t in sets)]


def build(expr: Expr, iterators: tuple[int, ...], semiring: Semiring = PLUS_TIMES) -> Lattice:
    """The lattice of ``expr`` for the iterators (access slots) at one loop, absent entries being
    ``semiring``'s zero."""
    if len(iterators) > MAX_ITERATORS:
        raise UnsupportedOperation(f"{len(iterators)} operands co-iterate one index; at most "
                                   f"{MAX_ITERATORS} are supported")
    points = []
    for size in range(len(iterators), -1, -1):
        for present in combinations(iterators, size):
            absent = frozenset(iterators) - frozenset(present)
            value = substitute(expr, absent, semiring)
            if value is not ZERO:
                points.append(Point(frozenset(present), value))
    return Lattice(tuple(iterators), tuple(points))
