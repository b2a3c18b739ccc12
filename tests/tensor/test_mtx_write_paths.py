"""The Matrix Market writer's direct path for CSR / CSC tensors (ustc.tensor.io._compressed_rows,
_write_coo, ustc.tensor.io_kernels.mirror_symmetry): symmetry found on the rows, the lower
triangle written for a symmetric kind, round trips, and the paths it leaves to SciPy's COO."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp

import ustc
from ustc.tensor import io, io_kernels


def header(path) -> str:
    with open(path) as f:
        return f.readline().split()[-1]


def entries_in_file(path) -> int:
    with open(path) as f:
        for line in f:
            if not line.startswith("%"):
                return int(line.split()[2])
    raise AssertionError("no size line")


def random_csr(n, density, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    m = sp.random_array((n, n), density=density, rng=rng, format="csr", dtype=np.float64)
    if np.dtype(dtype).kind == "c":
        m = m + 1j * sp.random_array((n, n), density=density, rng=rng, format="csr")
    m = sp.csr_array(m)
    m.sort_indices()
    return m


@pytest.mark.parametrize("kind", ["symmetric", "skew-symmetric", "hermitian", "general"])
@pytest.mark.parametrize("fmt", ["CSR", "CSC"])
def test_symmetry_found_and_round_trip(tmp_path, kind, fmt, monkeypatch):
    monkeypatch.setattr(io_kernels, "CHUNK_ENTRIES", 7)        # several chunks of rows
    monkeypatch.setattr(io, "PARALLEL_WRITE", 0)               # the kernels, not the short-input path
    m = random_csr(60, 0.1, 1, np.complex128 if kind == "hermitian" else np.float64)
    if kind == "symmetric":
        m = m + m.T
    elif kind == "skew-symmetric":
        m = m - m.T
    elif kind == "hermitian":
        m = m + m.conj().T
        m = m - sp.diags_array(1j * m.diagonal().imag)          # a real diagonal
    m = sp.csr_array(m)
    m.eliminate_zeros()
    m.sort_indices()
    t = ustc.Tensor.from_package(m).convert(fmt)
    path = str(tmp_path / "m.mtx")
    ustc.to_file(t, path)
    assert header(path) == kind
    if kind != "general":
        assert entries_in_file(path) == sp.tril(m).nnz
    back = sp.csr_array(sio.mmread(path))
    assert abs(back - m).max() == 0 if back.nnz else m.nnz == 0
    assert (ustc.from_file(path, "CSR").to_package() != m).nnz == 0


def test_pattern_symmetric_values_not():
    m = sp.csr_array(np.array([[1.0, 2.0], [3.0, 1.0]]))
    code = io_kernels.mirror_symmetry(m.indptr, m.indices, m.data, 1)
    assert code == io_kernels.GENERAL
    m = sp.csr_array(np.array([[1.0, 2.0], [0.0, 1.0]]))
    assert io_kernels.mirror_symmetry(m.indptr, m.indices, m.data, 2) == io_kernels.GENERAL
    d = sp.csr_array(np.diag([1.0 + 0j, 2.0]))
    assert io_kernels.mirror_symmetry(d.indptr, d.indices, d.data, 1) == io_kernels.SYMMETRIC


def test_explicit_symmetry_writes_every_entry(tmp_path):
    m = sp.csr_array(np.array([[2.0, 1.0], [1.0, 3.0]]))
    path = str(tmp_path / "g.mtx")
    ustc.to_file(ustc.Tensor.from_package(m), path, symmetry="general")
    assert header(path) == "general" and entries_in_file(path) == 4


@pytest.mark.parametrize("case", ["unsorted", "zeros", "int8", "coo"])
def test_fallbacks_and_widened_values(tmp_path, case, monkeypatch):
    """Unsorted rows, stored zeros and COO go through SciPy's COO (the symmetry found there);
    int8 values take the direct path, widened to int64."""
    m = sp.csr_array(np.array([[0.0, 2.0, 1.0], [2.0, 0.0, 0.0], [1.0, 0.0, 5.0]]))
    if case == "unsorted":
        m = sp.csr_array((m.data[[1, 0, 2, 3, 4]], m.indices[[1, 0, 2, 3, 4]], m.indptr), shape=m.shape)
    elif case == "zeros":
        m = sp.csr_array((np.array([0.0, 2.0, 1.0, 2.0, 1.0, 5.0]), np.array([0, 1, 2, 0, 0, 2]),
                          np.array([0, 3, 4, 6])), shape=(3, 3))
    elif case == "int8":
        m = m.astype(np.int8)
    t = ustc.Tensor.from_package(m)
    if case == "coo":
        t = t.convert("COO")
    path = str(tmp_path / "o.mtx")
    ustc.to_file(t, path)
    assert header(path) == "symmetric"
    assert np.array_equal(sio.mmread(path).toarray(), np.asarray(m.toarray(), dtype=float))
    assert (io._compressed_rows(t) is not None) == (case == "int8")


def test_without_scipy_internals(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "_fmm_writer", lambda: None)
    m = sp.csr_array(np.array([[2.0, 1.0], [1.0, 3.0]]))
    path = str(tmp_path / "f.mtx")
    ustc.to_file(ustc.Tensor.from_package(m), path)
    assert header(path) == "symmetric" and np.array_equal(sio.mmread(path).toarray(), m.toarray())


@pytest.mark.parametrize("parallel_from", [0, 1 << 30])
def test_numpy_and_kernel_paths_agree(tmp_path, monkeypatch, parallel_from):
    monkeypatch.setattr(io, "PARALLEL_WRITE", parallel_from)
    for m in (random_csr(80, 0.05, 3), None):
        if m is None:
            m = random_csr(80, 0.05, 4)
            m = sp.csr_array(m + m.T)
        t = ustc.Tensor.from_package(m)
        (row, col), values, symmetry = io._compressed_rows(t)
        coo = m.tocoo()
        assert row.tolist() == coo.row.tolist() and col.tolist() == coo.col.tolist()
        assert symmetry == ("symmetric" if (m != m.T).nnz == 0 else "general")
    unsorted = sp.csr_array((np.ones(3), np.array([2, 0, 1]), np.array([0, 2, 3, 3])), shape=(3, 3))
    assert io._compressed_rows(ustc.Tensor.from_package(unsorted)) is None
    empty_rows = sp.csr_array((np.ones(2), np.array([2, 0]), np.array([0, 0, 1, 1, 2])), shape=(4, 4))
    assert io._compressed_rows(ustc.Tensor.from_package(empty_rows)) is not None
