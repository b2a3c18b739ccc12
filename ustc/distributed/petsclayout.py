"""What PETSc's MatMPIAIJ holds on each MPI rank, computed without PETSc (pure NumPy / SciPy).

An MPIAIJ matrix gives rank ``r`` a contiguous range of rows ``[rstart, rend)`` and of columns
``[cstart, cend)`` (its *ownership ranges*, increasing with the rank, in PETSc's global
numbering) and stores the rank's rows as two sequential AIJ (CSR) matrices: ``A``, the
*diagonal block*, the columns the rank owns in local numbering (``j - cstart``), and ``B``, the
*off-diagonal block*, whose columns are compressed to ``0 .. len(garray) - 1``, ``garray``
holding their global numbers, sorted (PETSc's ``MatSetUpMultiply_MPIAIJ`` layout). Column
indices are sorted within each row, duplicates summed, stored zeros kept.

PETSc's numbering is the distributed tensor's *positions*: for user labels
(:class:`~ustc.distributed.partition.Labels`) position ``p`` is the user's row ``perm[p]``, so a
part also carries the user's numbering of its rows (``user_rows``), of its diagonal-block
columns (``user_cols``) and of ``garray`` (``user_garray``): entry ``(i, j)`` of ``A`` is the
user's ``a[user_rows[i], user_cols[j]]``, entry ``(i, k)`` of ``B`` is
``a[user_rows[i], user_garray[k]]``. Without labels they are ranges.

:func:`mpiaij_part` computes one rank's :class:`MPIAIJPart` from its rows (the one builder: a
row block's worker calls it on its own rows, a grid's driver on the rows it fetched);
:func:`mpiaij_parts` every rank's from a whole SciPy matrix in the user's numbering (the oracle
the tests hold the distributed tensors' parts against).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ShapeError, UstcError


def _csr_ok(csr, nrows: int, ncols: int, what: str) -> None:
    indptr, indices, data = csr
    if len(indptr) != nrows + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(indices):
        raise UstcError(f"MPIAIJPart: {what} row pointers do not describe {nrows} rows of {len(indices)} entries")
    if len(data) != len(indices) or (len(indices) and (indices.min() < 0 or indices.max() >= ncols)):
        raise UstcError(f"MPIAIJPart: {what} columns outside 0..{ncols - 1} or values not one per column")


@dataclass(frozen=True, eq=False)
class MPIAIJPart:
    """One MPI rank's share of an MPIAIJ matrix (see the module text). ``rows`` / ``cols``: its
    ownership ranges ``(start, stop)`` in PETSc's numbering; ``shape``: the global ``(M, N)``;
    ``diag`` ``(indptr, indices, data)`` with local columns; ``offdiag`` the same with columns
    compressed to ``garray``; ``user_*``: the user's numbering (int64 arrays)."""

    rows: tuple
    cols: tuple
    shape: tuple
    diag: tuple
    offdiag: tuple
    garray: np.ndarray
    user_rows: np.ndarray
    user_cols: np.ndarray
    user_garray: np.ndarray

    def __post_init__(self):
        (r0, r1), (c0, c1), (m, n) = self.rows, self.cols, self.shape
        if not (0 <= r0 <= r1 <= m and 0 <= c0 <= c1 <= n):
            raise ShapeError(f"MPIAIJPart: ownership {self.rows} x {self.cols} outside the shape {self.shape}")
        _csr_ok(self.diag, r1 - r0, c1 - c0, "the diagonal block's")
        g = self.garray
        if np.any(np.diff(g) <= 0) or np.any((g >= c0) & (g < c1)) or (len(g) and (g[0] < 0 or g[-1] >= n)):
            raise UstcError("MPIAIJPart: garray must be sorted, unique, inside the matrix and outside the "
                            "owned columns")
        _csr_ok(self.offdiag, r1 - r0, len(g), "the off-diagonal block's")
        if (len(self.user_rows), len(self.user_cols), len(self.user_garray)) != (r1 - r0, c1 - c0, len(g)):
            raise ShapeError("MPIAIJPart: the user's numbering must name every owned row, owned column and ghost")

    @property
    def sizes(self) -> tuple:
        """``((m_local, M), (n_local, N))``: petsc4py's ``size`` argument."""
        return ((self.rows[1] - self.rows[0], self.shape[0]), (self.cols[1] - self.cols[0], self.shape[1]))

    @property
    def csr(self) -> tuple:
        """``((i, j, v), (oi, oj, ov))``: the split arrays of ``Mat.createAIJWithArrays`` (PETSc's
        ``MatCreateMPIAIJWithSplitArrays``), the off-diagonal columns global (through ``garray``)."""
        oi, oj, ov = self.offdiag
        return self.diag, (oi, self.garray[oj], ov)

    @property
    def nnz(self) -> tuple:
        """``(d_nnz, o_nnz)``: entries per row of each block (MatMPIAIJSetPreallocation's counts)."""
        return np.diff(self.diag[0]), np.diff(self.offdiag[0])

    def renumbered(self, row_perm=None, col_perm=None) -> "MPIAIJPart":
        """The same part with the user's numbering of labelled rows / columns: ``row_perm`` /
        ``col_perm`` map every position of the matrix to the user's row / column (None: the
        identity)."""
        (r0, r1), (c0, c1) = self.rows, self.cols
        rp = np.arange(r0, r1, dtype=np.int64) if row_perm is None else np.asarray(row_perm, np.int64)[r0:r1]
        if col_perm is None:
            return replace(self, user_rows=rp, user_cols=np.arange(c0, c1, dtype=np.int64), user_garray=self.garray)
        cp = np.asarray(col_perm, np.int64)
        return replace(self, user_rows=rp, user_cols=cp[c0:c1], user_garray=cp[self.garray])


