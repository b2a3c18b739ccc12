"""Out-of-range index buffers are refused before any kernel reads them, once per buffer set."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import formats
from ustc.tensor import safety


def _bad_csr():
    """A SciPy CSR holding column 7 in a 3-column matrix (SciPy's construction does not look)."""
    return sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([0, 7, 1]), np.array([0, 2, 3])), shape=(2, 3))


ENTRY_POINTS = {
    "matmul": lambda A: ustc.matmul(A, np.ones(3)),
    "Matmul": lambda A: ustc.Matmul(A, np.ones((3, 2))),
    "spgemm": lambda A: ustc.matmul(A, A.T),
    "convert": lambda A: ustc.Tensor.from_package(A).convert("CSC"),
    "einsum": lambda A: ustc.einsum("ij,j->i", ustc.Tensor.from_package(A), np.ones(3)),
    "operator": lambda A: ustc.Tensor.from_package(A) + ustc.Tensor.from_package(A),
    "sum": lambda A: ustc.Tensor.from_package(A).sum(axis=1),
    "solve": lambda A: ustc.solve(sp.csr_array((A.data[:2], np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 2)),
                                  np.ones(2)),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_out_of_range_coordinates_raise_before_reading(entry):
    with pytest.raises(ustc.StorageError, match=r"level 1 \(j : compressed.*\): crd\[1\] = 7 is outside \[0, [23]\)"):
        ENTRY_POINTS[entry](_bad_csr())


def test_decreasing_positions_raise():
    a = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([0, 2, 1]), np.array([0, 2, 3])), shape=(2, 3))
    a.indptr[1], a.indptr[2] = 3, 2
    with pytest.raises(ustc.StorageError, match=r"pos\[2\] = 2 is smaller than pos\[1\]"):
        ustc.matmul(a, np.ones(3))


@pytest.mark.parametrize("nf", [nf for nf in formats.NAMED if nf.format().ndim == 2], ids=lambda nf: nf.name)
def test_every_registry_format_passes_its_own_buffers(nf):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 6)) * (rng.random((7, 6)) < 0.4)
    structured = any(lv.type.keyword == "structured" for lv in nf.format().levels)
    t = ustc.Tensor.from_dense(a, nf.format(), prune=structured)
    safety._check(t)                  # the safe check never refuses what validate accepts
    t.validate()


def test_a_bad_coordinate_in_any_sparse_registry_format_is_named():
    """Corrupt the largest coordinate of each format's last crd buffer: refused, level named."""
    a = np.arange(1.0, 43.0).reshape(7, 6)
    refused = 0
    for nf in formats.NAMED:
        fmt = nf.format()
        if fmt.ndim != 2 or not any(name == "crd" for _, name in fmt.buffers):
            continue
        structured = any(lv.type.keyword == "structured" for lv in fmt.levels)
        t = ustc.Tensor.from_dense(a, fmt, prune=structured)
        k = max(level for level, name in t.buffers if name == "crd")
        crd = t._buffers[(k, "crd")]
        if not len(crd) or not np.issubdtype(crd.dtype, np.signedinteger):
            continue
        crd[0] = np.iinfo(crd.dtype).max // 2
        with pytest.raises(ustc.StorageError, match=f"level {k}"):
            safety._check(t)
        refused += 1
    assert refused >= 8


def test_checked_once_per_buffer_set(monkeypatch):
    good = sp.random_array((50, 40), density=0.2, rng=1, format="csr")
    calls = []
    real = safety._check
    monkeypatch.setattr(safety, "_check", lambda t: (calls.append(1), real(t)))
    mm = ustc.Matmul(good, np.ones(40))
    for _ in range(5):
        mm.execute()
        ustc.matmul(good, np.ones(40))           # a new Tensor over the same arrays
    assert len(calls) == 1
    fresh = good.copy()                          # new arrays: checked again
    ustc.matmul(fresh, np.ones(40))
    assert len(calls) == 2


def test_coo_views_checked_once(monkeypatch):
    """A SciPy COO taken again and again (``from_package(coo).convert(...)`` in a loop) is checked once:
    the view's root ``pos`` [0, nnz] is one shared read-only array, not a new one per view."""
    coo = sp.random_array((60, 45), density=0.2, rng=2, format="coo")
    calls = []
    real = safety._check
    monkeypatch.setattr(safety, "_check", lambda t: (calls.append(1), real(t)))
    for _ in range(3):
        out = ustc.Tensor.from_package(coo).convert("CSR")
        np.testing.assert_array_equal(out.to_dense(), coo.toarray())
    assert len(calls) == 1
    root = ustc.Tensor.from_package(coo).buffers[(0, "pos")]
    assert root is ustc.Tensor.from_package(coo).buffers[(0, "pos")] and not root.flags.writeable
