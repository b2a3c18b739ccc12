"""CSR -> BSR(r, c) by ``ustc.tensor.convert_bsr`` (stamped kernels for a power-of-two c, the
merging ones otherwise or where stamps would outweigh the entries): every result equals the
NumPy pack oracle buffer for buffer and the dense array, the kernels are the ones taken, explicit
zeros are dropped (a block of zeros only is not stored), and the source is never written."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ustc import Tensor
from ustc.kernels import _convert_bsr
from ustc.tensor import convert_bsr

from storage_oracle import assert_same_storage, oracle


def _csr(shape, density, dtype=np.float64, seed=0, zeros=0.0):
    """A canonical SciPy CSR with some stored entries set to explicit zeros (``zeros``: their share)."""
    rng = np.random.default_rng(seed)
    a = sp.random_array(shape, density=density, format="csr", rng=rng, dtype=np.float64)
    a.data[:] = rng.integers(1, 9, a.nnz) * rng.choice([-1, 1], a.nnz)
    a = a.astype(dtype)
    if dtype == np.complex128:
        a.data += 1j * rng.integers(-3, 4, a.nnz)
    if zeros:
        a.data[rng.random(a.nnz) < zeros] = 0
    return a


def _check(a, block):
    """Convert ``a`` to BSR(block) through ``Tensor.convert``; compare with the oracle and the dense
    array; the source buffers untouched."""
    t = Tensor.from_package(a)
    before = [b.copy() for b in (a.indptr, a.indices, a.data)]
    fmt = f"BSR({block[0]}, {block[1]})"
    got = t.convert(fmt)
    assert_same_storage(got, oracle(t, fmt))
    np.testing.assert_array_equal(got.to_dense(), a.toarray())
    for old, new in zip(before, (a.indptr, a.indices, a.data)):
        np.testing.assert_array_equal(old, new)
    return got


def _spy(monkeypatch, name):
    calls = []
    kernel = getattr(_convert_bsr, name)
    monkeypatch.setattr(_convert_bsr, name, lambda *args: calls.append(1) or kernel(*args))
    return calls


def test_shapes():
    """Empty, 1 x n, n x 1, shapes not a multiple of the block, all-zero values (float64)."""
    for shape, block in [((0, 0), (2, 2)), ((0, 5), (2, 2)), ((5, 0), (2, 2)), ((1, 40), (4, 4)),
                         ((40, 1), (2, 2)), ((33, 17), (4, 4)), ((31, 20), (2, 1)), ((30, 21), (1, 8))]:
        _check(_csr(shape, 0.3, seed=sum(shape)), block)
    all_zero = _csr((12, 12), 0.5)
    all_zero.data[:] = 0
    assert _check(all_zero, (2, 2)).nse == 0


@pytest.mark.parametrize("dtype", [np.float32])
def test_other_dtypes(monkeypatch, dtype):
    """The stamped kernels in another value dtype (each dtype compiles its own), zeros dropped."""
    calls = _spy(monkeypatch, "block_fill_stamped")
    got = _check(_csr((33, 40), 0.3, dtype, seed=5, zeros=0.2), (2, 4))
    assert calls and got.dtype == dtype


@pytest.mark.parametrize("block, kernels", [((2, 2), ("block_counts", "block_fill_stamped")),
                                            ((3, 5), ("block_counts_merged", "block_fill"))])
def test_parallel_chunks(monkeypatch, block, kernels):
    """Above the serial size (threads split the block rows): stamps for c = 2, merging for c = 5;
    explicit zeros, some forming whole blocks, run both passes again dropping them."""
    calls = [_spy(monkeypatch, name) for name in kernels]
    a = _csr((700, 650), 0.2, seed=3, zeros=0.3)
    a.data[a.indptr[100]:a.indptr[110]] = 0  # block rows of zeros only
    _check(a, block)
    assert [len(c) for c in calls] == [2, 2]  # counted and filled twice: zeros met


def test_wide_matrix_merges_without_stamps(monkeypatch):
    """More block columns a thread than entries: no stamp arrays, the merging kernels instead."""
    merged, stamped = _spy(monkeypatch, "block_fill"), _spy(monkeypatch, "block_fill_stamped")
    _check(_csr((6, 1 << 16), 1e-4, seed=1), (2, 4))
    assert merged and not stamped


def test_other_sources_and_targets_decline():
    """CSC, COO sources and a non-BSR target are not this path's."""
    a = _csr((8, 8), 0.4)
    assert convert_bsr.bsr_from_csr(Tensor.from_package(a.tocsc()), Tensor.from_package(a).format) is None
    fmt = Tensor.from_package(a).convert("BSR(2, 2)").format
    assert convert_bsr.bsr_from_csr(Tensor.from_package(a.tocoo()), fmt) is None
    assert convert_bsr.bsr_from_csr(Tensor.from_package(a), Tensor.from_package(a.tocsc()).format) is None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(0, 24), cols=st.integers(0, 24), r=st.integers(1, 5), c=st.sampled_from([1, 2, 3, 4, 8]),
       density=st.floats(0, 1), zeros=st.sampled_from([0.0, 0.5]), seed=st.integers(0, 99))
def test_random_against_oracle(rows, cols, r, c, density, zeros, seed):
    _check(_csr((rows, cols), density, seed=seed, zeros=zeros), (r, c))
