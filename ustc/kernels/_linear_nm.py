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
from . import _linear_csr_bitmap as bitmap

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
    vals = a.raw_values
    return 0 < m <= MAX_M and isinstance(b, np.ndarray) and b.ndim == 1 and b.flags.c_contiguous \
        and vals.ndim == 1 and vals.dtype in DTYPES and b.dtype == vals.dtype \
        and len(vals) == a.shape[0] * -(-a.shape[1] // m) * n


def nm_masks(n: int, m: int, shape, crd: np.ndarray):
    """``(pos, counts, bits)`` for :func:`kernels._linear_csr_bitmap.bitmap_spmv` over a ``Structured(n, m)``
    operand's slots (values in slot order), or None where the masks cannot stand for the slots: ``m`` not
    dividing 16, a partial last group, or a group's coordinates not strictly increasing below ``m``."""
    rows, columns = shape
    if 16 % m or columns % m or rows == 0 or columns == 0:
        return None
    slots = columns // m * n
    inner = crd.reshape(rows, columns // m, n).astype(np.int64)
    if inner.size and (inner.max() >= m or (n > 1 and (np.diff(inner, axis=2) <= 0).any())):
        return None
    column = (np.arange(columns // m, dtype=np.int64) * m)[None, :, None] + inner
    bit = np.left_shift(np.uint16(1), (column % 16).astype(np.uint16)).reshape(rows, slots)
    word = (column // 16).reshape(rows, slots)
    bits = np.zeros((rows, -(-columns // 16)), np.uint16)
    np.bitwise_or.at(bits, (np.repeat(np.arange(rows), slots), word.ravel()), bit.ravel())
    pos = np.arange(rows + 1, dtype=np.int64) * slots
    return pos, np.full(rows, slots, np.int64), bits


class NmSelect:
    """One planned product's kernel and its ``xs`` scratch (kept between executes; the Matmul's lock
    serialises them). float32 values whose groups tile 16 columns take the mask kernel of
    ``kernels._linear_csr_bitmap`` instead (masks made from the coordinates on first use, remade when
    the coordinate buffer changes): 2048 x 2048 at 2:4, one thread, CPU time, 46 copies cycled (weights
    from memory), load 10-11: 0.67x dense ``torch.mv``'s time against 1.08x for the select."""

    def __init__(self, n: int, m: int):
        self.n, self.m, self._xs = n, m, None
        self._masks_key, self._masks, self._x = None, None, bitmap.Padded()

    def _masked(self, a, b, out, alpha, accumulate: bool):
        """``(kernel, args)`` of the mask kernel where it takes these operands, else None."""
        if not bitmap.USE_MASKS or out.dtype != np.float32 or a.raw_values.dtype != np.float32:
            return None
        crd = a.raw_buffers[(2, "crd")]
        key = (crd, crd.__array_interface__["data"][0], len(crd), a.shape)  # (crd kept alive: its id stays its own)
        old = self._masks_key
        if old is None or old[0] is not crd or old[1:] != key[1:]:
            self._masks_key, self._masks = key, nm_masks(self.n, self.m, a.shape, crd)
        if self._masks is None:
            return None
        pos, counts, bits = self._masks
        return bitmap.bitmap_spmv, (pos, counts, bits, a.raw_values, self._x.of(b, bits.shape[1]), out,
                                    out.dtype.type(alpha), accumulate)

    def arguments(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> tuple:
        slots = -(-a.shape[1] // self.m) * self.n
        xs = self._xs
        if xs is None or xs.shape != (self.m, slots) or xs.dtype != out.dtype:
            xs = self._xs = np.empty((self.m, slots), dtype=out.dtype)
        return nm_select_spmv(self.n, self.m, parallel), \
            (a.raw_buffers[(2, "crd")], a.raw_values, b, xs, out, out.dtype.type(alpha), a.shape[0], slots, accumulate)

    def run(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> None:
        masked = self._masked(a, b, out, alpha, accumulate)
        if masked is not None and masked[0](*masked[1]):  # (False: the values no longer fit the masks)
            return
        kernel, args = self.arguments(a, b, out, alpha, accumulate, parallel)
        kernel(*args)

    def compile(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> None:
        import numba

        masked = self._masked(a, b, out, alpha, accumulate)
        kernel, args = masked if masked is not None else self.arguments(a, b, out, alpha, accumulate, parallel)
        kernel.compile(tuple(numba.typeof(x) for x in args))
