"""Conversion kernels that move values without looking at them, and the passes that first assume
no explicit zero:

* ``fastpaths.as_bits``: the blocked transpose's sort moves values as unsigned integers of their
  item size, so NaN payloads and infinities come out bit for bit (and one compile serves every
  dtype of a size);
* the counting transposes and CSR -> DIA count without reading values, then run again dropping
  zeros where the fill met one: a source whose only entries of a row (a diagonal) are explicit
  zeros must come out without that row's (diagonal's) entries, equal to the pack oracle."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from storage_oracle import assert_same_storage, oracle
from test_transpose_blocked import force
from ustc import Tensor
from ustc import formats as F
from ustc.tensor import fastpaths


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float16, np.float32, np.float64, np.complex64,
                                   np.complex128])
def test_as_bits_is_a_view_of_the_same_bytes(dtype):
    x = np.arange(1, 6).astype(dtype)
    bits = fastpaths.as_bits(x)
    assert bits.itemsize == x.itemsize and np.shares_memory(bits, x)
    assert bits.tobytes() == x.tobytes()
    assert bits.dtype.kind in "u" or x.itemsize == 16


def _payload_matrix(dtype) -> sp.csr_array:
    """A 6 x 40 CSR whose values are NaNs of distinct payloads, infinities and -1.5."""
    rng = np.random.default_rng(3)
    x = (rng.random((6, 40)) < 0.4).astype(dtype)
    nz = np.flatnonzero(x)
    raw = x.reshape(-1).view(np.uint64 if x.itemsize == 8 else np.uint32)
    nan = 0x7FF8000000000000 if x.itemsize == 8 else 0x7FC00000
    raw[nz] = nan | np.arange(1, len(nz) + 1, dtype=raw.dtype)  # quiet NaNs, payload = rank
    x.reshape(-1)[nz[::5]] = np.inf
    x.reshape(-1)[nz[1::7]] = -1.5
    return sp.csr_array(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", ["CSC", "COO"])
def test_blocked_transpose_keeps_nan_payloads(dtype, target, monkeypatch):
    force(monkeypatch, shift=3, sub=1)
    a = _payload_matrix(dtype)
    src = a.tocsc() if target == "COO" else a
    got = Tensor.from_package(src).convert(target)
    want = a.tocsc() if target == "CSC" else a.tocoo()  # canonical: the transposed order of src
    bits = np.uint64 if np.dtype(dtype).itemsize == 8 else np.uint32
    assert got.values.view(bits).tolist() == np.asarray(want.data).view(bits).tolist()


def _zero_row_source(shape=(30, 24)) -> np.ndarray:
    """A random matrix whose column 5 and diagonal +3 hold explicit zeros only (set after the pattern)."""
    rng = np.random.default_rng(7)
    x = np.where(rng.random(shape) < 0.3, rng.integers(1, 9, shape), 0).astype(np.float64)
    x[::2, 5] = 1.0
    i = np.arange(min(shape[0], shape[1] - 3))
    x[i, i + 3] = 1.0
    return x


def _with_explicit_zeros(x: np.ndarray) -> sp.csr_array:
    a = sp.csr_array(x)
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    a.data[(a.indices == 5) | (a.indices == rows + 3)] = 0.0  # stored, but zero
    return a


@pytest.mark.parametrize("blocked", [False, True], ids=["direct", "blocked"])
@pytest.mark.parametrize("pair", [("CSR", "CSC"), ("CSC", "COO"), ("COO", "CSC")])
def test_transposes_drop_explicit_zeros_after_the_optimistic_count(pair, blocked, monkeypatch):
    if blocked:
        force(monkeypatch, shift=2, sub=1)
    else:
        monkeypatch.setattr(fastpaths, "PARALLEL_TRANSPOSE", 0)
    a = _with_explicit_zeros(_zero_row_source())
    src = {"CSR": a, "CSC": a.tocsc(), "COO": a.tocoo()}[pair[0]]
    saved = src.data.copy()
    t = Tensor.from_package(src)
    got = t.convert(pair[1])
    assert_same_storage(got, oracle(t, got.format))
    assert got.nse == np.count_nonzero(a.toarray())
    np.testing.assert_array_equal(src.data, saved)


@pytest.mark.parametrize("target", [F.DIAI, F.DIAJ])
def test_csr_to_dia_drops_a_diagonal_of_explicit_zeros(target, monkeypatch):
    monkeypatch.setattr(fastpaths, "PARALLEL_TRANSPOSE", 0)
    a = _with_explicit_zeros(_zero_row_source())
    t = Tensor.from_package(a)
    got = t.convert(target)
    assert_same_storage(got, oracle(t, got.format))
    offsets = got.buffers[(0, "crd")]
    assert 3 not in offsets.tolist()
