"""Conversions whose walk cannot produce the target's order (CSR <-> CSC, COO <-> CSC, CSC -> COO):
one stable counting transpose in parallel chunks (``fastpaths.transposed``), explicit zeros
dropped, no temporary of the source's or the target's size; and einsum copies, which take the
conversion's path. Every result equals the NumPy pack oracle buffer for buffer."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import Tensor
from ustc import formats as F
from ustc.tensor import fastpaths
from ustc.tensor.tensor import as_format

from fresh_peak import fresh_peak, random_dense_source
from test_convert import rand_dense
from storage_oracle import assert_same_storage, oracle

FAMILY = {"CSR": F.CSR, "CSC": F.CSC, "COO": F.COO(2),
          "COO by columns": as_format("(i, j) -> (j : compressed(nonunique), i : singleton)")}
SHAPES = [(0, 0), (0, 6), (6, 0), (1, 17), (17, 1), (23, 31)]


@pytest.fixture(params=[False, True], ids=["one chunk", "chunks"])
def chunks(request, monkeypatch):
    """The transpose on one chunk, or split into chunks from the first entry on."""
    if request.param:
        monkeypatch.setattr(fastpaths, "PARALLEL_TRANSPOSE", 0)
    return request.param


def heavy(shape, seed=0):
    x = rand_dense(shape, np.float64, 0.05, seed=seed)
    if x.size:
        x[shape[0] // 2] = np.arange(1, shape[1] + 1)
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("contents", ["random", "zero", "heavy", "explicit zeros"])
def test_family_pairs_equal_the_oracle(shape, contents, chunks):
    x = {"random": lambda: rand_dense(shape, np.float64, 0.3, seed=2), "zero": lambda: np.zeros(shape),
         "heavy": lambda: heavy(shape), "explicit zeros": lambda: rand_dense(shape, np.float64, 0.3, seed=3)}[contents]()
    for s, src in FAMILY.items():
        a = Tensor.from_dense(x, src)
        if contents == "explicit zeros" and a.nse:
            a._values[::3] = 0  # stored zeros: dropped by the transpose
        for d, dst in FAMILY.items():
            got = a.convert(dst)
            assert_same_storage(got, oracle(a, dst))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128, np.bool_])
def test_dtypes(dtype, chunks):
    x = rand_dense((40, 25), dtype, 0.3, seed=4)
    for src, dst in (("CSR", "CSC"), ("CSC", "CSR"), ("COO", "CSC"), ("CSC", "COO")):
        a = Tensor.from_dense(x, FAMILY[src])
        assert_same_storage(a.convert(FAMILY[dst]), oracle(a, FAMILY[dst]))


def test_the_transpose_is_taken_and_the_writer_is_not(monkeypatch):
    """CSC -> COO is the counting transpose (the walk cannot produce row order); CSR -> COO is one
    fused pass that expands the rows while it copies (faster than the generated writer: 2.3 against
    4.3 ms on the 200,000^2 random matrix); COO -> COO stays the writer's."""
    import ustc.ops.convert as ops_convert

    x = rand_dense((30, 20), np.float64, 0.3, seed=5)
    a = Tensor.from_dense(x, F.CSC)
    calls = []
    original = fastpaths.transposed
    monkeypatch.setattr(fastpaths, "transposed", lambda *a, **k: calls.append(1) or original(*a, **k))
    a.convert("COO")
    assert calls == [1]
    monkeypatch.setattr(ops_convert, "written", lambda *a, **k: pytest.fail("the writer ran"))
    csr = Tensor.from_dense(x, F.CSR)
    assert_same_storage(csr.convert("COO"), oracle(csr, "COO"))
    assert fastpaths.convert(Tensor.from_dense(x, F.COO(2)), as_format("COO")) is None


