"""n:m structured SpMV without gathers: the batch-1 product of a 2:4 ``nn.Linear``.

``Structured(n, m)`` row ``i`` stores ``n`` slots per group of ``m`` columns; slot ``q`` reads
``x[(q // n) * m + crd[p]]`` (``p = i * slots + q``). ``kernels._structured.nm_spmv`` loads that
element with a gather per slot. Here each call first spreads ``x`` into ``m`` rows of one slot each,
``xs[c, q] = x[(q // n) * m + c]`` (``m * slots`` elements: 16 KiB for 2048 float32 columns at 2:4,
read from L1 by every row), and a row's sum takes ``xs[crd[p], q]`` as a select among ``m``
contiguous loads at ``q``: LLVM vectorises the slot loop with no gather. Columns past the matrix
(the padding of a partial last group) spread as zeros, so no slot needs a bounds test.

2048 x 2048 at 2:4, float32, one thread, CPU time, minimum of 9 alternating rounds at load 9:
0.587 ms against 0.930 for ``nm_spmv`` and 0.897 for dense ``torch.mv`` (the spread: 0.012 ms); an
arithmetic blend (``Σ_c xs[c, q] * (crd == c)``) took 0.606.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

U = np.uintp
MAX_M = 4  # groups of up to this many columns: a select among m loads beats a gather up to here
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@functools.lru_cache(maxsize=None)
def nm_select_spmv(n: int, m: int, parallel: bool = True):
    """The kernel ``(crd, vals, x, xs, y, alpha, n_rows, slots, accumulate)``: ``y (+)= alpha * A @ x``
    for the ``Structured(n, m)`` ``A`` (in-group coordinates ``crd``, ``slots`` slots a row); ``xs``
    is ``(m, slots)`` scratch of ``y``'s dtype that the kernel fills first. Rows in parallel unless
    not ``parallel``. Without ``accumulate`` every ``y[i]`` is stored."""
    un, um = U(n), U(m)

    @njit_cached(nogil=True, parallel=parallel, fastmath=True)
    def kernel(crd, vals, x, xs, y, alpha, n_rows, slots, accumulate):
        serial = not parallel  # noqa: F841  (in the closure: Numba's cache key hashes closure cells, not flags)
        width = U(len(x))
        zero = y.dtype.type(0)
        for c in range(um):
            for q in range(U(slots)):
                column = U(q) // un * um + U(c)
                xs[c, q] = x[column] if column < width else zero
        for i in prange(n_rows):
            base = U(i) * U(slots)
            acc = zero
            for q in range(U(slots)):
                k = U(crd[base + q])
                v = xs[0, q]
                for c in range(U(1), um):  # a select per c: contiguous loads, no gather
                    w = xs[c, q]
                    v = w if k == c else v
                acc += vals[base + q] * v
            if accumulate:
                y[U(i)] += alpha * acc
            else:
                y[U(i)] = alpha * acc

    return kernel


def accepts(n: int, m: int, a, b) -> bool:
    """Whether :func:`nm_select_spmv` takes ``Structured(n, m)`` ``a`` times ``b``: a C-contiguous
    1-D NumPy ``b`` of the values' dtype (float32 / float64), ``m`` at most :data:`MAX_M`, a value
    per slot of every row."""
    vals = a._values
    return 0 < m <= MAX_M and isinstance(b, np.ndarray) and b.ndim == 1 and b.flags.c_contiguous \
        and vals.ndim == 1 and vals.dtype in DTYPES and b.dtype == vals.dtype \
        and len(vals) == a.shape[0] * -(-a.shape[1] // m) * n


class NmSelect:
    """One planned product's kernel and its ``xs`` scratch (kept between executes; the Matmul's lock
    serialises them)."""

    def __init__(self, n: int, m: int):
        self.n, self.m, self._xs = n, m, None

    def arguments(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> tuple:
        slots = -(-a.shape[1] // self.m) * self.n
        xs = self._xs
        if xs is None or xs.shape != (self.m, slots) or xs.dtype != out.dtype:
            xs = self._xs = np.empty((self.m, slots), dtype=out.dtype)
        return nm_select_spmv(self.n, self.m, parallel), \
            (a._buffers[(2, "crd")], a._values, b, xs, out, out.dtype.type(alpha), a.shape[0], slots, accumulate)

    def run(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> None:
        kernel, args = self.arguments(a, b, out, alpha, accumulate, parallel)
        kernel(*args)

    def compile(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> None:
        import numba

        kernel, args = self.arguments(a, b, out, alpha, accumulate, parallel)
        kernel.compile(tuple(numba.typeof(x) for x in args))
