"""Conversions into CSR from DCSR, COO, BSR(r, c), DIAI and DIAJ by the parallel row kernels
(``ustc.tensor.fastpaths_rows``): every result equals the NumPy pack oracle buffer for buffer,
the kernels are the ones taken, the source is never written, and ``share=True`` shares exactly
the buffers the module promises (``np.shares_memory``) while ``Tensor.convert`` shares none."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ustc
from ustc import Tensor
from ustc import formats as F
from ustc.formats import NAMED
from ustc.tensor import fastpaths, fastpaths_rows

from strategies import examples
from test_convert import rand_dense
from storage_oracle import assert_same_storage, oracle

BLOCKS = [(1, 1), (2, 2), (2, 3), (3, 2), (4, 4)]


def _sources():
    """Every 2-D named format of the registry the row kernels read (BSR in several block sizes)."""
    out = {}
    for nf in NAMED:
        blocked = nf.format().nlevels == 4 and nf.format().ndim == 2
        fmts = [nf.build(*block) for block in BLOCKS] if blocked else [nf.format()]
        for k, fmt in enumerate(fmts):
            if fmt.ndim == 2 and fastpaths_rows.source_kind(fmt, (1, 1, *_block(fmt))) is not None:
                out[nf.name + (f"{BLOCKS[k]}" if blocked else "")] = fmt
    return out


def _block(fmt):
    return fmt.level_shape((0, 0))[2:] if fmt.nlevels == 4 else ()


SOURCES = _sources()
SHAPES = [(0, 0), (0, 5), (5, 0), (1, 17), (17, 1), (7, 9), (23, 31)]
DTYPES = [np.float64, np.float32, np.int32, np.int64, np.complex128, np.bool_]


def test_the_registry_gives_every_source_kind():
    kinds = {fastpaths_rows.source_kind(f, (1, 1, *_block(f))) for f in SOURCES.values()}
    assert kinds == {"dcsr", "coo", "bsr", "diai", "diaj"}


def _snapshot(t: Tensor):
    return {k: b.copy() for k, b in t.buffers.items()}, t.values.copy()


def _unchanged(t: Tensor, snap) -> None:
    buffers, values = snap
    for k, b in buffers.items():
        np.testing.assert_array_equal(t.buffers[k], b)
    np.testing.assert_array_equal(t.values, values)


def _content(shape, kind, dtype, seed=0):
    if kind == "zero":
        return np.zeros(shape, dtype=dtype)
    if kind == "banded":
        x = np.zeros(shape, dtype=dtype)
        for k in (-3, 0, 1, 5):
            idx = np.arange(max(0, -k), min(shape[0], shape[1] - k)) if min(shape) else np.arange(0)
            x[idx, idx + k] = 1 if dtype == np.bool_ else (np.arange(len(idx)) % 7 + 1).astype(dtype)
        return x
    return rand_dense(shape, dtype, 0.3, seed=seed)


def _dtypes(fmt) -> tuple:
    """float64 and one other dtype per source kind, in turn: the row kernels compile once per
    kind and dtype and copy values without looking at them, so every dtype runs through one kind
    (test_any_shape_and_block draws int16 and complex64 on every kind)."""
    kinds = sorted({fastpaths_rows.source_kind(f, (1, 1, *_block(f))) for f in SOURCES.values()})
    k = kinds.index(fastpaths_rows.source_kind(fmt, (1, 1, *_block(fmt))))
    return DTYPES[0], DTYPES[1 + k % (len(DTYPES) - 1)]


@pytest.mark.parametrize("src", list(SOURCES), ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind", ["random", "zero", "banded"])
def test_into_csr_equals_the_oracle(src, shape, kind):
    fmt = SOURCES[src]
    for dtype in _dtypes(fmt):
        x = _content(shape, kind, np.dtype(dtype))
        a = Tensor.from_dense(x, fmt)
        snap = _snapshot(a)
        share = fastpaths_rows.source_kind(fmt, a.level_shape) == "coo"
        direct = fastpaths_rows.to_csr(a, F.CSR, share=share)
        assert direct is not None, (src, shape, dtype)
        want = oracle(a, F.CSR)
        assert_same_storage(direct, want)
        got = a.convert(F.CSR)
        assert_same_storage(got, want)
        np.testing.assert_array_equal(got.to_dense(), x)
        _unchanged(a, snap)


@pytest.mark.parametrize("src", [s for s in SOURCES if fastpaths_rows.source_kind(SOURCES[s], (1, 1, 1, 1)) in
                                 ("dcsr", "coo")])
def test_explicit_zeros_are_dropped(src):
    """A DCSR or COO storing a zero goes the generic way (which drops it), shared or not."""
    x = rand_dense((9, 11), np.float64, 0.4, seed=4)
    a = Tensor.from_dense(x, SOURCES[src])
    a.values[::3] = 0
    snap = _snapshot(a)
    assert fastpaths_rows.to_csr(a, F.CSR) is None and fastpaths_rows.to_csr(a, F.CSR, share=True) is None
    want = oracle(a, F.CSR)
    assert_same_storage(a.convert(F.CSR), want)
    assert 0 not in a.convert(F.CSR).values
    _unchanged(a, snap)


@pytest.mark.parametrize("src", ["DCSR", "COO"])
def test_share_is_the_contract(src, monkeypatch):
    """``share=True``: the CSR's column coordinates and values are the source's arrays; the
    default (and ``Tensor.convert``) copies them."""
    monkeypatch.setattr(fastpaths, "PARALLEL_TRANSPOSE", 0)  # chunked kernels from the first entry on
    fmt = SOURCES[src]
    x = rand_dense((40, 33), np.float64, 0.3, seed=5)
    a = Tensor.from_dense(x, fmt)
    shared = fastpaths_rows.to_csr(a, F.CSR, share=True)
    assert_same_storage(shared, oracle(a, F.CSR))
    assert np.shares_memory(shared.values, a.values)
    assert np.shares_memory(shared.crd(1), a.crd(1))
    assert not np.shares_memory(shared.pos(1), a.buffers[(0, "pos")])
    for copied in (a.convert(F.CSR), fastpaths_rows.to_csr(a, F.CSR) if src == "DCSR" else a.convert(F.CSR)):
        assert not np.shares_memory(copied.values, a.values)
        assert not np.shares_memory(copied.crd(1), a.crd(1))
    shared.values[0] = 123.0  # the documented consequence of sharing
    assert a.values[0] == 123.0


def test_index_widths_of_source_and_target():
    x = rand_dense((30, 40), np.float32, 0.2, seed=6)
    for text in ("(i, j) -> (i : compressed, j : compressed), crdWidth = 16",
                 "(i, j) -> (j - i : compressed, i : range), posWidth = 64, crdWidth = 64",
                 "(i, j) -> (i floordiv 3 : dense, j floordiv 2 : compressed, i mod 3 : dense, j mod 2 : dense), "
                 "crdWidth = 8"):
        a = Tensor.from_dense(x, text)
        for target in (F.CSR, ustc.TensorFormat.parse("(i, j) -> (i : dense, j : compressed), crdWidth = 16")):
            assert fastpaths_rows.to_csr(a, target) is not None
            assert_same_storage(a.convert(target), oracle(a, target))


def test_other_targets_and_sources_decline():
    x = rand_dense((6, 8), np.float64, 0.4, seed=7)
    for src in ("CSR", "CSC", "DCSC", "BSC(2, 2)", "SkewDIAI", "CROW"):
        assert fastpaths_rows.to_csr(Tensor.from_dense(x, src), F.CSR) is None
    a = Tensor.from_dense(x, "DCSR")
    assert fastpaths_rows.to_csr(a, F.CSC) is None
    assert fastpaths_rows.to_csr(Tensor.from_dense(x, "COO"), F.CSR) is None  # copies: fastpaths.convert's


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(0, 13), cols=st.integers(0, 13), r=st.integers(1, 4), c=st.integers(1, 4),
       density=st.sampled_from([0.0, 0.1, 0.5, 1.0]), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float64, np.int16, np.complex64]),
       src=st.sampled_from(["BSR", "DIAI", "DIAJ", "DCSR", "COO"]))
def test_any_shape_and_block(rows, cols, r, c, density, seed, dtype, src):
    x = rand_dense((rows, cols), dtype, density, seed=seed) if density else np.zeros((rows, cols), dtype)
    a = Tensor.from_dense(x, f"BSR({r}, {c})" if src == "BSR" else src)
    snap = _snapshot(a)
    got = fastpaths_rows.to_csr(a, F.CSR, share=src == "COO")
    assert got is not None
    assert_same_storage(got, oracle(a, F.CSR))
    np.testing.assert_array_equal(got.to_dense(), x)
    _unchanged(a, snap)


# -- Tensor.convert(copy=False): the user's explicit option -----------------------------------

SHARING = [("CSR", "COO"), ("CSR", "DCSR"), ("COO", "CSR"), ("DCSR", "CSR")]


@pytest.mark.parametrize("src, dst", SHARING)
@pytest.mark.parametrize("shape", [(0, 0), (1, 17), (17, 1), (23, 31)], ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64])
def test_copy_false_shares_columns_and_values(src, dst, shape, dtype):
    x = rand_dense(shape, dtype, 0.3, seed=8)
    a = Tensor.from_dense(x, src)
    snap = _snapshot(a)
    got = a.convert(dst, copy=False)
    want = oracle(a, dst)
    assert_same_storage(got, want)
    copied = a.convert(dst)
    assert_same_storage(copied, want)
    col = a.format.nlevels - 1
    if a.nse:
        assert np.shares_memory(got.values, a.values) and np.shares_memory(got.crd(1), a.crd(col))
        assert not np.shares_memory(copied.values, a.values) and not np.shares_memory(copied.crd(1), a.crd(col))
    _unchanged(a, snap)


def test_copy_false_elsewhere_copies():
    x = rand_dense((12, 10), np.float64, 0.3, seed=9)
    for src, dst in (("CSR", "CSC"), ("BSR(2, 2)", "CSR"), ("DIAI", "CSR"), ("CSR", "BSR(2, 2)")):
        a = Tensor.from_dense(x, src)
        got = a.convert(dst, copy=False)
        np.testing.assert_array_equal(got.to_dense(), x)
        assert not np.shares_memory(got.values, a.values)


@pytest.mark.parametrize("dst", ["COO", "DCSR"])
def test_writes_through_a_shared_result_keep_the_source_valid(dst):
    """The contract of ``copy=False``: a value written in place is seen by both tensors; a write
    that changes the pattern gives the result new buffers and leaves the source as it was."""
    x = rand_dense((8, 9), np.float64, 0.4, seed=10)
    x[0, 0], x[1, 1] = 3.0, 0.0
    a = Tensor.from_dense(x, "CSR")
    b = a.convert(dst, copy=False)
    b.values[0] = 7.0                      # the entry at (0, 0) of both
    assert a.to_dense()[0, 0] == 7.0 and b.to_dense()[0, 0] == 7.0
    expect = a.to_dense().copy()
    b[1, 1] = 5.0                          # a new entry: the result's pattern changes
    a.validate()
    np.testing.assert_array_equal(a.to_dense(), expect)
    assert b.to_dense()[1, 1] == 5.0
    b *= 2
    a.validate()
    np.testing.assert_array_equal(a.to_dense(), expect)


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_scipy_bsr_with_block_columns_out_of_order(block):
    """SciPy's ``tobsr`` leaves each block row's columns in first-met order (its BSR view is
    nonunique, nonordered): each block row is sorted by the kernels; a repeated block column
    goes the generic way, which sums it."""
    sp = pytest.importorskip("scipy.sparse")
    x = rand_dense((24, 36), np.float64, 0.3, seed=11)  # every block size divides it (SciPy asks)
    b = sp.csr_array(x).tobsr(blocksize=block)
    t = Tensor.from_package(b)
    snap = _snapshot(t)
    got = fastpaths_rows.to_csr(t, F.CSR)
    assert got is not None
    assert_same_storage(got, oracle(t, F.CSR))
    np.testing.assert_array_equal(got.to_dense(), x)
    _unchanged(t, snap)
    if b.nnz and len(b.indices) > 1 and b.indptr[1] >= 2:
        dup = sp.bsr_array((b.data.copy(), b.indices.copy(), b.indptr.copy()), shape=b.shape)
        dup.indices[1] = dup.indices[0]
        t = Tensor.from_package(dup)
        assert fastpaths_rows.to_csr(t, F.CSR) is None
        np.testing.assert_allclose(t.convert(F.CSR).to_dense(), dup.toarray())


@pytest.mark.parametrize("src", [s for s in SOURCES if fastpaths_rows.source_kind(SOURCES[s], ()) in ("diai", "diaj")])
@pytest.mark.parametrize("shape", [(5000, 300), (300, 5000), (4097, 4099), (2049, 1)], ids=str)
def test_dia_rows_across_count_blocks(src, shape):
    """DIA sources whose rows span several of ``dia_row_counts``' blocks
    (``kernels.DIA_COUNT_ROWS``), diagonals entering and leaving the matrix inside a block, and
    explicit zeros on the diagonals: the same buffers as the oracle."""
    from ustc.tensor import kernels

    assert max(shape) > kernels.DIA_COUNT_ROWS
    rng = np.random.default_rng(shape[0])
    x = np.zeros(shape)
    for k in (-4000, -2100, -1, 0, 3, 2048, 4500):
        idx = np.arange(max(0, -k), min(shape[0], shape[1] - k))
        x[idx, idx + k] = rng.standard_normal(len(idx)) * (rng.random(len(idx)) < 0.8)
    a = Tensor.from_dense(x, SOURCES[src])
    snap = _snapshot(a)
    got = fastpaths_rows.to_csr(a, F.CSR)
    assert got is not None
    assert_same_storage(got, oracle(a, F.CSR))
    np.testing.assert_array_equal(got.to_dense(), x)
    _unchanged(a, snap)
