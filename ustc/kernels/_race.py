"""A choice between interchangeable kernels made by their measured time on this machine.

A kernel tuned on one processor can lose on another: the diagonal-mask SpMV's gather kernel
(``_diagonal_spmv.diagonal_spmv_lanes``) was 1.34x the fastest peer on an Intel Xeon and 2x slower
than the scalar row kernel on an AMD EPYC (vector gathers are microcoded there). Where both
kernels compute the same product, :class:`KernelRace` runs them alternately for the first
``2 x rounds`` calls, timing each call, then keeps the one with the shorter best time. The
candidates' results may differ by rounding (their sums are ordered differently), so the results
of those first calls may differ from the later ones in the last bits.
"""

from __future__ import annotations

import time


class KernelRace:
    """The choice among ``count`` kernels: :meth:`pick` says which to run, :meth:`timed` runs it
    and records its time; after ``rounds`` timed calls each, :attr:`winner` is fixed (the first
    kernel on a tie). ``clock``: seconds, monotonic (injectable for tests)."""

    __slots__ = ("best", "calls", "clock", "count", "rounds", "winner")

    def __init__(self, count: int = 2, rounds: int = 3, clock=time.perf_counter):
        if count < 1 or rounds < 1:
            raise ValueError(f"a race needs at least one kernel and one round (count {count}, rounds {rounds})")
        self.count, self.rounds, self.clock = count, rounds, clock
        self.best = [float("inf")] * count
        self.calls, self.winner = 0, None if count > 1 else 0

    def pick(self) -> int:
        """The kernel the next call runs."""
        return self.winner if self.winner is not None else self.calls % self.count

    def timed(self, run, *args) -> None:
        """Runs ``run(choice, *args)`` with ``choice = pick()``, timed while the race is open."""
        choice = self.pick()
        if self.winner is not None:
            run(choice, *args)
            return
        start = self.clock()
        run(choice, *args)
        self.best[choice] = min(self.best[choice], self.clock() - start)
        self.calls += 1
        if self.calls >= self.count * self.rounds:
            self.winner = min(range(self.count), key=self.best.__getitem__)
