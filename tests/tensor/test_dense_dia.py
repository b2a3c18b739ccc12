"""Dense matrices into DIAI / DIAJ straight from their diagonals (``fastpaths_rows.dia_from_dense``):
buffer for buffer equal to the NumPy pack oracle over the registry's DIA formats, edge shapes,
dtypes, index widths and the selections of ``sparsify`` / ``sparse_relu``; the path is the one
``Tensor.convert`` and ``Tensor.from_dense`` take; the array is never written; a result over the
memory budget is refused before allocating; the extra memory is the output itself."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import Tensor
from ustc.errors import StorageError
from ustc.formats import NAMED
from ustc.tensor import fastpaths_rows, kernels
from ustc.tensor.fastpaths import MASKED, NONZERO, POSITIVE
from ustc.tensor.tensor import as_format

from fresh_peak import fresh_peak
from storage_oracle import assert_same_storage, oracle
from test_convert import rand_dense

DIA = {nf.name: nf.format() for nf in NAMED if fastpaths_rows.dia_target(nf.format())}
WIDTHS = ["(i, j) -> (j - i : compressed, i : range), posWidth = 8, crdWidth = 8",
          "(i, j) -> (j - i : compressed, j : range), crdWidth = 16"]
SHAPES = [(0, 0), (0, 5), (5, 0), (1, 17), (17, 1), (7, 9), (23, 31), (40, 3)]
DTYPES = [np.float64, np.float32, np.int8, np.uint16, np.complex128, np.bool_]


def _coo(x):
    return Tensor.from_dense(x, "COO")


def test_the_registry_gives_both_dia_layouts():
    assert set(DIA) == {"DIAI", "DIAJ"}


@pytest.mark.parametrize("name", sorted(DIA))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_equals_the_oracle(name, shape, dtype):
    x = rand_dense(shape, dtype, 0.3, seed=sum(shape))
    before = x.copy()
    got = fastpaths_rows.dia_from_dense(x, DIA[name], "numpy", NONZERO, None)
    assert got is not None
    assert_same_storage(got, oracle(_coo(x), DIA[name]))
    np.testing.assert_array_equal(got.to_dense(), x)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("text", WIDTHS)
def test_index_widths(text):
    x = rand_dense((30, 20), np.float64, 0.2, seed=3)
    got = fastpaths_rows.dia_from_dense(x, as_format(text), "numpy", NONZERO, None)
    assert_same_storage(got, oracle(_coo(x), text))


@pytest.mark.parametrize("name", sorted(DIA))
def test_all_zero_and_explicit_zeros_on_a_kept_diagonal(name):
    x = np.zeros((9, 12))
    got = Tensor.from_package(x).convert(name)
    assert_same_storage(got, oracle(_coo(x), name))
    assert got.values.size == 0
    x[np.arange(9), np.arange(9) + 2] = np.arange(9) % 3  # zeros among a diagonal's entries
    x[8, 0] = -1.5
    got = Tensor.from_package(x).convert(name)
    assert_same_storage(got, oracle(_coo(x), name))


@pytest.mark.parametrize("name", sorted(DIA))
def test_several_chunks_and_diagonals_across_flag_words(name):
    """Above the parallel threshold (chunks of rows, each with its bit set) with diagonals on
    both sides of every 64-bit word border."""
    rng = np.random.default_rng(5)
    x = np.zeros((300, 280), np.float32)
    for k in (-299, -200, -64, -63, -1, 0, 1, 63, 64, 150, 279):
        idx = np.arange(max(0, -k), min(300, 280 - k))
        x[idx, idx + k] = rng.standard_normal(len(idx)) * (rng.random(len(idx)) < 0.7)
    got = fastpaths_rows.dia_from_dense(x, DIA[name], "numpy", NONZERO, None)
    assert_same_storage(got, oracle(_coo(x), name))
    assert kernels.threads() == 1 or fastpaths_rows._chunks(kernels, x.size) > 1


@pytest.mark.parametrize("name", sorted(DIA))
def test_convert_from_dense_and_from_dense_take_it(name, monkeypatch):
    x = rand_dense((64, 64), np.float64, 0.05, seed=8)
    want = oracle(_coo(x), name)
    calls = []
    real = fastpaths_rows.dia_from_dense
    monkeypatch.setattr(fastpaths_rows, "dia_from_dense", lambda *a: calls.append(a) or real(*a))
    assert_same_storage(Tensor.from_package(x).convert(name), want)
    assert_same_storage(Tensor.from_dense(x, name), want)
    assert len(calls) == 2


@pytest.mark.parametrize("name", sorted(DIA))
def test_selections(name):
    """``sparse_relu`` keeps the positive entries, ``sparsify(where=)`` the masked nonzeros: the
    diagonals are those holding a selected entry, the others of a kept diagonal stored as zeros."""
    x = rand_dense((25, 19), np.float64, 0.4, seed=13)
    mask = np.random.default_rng(1).random(x.shape) < 0.5
    relu = ustc.sparse_relu(x, name)
    assert_same_storage(relu, oracle(_coo(np.maximum(x, 0)), name))
    picked = ustc.sparsify(x, name, where=mask)
    assert_same_storage(picked, oracle(_coo(np.where(mask, x, 0)), name))
    for mode, m, ref in ((POSITIVE, None, np.maximum(x, 0)), (MASKED, mask, np.where(mask, x, 0))):
        got = fastpaths_rows.dia_from_dense(x, DIA[name], "numpy", mode, m)
        assert_same_storage(got, oracle(_coo(ref), name))


def test_not_for_other_formats_or_uncompiled_dtypes():
    x = rand_dense((6, 6), np.float64, 0.5, seed=2)
    assert fastpaths_rows.dia_from_dense(x, as_format("CSR"), "numpy", NONZERO, None) is None
    assert fastpaths_rows.dia_from_dense(x, as_format("SkewDIAI"), "numpy", NONZERO, None) is None
    assert fastpaths_rows.dia_from_dense(x.astype(np.float16), DIA["DIAI"], "numpy", NONZERO, None) is None
    got = Tensor.from_package(x.astype(np.float16)).convert("DIAI")  # the generic path
    assert_same_storage(got, oracle(_coo(x.astype(np.float16)), "DIAI"))


def test_over_the_budget_refused_before_allocating(monkeypatch):
    x = np.ones((50, 50), np.float64)  # 99 diagonals of 50 values: 39,600 bytes
    monkeypatch.setenv("USTC_MEMORY_BUDGET", "30000")
    with pytest.raises(StorageError, match=r"99 diagonals of 50 values \(39,600 bytes\).*USTC_MEMORY_BUDGET"):
        fastpaths_rows.dia_from_dense(x, DIA["DIAI"], "numpy", NONZERO, None)


def test_extra_memory_is_the_output():
    """The benchmark's banded case, smaller: 5 diagonals of a 2048 x 2048 float32 array. Besides
    the output, only the chunks' bit sets (rows + columns bits each) and small objects (8 KB)."""
    setup = ("x = np.zeros((2048, 2048), np.float32)\nr = np.arange(2048)\n"
             "for k in (-45, -1, 0, 1, 45):\n    i = r[max(0, -k):2048 - max(0, k)]\n    x[i, i + k] = 1.5\n"
             "import numba\na = Tensor.from_package(x)\na.convert('DIAJ')\n")
    got = fresh_peak(setup, "a.convert('DIAJ')", "numba.get_num_threads() * 4096 // 8 + 8192")
    assert got["peak"] <= got["nbytes"] + got["allowed"], got
    assert got["peak"] <= 1.2 * got["nbytes"], got


