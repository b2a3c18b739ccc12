"""The compiled halo SpMV of a row block whose local and ghost parts are CSR (one thread, as a
block worker has): ``y = A_local x`` then ``y[rows with ghosts] += A_ghost g``, each pass
returning its share of ``x · y`` so that a CG step's ``p · A p`` costs no pass of its own.
No buffer is copied: ``x`` is the operand itself, ``y`` the caller's output.

The local pass is the single-process fused loops' row product (:func:`local_product`, the
kernel of :mod:`ustc.ops._vector`: ``out = A x`` returning ``left · out``), so the project
has one CSR row loop; the ghost pass, over the rows with ghost entries only and adding into
``out``, is this module's."""

from __future__ import annotations

import numpy as np

from ..cache._lean import njit_cached
from ..ops._vector import _csr_product as local_product  # noqa: F401 - re-exported for worker

U = np.uintp  # unsigned subscripts: no negative-index wraparound test on each access


@njit_cached(nogil=True)
def ghost_product(rows, pos, crd, vals, g, out, left, with_dot, zero):
    """``out[i] += (A g)[i]`` for the rows ``rows`` (those with stored entries) of CSR rows
    ``(pos, crd, vals)``; returns ``sum conj(left[i]) * (A g)[i]`` over them when ``with_dot``."""
    d = zero
    for k in range(rows.size):
        i = rows[U(k)]
        s = zero
        for e in range(pos[U(i)], pos[U(i + 1)]):
            s += vals[U(e)] * g[U(crd[U(e)])]
        out[U(i)] += s
        if with_dot:
            d += np.conj(left[U(i)]) * s
    return d
