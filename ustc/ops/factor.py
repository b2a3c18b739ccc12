"""Incomplete factorisations on CSR rows (Numba, one thread): ILU(0), IC(0) and SSOR's splitting.

Every kernel works on the *factor pattern* of an n×n matrix: its nonzero entries (duplicates
summed, stored zeros dropped) plus the whole diagonal, in canonical CSR (rows sorted, no
duplicates), with ``diag[r]`` the position of ``(r, r)`` in ``crd`` / values. Taking the
nonzero pattern makes the factors independent of the format ``A`` came in (a block or
diagonal format's stored zeros are not pattern); taking the whole diagonal lets elimination
fill a diagonal entry that ``A`` does not store. :func:`factor_pattern` builds it from a CSR
matrix in one pass.

One CSR array holds both factors, as in Saad's ``ILU0``: the entries left of the diagonal are
the lower factor, the diagonal and the entries right of it the upper one.

* :func:`ilu0`: ``A ≈ L U``, ``L`` unit lower (its strict lower part stored), ``U`` upper,
  both on the factor pattern; ``(L U)[i, j] = A[i, j]`` for every ``(i, j)`` of the pattern.
  IKJ order (row by row, each row eliminated by the earlier rows its lower part names).
* :func:`ic0`: ``A ≈ L L^H`` for Hermitian ``A``, ``L`` lower on the lower half of the
  pattern; ``(L L^H)[i, j] = A[i, j]`` there. The upper positions receive ``conj(L[j, i])``,
  so the same array, swept forward (``L``) and backward (``L^H``) with the stored diagonal,
  applies ``(L L^H)^-1``. Needs the pattern to be symmetric (a Hermitian matrix's is).

Both return the first row whose pivot failed (a zero pivot for ILU(0); a pivot whose real
part is not positive, or which is not real, for IC(0)) so the caller raises a
:class:`ustc.SolveError` naming it; -1 when all went through. :func:`ssor_values` scales the
off-diagonal entries by ``omega`` for the SSOR sweeps. The sweeps themselves are
:func:`ustc.ops.trisolve.sweep_serial` / the level-scheduled ones of :mod:`ustc.ops.trisolve`.
"""

from __future__ import annotations

import numpy as np

from ..cache._lean import njit_cached


@njit_cached(nogil=True)
def factor_pattern(pos, crd, vals):
    """``(pos, crd, vals, diag)`` of the factor pattern of square canonical CSR ``pos`` / ``crd`` /
    ``vals`` (sorted rows without duplicates): the nonzero entries plus every diagonal entry
    (0 where none is stored), rows still sorted. Index arrays int64; values keep ``vals``'s dtype."""
    n = pos.size - 1
    count = np.zeros(n + 1, dtype=np.int64)
    for r in range(n):
        k = 1                                   # the diagonal, always
        for p in range(pos[r], pos[r + 1]):
            if crd[p] != r and vals[p] != 0:
                k += 1
        count[r + 1] = count[r] + k
    out_crd = np.empty(count[n], dtype=np.int64)
    out_vals = np.zeros(count[n], dtype=vals.dtype)
    diag = np.empty(n, dtype=np.int64)
    for r in range(n):
        q = count[r]
        placed = False
        for p in range(pos[r], pos[r + 1]):
            c = crd[p]
            if c == r:
                diag[r] = q
                out_crd[q] = r
                out_vals[q] = vals[p]
                q += 1
                placed = True
            elif vals[p] != 0:
                if c > r and not placed:
                    diag[r] = q
                    out_crd[q] = r
                    q += 1
                    placed = True
                out_crd[q] = c
                out_vals[q] = vals[p]
                q += 1
        if not placed:
            diag[r] = q
            out_crd[q] = r
            q += 1
    return count, out_crd, out_vals, diag


@njit_cached(nogil=True)
def ilu0(pos, crd, lu, diag):
    """ILU(0) in place on the factor pattern ``pos`` / ``crd`` / ``lu`` (values of ``A`` on entry;
    the strict lower part of ``L`` and ``U`` on exit). Returns -1, or the first row whose pivot
    ``U[r, r]`` came out zero (the factorisation stops there)."""
    n = pos.size - 1
    where = np.full(n, -1, dtype=np.int64)      # column -> position in the current row
    for i in range(n):
        for p in range(pos[i], pos[i + 1]):
            where[crd[p]] = p
        for p in range(pos[i], diag[i]):        # columns k < i, ascending
            k = crd[p]
            m = lu[p] / lu[diag[k]]
            lu[p] = m
            for q in range(diag[k] + 1, pos[k + 1]):
                w = where[crd[q]]
                if w >= 0:
                    lu[w] -= m * lu[q]
        for p in range(pos[i], pos[i + 1]):
            where[crd[p]] = -1
        if lu[diag[i]] == 0:
            return i
    return -1


@njit_cached(nogil=True)
def ic0(pos, crd, v, diag):
    """IC(0) in place on the symmetric factor pattern ``pos`` / ``crd`` / ``v`` (values of
    Hermitian ``A`` on entry; ``L`` on and left of the diagonal and ``conj(L^T)`` right of it on
    exit). Returns ``(-1, 0.0)``, or the first row whose pivot ``A[r, r] - sum |L[r, :r]|^2`` is
    not a positive real number, with the pivot's real part (the factorisation stops there)."""
    n = pos.size - 1
    where = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        for p in range(pos[i], diag[i]):
            where[crd[p]] = p
        d = v[diag[i]]
        for p in range(pos[i], diag[i]):        # L[i, c] for c < i, ascending
            c = crd[p]
            s = v[p]
            for q in range(pos[c], diag[c]):    # sum over j < c of L[i, j] conj(L[c, j])
                w = where[crd[q]]
                if w >= 0:
                    s -= v[w] * np.conj(v[q])
            lic = s / v[diag[c]]
            v[p] = lic
            d -= lic * np.conj(lic)
        for p in range(pos[i], diag[i]):
            where[crd[p]] = -1
        if not (d.real > 0):                    # NaN fails too
            return i, float(d.real)
        v[diag[i]] = np.sqrt(d.real)
    for i in range(n):                          # U = L^H into the upper positions
        for p in range(diag[i] + 1, pos[i + 1]):
            j = crd[p]                          # (i, j) upper: holds conj(L[j, i])
            lo, hi = pos[j], diag[j]
            while lo < hi:                      # binary search for column i in row j's lower part
                mid = (lo + hi) // 2
                if crd[mid] < i:
                    lo = mid + 1
                else:
                    hi = mid
            v[p] = np.conj(v[lo]) if lo < diag[j] and crd[lo] == i else 0
    return -1, 0.0


@njit_cached(nogil=True)
def symmetric_pattern(pos, crd, diag):
    """Whether every off-diagonal ``(i, j)`` of the factor pattern has its mirror ``(j, i)``."""
    n = pos.size - 1
    for i in range(n):
        for p in range(pos[i], pos[i + 1]):
            j = crd[p]
            if j == i:
                continue
            lo, hi = pos[j], pos[j + 1]
            while lo < hi:
                mid = (lo + hi) // 2
                if crd[mid] < i:
                    lo = mid + 1
                else:
                    hi = mid
            if lo >= pos[j + 1] or crd[lo] != i:
                return False
    return True


@njit_cached(nogil=True)
def ssor_values(pos, crd, vals, diag, omega):
    """The SSOR splitting's values: ``omega * A[i, j]`` off the diagonal, ``A[i, i]`` on it (a new
    array)."""
    out = vals * omega
    for i in range(pos.size - 1):
        out[diag[i]] = vals[diag[i]]
    return out