# -- CSR -> DIA (fastpaths_rows.dia_from_csr) ----------------------------------------------

CSR_SOURCES = ["CSR", "(i, j) -> (i : dense, j : compressed), posWidth = 64, crdWidth = 16"]


# dia_from_csr compiles once per value dtype and index width (DIAI / DIAJ and shapes are runtime
# arguments): every dtype with int32 indices, the 64 / 16-bit widths on a float and an integer
# dtype (test_csr_several_chunks_explicit_zeros_and_the_path reads int64 indices)
CSR_CASES = [(dtype, CSR_SOURCES[0]) for dtype in DTYPES] + [(dtype, CSR_SOURCES[1]) for dtype in (np.float64, np.int8)]


@pytest.mark.parametrize("name", sorted(DIA))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype, src", CSR_CASES, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_csr_equals_the_oracle(name, src, shape, dtype):
    x = rand_dense(shape, dtype, 0.3, seed=sum(shape) + 1)
    a = Tensor.from_dense(x, src)
    snap = {k: b.copy() for k, b in a.buffers.items()}, a.values.copy()
    got = fastpaths_rows.dia_from_csr(a, DIA[name])
    assert got is not None
    assert_same_storage(got, oracle(a, DIA[name]))
    np.testing.assert_array_equal(got.to_dense(), x)
    for k, b in snap[0].items():
        np.testing.assert_array_equal(a.buffers[k], b)
    np.testing.assert_array_equal(a.values, snap[1])


@pytest.mark.parametrize("name", sorted(DIA))
def test_csr_several_chunks_explicit_zeros_and_the_path(name, monkeypatch):
    """A SciPy CSR above the parallel threshold with explicit zeros (a diagonal holding only
    zeros is not stored, zeros on a kept one are), int64 indices; ``Tensor.convert`` takes it."""
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(7)
    n = 40_000
    m = sp.diags([rng.standard_normal(n - abs(k)) for k in (-300, -1, 0, 1, 77)], [-300, -1, 0, 1, 77],
                 shape=(n, n), format="coo")
    rows = np.concatenate([m.row, np.arange(n - 5)])           # diagonal 5: explicit zeros only
    cols = np.concatenate([m.col, np.arange(5, n)])
    data = np.concatenate([np.where(np.arange(m.nnz) % 5 == 0, 0.0, m.data), np.zeros(n - 5)])
    m = sp.csr_array((data, (rows, cols)), shape=(n, n))
    m.indices, m.indptr = m.indices.astype(np.int64), m.indptr.astype(np.int64)
    assert m.has_canonical_format and m.nnz == len(data)
    a = Tensor.from_package(m)
    want = oracle(a, name)
    calls = []
    real = fastpaths_rows.dia_from_csr
    monkeypatch.setattr(fastpaths_rows, "dia_from_csr", lambda *x: calls.append(x) or real(*x))
    got = a.convert(name)
    assert calls and len(got.buffers[(0, "crd")]) == 5
    assert_same_storage(got, want)


def test_csr_not_for_csc_or_other_targets():
    x = rand_dense((6, 7), np.float64, 0.5, seed=4)
    assert fastpaths_rows.dia_from_csr(Tensor.from_dense(x, "CSC"), DIA["DIAI"]) is None
    assert fastpaths_rows.dia_from_csr(Tensor.from_dense(x, "CSR"), as_format("SkewDIAJ")) is None
    assert fastpaths_rows.dia_from_csr(Tensor.from_dense(x, "CSR"), as_format("COO")) is None


def test_csr_over_the_budget_refused_before_allocating(monkeypatch):
    a = Tensor.from_dense(np.ones((50, 50)), "CSR")
    monkeypatch.setenv("USTC_MEMORY_BUDGET", "30000")
    with pytest.raises(StorageError, match=r"50 x 50 matrix would store 99 diagonals"):
        fastpaths_rows.dia_from_csr(a, DIA["DIAJ"])
