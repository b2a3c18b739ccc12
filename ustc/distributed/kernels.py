"""The compiled halo SpMV of a row block whose local and ghost parts are CSR (one thread, as a
block worker has): ``y = A_local x`` then ``y[rows with ghosts] += A_ghost g``, each pass
returning its share of ``x · y`` so that a CG step's ``p · A p`` costs no pass of its own.
No buffer is copied: ``x`` is the operand itself, ``y`` the caller's output."""

from __future__ import annotations

import numpy as np

from ..cache._lean import njit_cached

U = np.uintp  # unsigned subscripts: no negative-index wraparound test on each access


@njit_cached(nogil=True)
def local_product(pos, crd, vals, x, out, with_dot, zero):
    """``out = A x`` over CSR rows ``(pos, crd, vals)``; returns ``conj(x) · out`` when
    ``with_dot`` (a square block: ``x`` and ``out`` index the same rows), else ``zero``. Two
    interleaved sums a row (one chain would wait on the add latency)."""
    d = zero
    for i in range(out.size):
        e, end = pos[U(i)], pos[U(i + 1)]
        a = zero
        b = zero
        while e + 1 < end:
            a += vals[U(e)] * x[U(crd[U(e)])]
            b += vals[U(e + 1)] * x[U(crd[U(e + 1)])]
            e += 2
        if e < end:
            a += vals[U(e)] * x[U(crd[U(e)])]
        s = a + b
        out[U(i)] = s
        if with_dot:
            d += np.conj(x[U(i)]) * s
    return d


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