@pytest.mark.parametrize("src, dst", [("CSC", "COO"), ("CSR", "CSC"), ("COO", "CSC"), ("CSC", "CSR")])
def test_extra_memory_is_the_output_and_a_count_table(src, dst):
    """No temporary of the matrix's size: the peak is the output plus chunks x rows counts."""
    family = {"CSR": "F.CSR", "CSC": "F.CSC", "COO": "F.COO(2)"}
    setup = (random_dense_source((3000, 2000), "float64", 0.05, seed=6)
             + f"from ustc import formats as F\na = Tensor.from_dense(x, {family[src]})\n"
             + f"a.convert({family[dst]})  # compile / load first\n")
    got = fresh_peak(setup, f"a.convert({family[dst]})",
                     "ustc.tensor.kernels.threads() * max(x.shape) * 4 + 8 * (max(x.shape) + 1)")
    assert got["peak"] <= got["nbytes"] + got["allowed"] + 64 * 1024, got


@pytest.mark.parametrize("subscripts, fmt", [("ij->ij", "CSC"), ("ij->ji", "CSR"), ("ij->ij", "COO"),
                                             ("ij->ji", "COO"), ("ij->ij", "CSR"), ("ij->ij", "BSR(2, 2)"),
                                             ("ij->ji", "DCSR")])
@pytest.mark.parametrize("src", ["CSR", "CSC", "COO"])
def test_an_einsum_copy_is_the_conversion(subscripts, fmt, src):
    x = rand_dense((14, 9), np.float64, 0.3, seed=7)
    a = Tensor.from_dense(x, FAMILY[src])
    got = ustc.einsum(subscripts, a, out_format=fmt)
    view = a if subscripts == "ij->ij" else a.transpose()
    want = oracle(view, fmt)
    assert_same_storage(got, want)
    for key, buf in got.buffers.items():  # new storage, even where the format is the operand's
        assert not any(np.shares_memory(buf, b) for b in a.buffers.values())
    assert not np.shares_memory(got.values, a.values)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_, np.complex64, np.float16])
def test_dense_to_csc_selects_by_columns(shape, dtype, chunks):
    """Dense -> CSC straight from the row-major array (no CSR in between), as the oracle; and the
    selections of ``sparsify`` (a mask) and ``sparse_relu`` into CSC."""
    x = rand_dense(shape, dtype, 0.3, seed=8)
    want = oracle(Tensor.from_dense(x, F.COO(2)), F.CSC)
    assert_same_storage(Tensor.from_dense(x, F.CSC), want)
    assert_same_storage(Tensor.from_package(x).convert(F.CSC), want)
    if dtype in (np.float64, np.float32):
        where = rand_dense(shape, np.bool_, 0.5, seed=9)
        masked = np.where(where, x, 0)
        assert_same_storage(ustc.sparsify(x, "CSC", where=where), oracle(Tensor.from_dense(masked, F.COO(2)), F.CSC))
        relu = np.maximum(x, 0)
        assert_same_storage(ustc.sparse_relu(x, "CSC"), oracle(Tensor.from_dense(relu, F.COO(2)), F.CSC))


def test_dense_to_csc_keeps_no_csr_in_between():
    setup = random_dense_source((3000, 2000), "float64", 0.05, seed=10) + "from ustc import formats as F\n" \
        + "Tensor.from_dense(x, F.CSC)\n"
    got = fresh_peak(setup, "Tensor.from_dense(x, F.CSC)",
                     "ustc.tensor.kernels.threads() * x.shape[1] * 4 + 8 * (x.shape[1] + 1)")
    assert got["peak"] <= got["nbytes"] + got["allowed"] + 64 * 1024, got


@pytest.mark.parametrize("shape", SHAPES + [(40, 3)], ids=str)
def test_same_order_family_copies(shape, chunks):
    """COO -> CSR (positions from the sorted rows' run borders) and CSR -> CSR of other widths:
    copies in parallel chunks; a stored zero sends the conversion to the generic path."""
    x = heavy(shape, seed=13)
    wide = as_format("#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), posWidth = 64 }>")
    for src, dst in ((F.COO(2), F.CSR), (F.CSR, wide)):
        a = Tensor.from_dense(x, src)
        assert_same_storage(a.convert(dst), oracle(a, dst))
        if a.nse:
            a._values[-1] = 0
            assert_same_storage(a.convert(dst), oracle(a, dst))