def rows_csr(r, c, v, nrows: int, ncols: int, dtype):
    """The SciPy CSR matrix (``nrows x ncols``, values of ``dtype``) of the entries ``(r, c, v)``
    (duplicates kept for :func:`mpiaij_part` to sum)."""
    import scipy.sparse as sp

    return sp.csr_array((np.asarray(v, dtype), (np.asarray(r, np.int64), np.asarray(c, np.int64))),
                        shape=(int(nrows), int(ncols)))


def mpiaij_part(rows, row_range, col_range, shape, user_rows=None, user_cols=None, col_perm=None) -> MPIAIJPart:
    """The :class:`MPIAIJPart` of the rank owning rows ``row_range`` and columns ``col_range``
    (PETSc numbering) of a matrix of ``shape``; ``rows``: its rows as a SciPy sparse matrix
    (``m_local x N``, PETSc's column numbering). ``user_rows`` / ``user_cols``: the user's
    numbering of the owned rows / columns (default: the ranges); ``col_perm``: position -> the
    user's column, for ``user_garray`` (default: the identity)."""
    import scipy.sparse as sp

    (r0, r1), (c0, c1) = (int(v) for v in row_range), (int(v) for v in col_range)
    shape = (int(shape[0]), int(shape[1]))
    if rows.shape != (r1 - r0, shape[1]):
        raise ShapeError(f"mpiaij_part: {rows.shape[0]} x {rows.shape[1]} rows for the range {row_range} of {shape}")
    coo = sp.coo_array(rows)
    r, c, v = np.asarray(coo.row, np.int64), np.asarray(coo.col, np.int64), coo.data
    mine = (c >= c0) & (c < c1)
    diag = sp.csr_array((v[mine], (r[mine], c[mine] - c0)), shape=(r1 - r0, c1 - c0))
    garray = np.unique(c[~mine])
    off = sp.csr_array((v[~mine], (r[~mine], np.searchsorted(garray, c[~mine]))), shape=(r1 - r0, len(garray)))
    arrays = []
    for m in (diag, off):
        m.sum_duplicates()                         # sorts the columns of each row too
        arrays.append((m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data))
    user_rows = np.arange(r0, r1, dtype=np.int64) if user_rows is None else np.asarray(user_rows, np.int64)
    user_cols = np.arange(c0, c1, dtype=np.int64) if user_cols is None else np.asarray(user_cols, np.int64)
    user_garray = garray if col_perm is None else np.asarray(col_perm, np.int64)[garray]
    return MPIAIJPart((r0, r1), (c0, c1), shape, arrays[0], arrays[1], garray, user_rows, user_cols, user_garray)


def mpiaij_parts(a, row_bounds, col_bounds, row_perm=None, col_perm=None) -> list:
    """Every rank's :class:`MPIAIJPart` of the SciPy matrix ``a`` (the user's numbering): rank
    ``r`` owns positions ``row_bounds[r]:row_bounds[r + 1]`` and columns
    ``col_bounds[r]:col_bounds[r + 1]``; position ``p`` is the user's row ``row_perm[p]`` (column
    ``col_perm[p]``; None: the identity)."""
    import scipy.sparse as sp

    a = sp.csr_array(a)
    row_bounds, col_bounds = np.asarray(row_bounds, np.int64), np.asarray(col_bounds, np.int64)
    if len(row_bounds) != len(col_bounds) or row_bounds[-1] != a.shape[0] or col_bounds[-1] != a.shape[1]:
        raise ShapeError(f"mpiaij_parts: bounds {list(row_bounds)} x {list(col_bounds)} do not split {a.shape}")
    rp = np.arange(a.shape[0]) if row_perm is None else np.asarray(row_perm, np.int64)
    cp = np.arange(a.shape[1]) if col_perm is None else np.asarray(col_perm, np.int64)
    b = a[rp][:, cp].tocsr()
    out = []
    for r in range(len(row_bounds) - 1):
        (r0, r1), (c0, c1) = row_bounds[r:r + 2], col_bounds[r:r + 2]
        out.append(mpiaij_part(b[r0:r1], (r0, r1), (c0, c1), a.shape, rp[r0:r1], cp[c0:c1], cp))
    return out
