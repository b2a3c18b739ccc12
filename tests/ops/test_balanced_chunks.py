"""Work-balanced chunks of row-parallel workspace kernels (``codegen.workspace.chunked_rows``: a
parallel pre-pass adds up each row's products, a prefix sum and a binary search place the chunk
borders) and the workspace's sort of long rows (insertion, read off the marks, buckets, the
library sort), checked against a SciPy oracle on skewed row lengths: one very heavy row, heavy
rows of B, empty rows, fewer rows than chunks, 1 x n and 0 x n, over registry formats and
several thread counts (the host's count is patched, so a 2-core machine runs 64 chunks too)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from op_helpers import subset_2d
from ustc import formats as F
from ustc.codegen import notation as nt
from ustc.codegen import workspace as wsp
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.emit_cpu import CpuEmitter
from ustc.ops import runtime
from ustc.tensor import fastpaths_rows

THREADS = [1, 2, 3, 64]
FORMATS = subset_2d("CSR", "CSC", "COO", "DCSR", "BSR", "DIAI")


@pytest.fixture
def threads(monkeypatch):
    """Run the parallel kernel at any size with the host's thread count set to ``n``."""
    def use(n: int) -> None:
        monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
        monkeypatch.setattr(runtime, "_threads", lambda: n)
    return use


def csr(dense: np.ndarray) -> sp.csr_array:
    out = sp.csr_array(dense)
    out.sort_indices()
    return out


def skewed(rng, rows: int, cols: int, heavy_rows=(), empty_rows=(), per_row: int = 2) -> np.ndarray:
    """A ``rows x cols`` array with ``per_row`` entries a row, full rows ``heavy_rows`` and
    all-zero rows ``empty_rows``."""
    x = np.zeros((rows, cols))
    for r in range(rows):
        x[r, rng.choice(cols, size=min(per_row, cols), replace=False)] = rng.uniform(0.5, 1.5, min(per_row, cols))
    for r in heavy_rows:
        x[r] = rng.uniform(0.5, 1.5, cols)
    for r in empty_rows:
        x[r] = 0
    return x


def check_product(a: np.ndarray, b: np.ndarray, fmt) -> None:
    """``Matmul(A, B)`` in ``fmt`` equals SciPy's product, twice (values changed in between)."""
    A, B = ustc.Tensor.from_dense(a, fmt), ustc.Tensor.from_dense(b, fmt)
    with ustc.Matmul(A, B) as mm:
        mm.plan()
        C = mm.execute()
        assert C.format == A.format and C.shape == (a.shape[0], b.shape[1])
        C.validate()
        np.testing.assert_allclose(C.to_dense(), (csr(a) @ csr(b)).toarray(), rtol=1e-12, atol=1e-12)
        A.values[...] *= -2
        np.testing.assert_allclose(mm.execute().to_dense(), -2 * (csr(a) @ csr(b)).toarray(), rtol=1e-12,
                                   atol=1e-12)


# -- the kernel ---------------------------------------------------------------------------------
def spgemm_source(fmt=F.CSR):
    spgemm = nt.Statement(nt.Access("C", ("i", "j")), nt.Mul(nt.Access("A", ("i", "k")), nt.Access("B", ("k", "j"))))
    module = compile_program(nt.Program((spgemm,)), {t: Operand(t, fmt, 2, "float64") for t in "ABC"})
    return module.meta["plan"][0], CpuEmitter().emit(module)


def test_chunk_borders_balance_the_products_of_each_row():
    """One chunk per thread; the pre-pass adds nnz(B[k, :]) over A[i, :] per row, in parallel,
    and the borders come from a binary search of the running sum; one chunk skips it."""
    plan, src = spgemm_source()
    assert plan.rows == "i" and plan.workspace == "j"
    assert wsp.CHUNKS_PER_THREAD == 1 and "i_chunks = min(i_rows, n_threads)" in src
    kernel = src.split("def kernel_0_serial")[0]
    assert "if i_chunks > 1:" in kernel
    assert "i_w += np.intp(B_lvl1_pos[np.uintp(k + 1)]) - np.intp(B_lvl1_pos[np.uintp(k)])" in kernel
    assert kernel.count("prange(") == 2            # the pre-pass and the chunks
    assert "i_work[np.uintp(i_r + 1)] += i_work[np.uintp(i_r)]" in kernel
    assert "while i_lo < i_hi:" in kernel
    assert "for i in range(i_border[np.uintp(i_chunk)], i_border[np.uintp(i_chunk + 1)]):" in kernel


def test_long_rows_are_not_library_sorted_first():
    """A row longer than SHORT: read off the marks when dense in its span, else bucketed, with the
    library sort only for a bucket fuller than BIN."""
    _, src = spgemm_source()
    assert f"if ws_j_n <= {wsp.SHORT}:" in src
    assert f"if ws_j_max - ws_j_min < ws_j_n * {wsp.DENSE}:" in src
    assert f"if ws_j_fullest <= {wsp.BIN}:" in src
    assert src.index("ws_j_spare[0:ws_j_n].sort()") > src.index("ws_j_fullest")


# -- skewed rows against SciPy --------------------------------------------------------------------
@pytest.mark.parametrize("n", THREADS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_one_heavy_row_and_empty_rows(fmt, n, threads):
    threads(n)
    rng = np.random.default_rng(n)
    a = skewed(rng, 40, 30, heavy_rows=(7,), empty_rows=(0, 1, 2, 20, 39))
    b = skewed(rng, 30, 36, heavy_rows=(3, 29), empty_rows=(0, 15))
    check_product(a, b, fmt)


@pytest.mark.parametrize("n", THREADS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_heavy_rows_of_b_skew_the_products_not_the_entries(fmt, n, threads):
    """Every row of A has two entries; the first rows' point at the full rows of B (the products,
    not A's entries, are skewed)."""
    threads(n)
    rng = np.random.default_rng(10 + n)
    a = skewed(rng, 32, 24)
    a[:4] = 0
    a[:4, :2] = 1.0
    b = skewed(rng, 24, 50, heavy_rows=(0, 1))
    check_product(a, b, fmt)


@pytest.mark.parametrize("shape_a, shape_b", [((3, 5), (5, 4)), ((1, 9), (9, 7)), ((2, 3), (3, 1)),
                                              ((0, 4), (4, 3)), ((4, 0), (0, 3)), ((3, 4), (4, 0))],
                         ids=["3-rows", "1xn", "nx1", "0-rows", "0-inner", "0-cols"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_fewer_rows_than_chunks(fmt, shape_a, shape_b, threads):
    threads(64)
    rng = np.random.default_rng(sum(shape_a) + sum(shape_b))
    a = skewed(rng, *shape_a, per_row=2) if 0 not in shape_a else np.zeros(shape_a)
    b = skewed(rng, *shape_b, per_row=2) if 0 not in shape_b else np.zeros(shape_b)
    check_product(a, b, fmt)


@pytest.mark.parametrize("n", [1, 3])
def test_all_zero_operand(n, threads):
    threads(n)
    a, b = np.zeros((12, 8)), skewed(np.random.default_rng(3), 8, 9)
    check_product(a, b, F.CSR)
    check_product(b.T.copy(), np.zeros((8, 5)), F.CSR)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_long_rows_each_way_of_sorting(n, threads):
    """Output rows longer than SHORT, in every branch of the sort: dense in their span (read off
    the marks), spread (buckets, insertion-sorted), clustered with one far column (a bucket
    fuller than BIN: the library sort); their first touches arrive out of order."""
    threads(n)
    rng = np.random.default_rng(n)
    cols = 20_000
    b = np.zeros((6, cols))
    b[0, 100:300] = rng.uniform(0.5, 1.5, 200)                                 # dense span
    b[1, rng.choice(cols, 300, replace=False)] = rng.uniform(0.5, 1.5, 300)    # spread
    b[2, :120] = rng.uniform(0.5, 1.5, 120)                                     # clustered ...
    b[2, cols - 1] = 1.0                                                        # ... and one far
    b[3, 250:50:-3] = 1.0
    b[4, rng.choice(cols, 60, replace=False)] = 2.0
    a = np.zeros((7, 6))
    a[0, 0] = a[1, 1] = a[2, 2] = 1.0
    a[3, [0, 3]] = [1.0, -1.0]               # dense span, columns touched twice, out of order
    a[4, [4, 1, 0]] = [1.0, 2.0, 3.0]        # spread and dense rows merged
    a[5, [2, 4]] = [1.0, 1.0]
    a[6] = 1.0                               # everything
    for fmt in (F.CSR, F.COO(2)):
        check_product(a, b, fmt)


@pytest.mark.parametrize("dtype", [np.int64, np.complex128, np.float32], ids=str)
def test_balanced_chunks_other_dtypes(dtype, threads):
    threads(3)
    rng = np.random.default_rng(5)
    a = (skewed(rng, 30, 20, heavy_rows=(0, 29), empty_rows=(10,)) * 4).astype(dtype)
    b = (skewed(rng, 20, 80, heavy_rows=(5,)) * 4).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * a[::-1]
    A, B = ustc.Tensor.from_dense(a, F.CSR), ustc.Tensor.from_dense(b, F.CSR)
    C = ustc.Matmul(A, B).plan().execute()
    assert C.dtype == np.dtype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(C.to_dense(), a @ b, rtol=tol, atol=tol)


# -- routes: one conversion for A @ A, DIA through CSR ------------------------------------------
def test_a_at_a_converts_the_shared_operand_once(monkeypatch):
    rng = np.random.default_rng(1)
    a = skewed(rng, 30, 30, heavy_rows=(4,), empty_rows=(9,))
    X = ustc.Tensor.from_dense(a, F.COO(2))
    converted = []
    convert = fastpaths_rows.to_csr

    def counting(x, *args, **kwargs):
        converted.append(x is X)
        return convert(x, *args, **kwargs)

    with ustc.Matmul(X, X) as mm:
        mm.plan()
        assert "a = b (COO) once" in mm.plan_info, mm.plan_info
        monkeypatch.setattr(fastpaths_rows, "to_csr", counting)
        C = mm.execute()
        assert converted.count(True) == 1
        np.testing.assert_allclose(C.to_dense(), a @ a, rtol=1e-12, atol=1e-12)
        X.values[...] *= 3        # changed in place: seen at the next execute
        np.testing.assert_allclose(mm.execute().to_dense(), 9 * (a @ a), rtol=1e-12, atol=1e-12)


def test_dia_products_stay_diagonal():
    """DIAI's own generated kernel converts both operands to DCSR at every execute and runs
    serially: DIA x DIA takes the diagonal-by-diagonal product instead, no conversion."""
    rng = np.random.default_rng(2)
    a = skewed(rng, 25, 25, heavy_rows=(3,))
    D = ustc.Tensor.from_dense(a, F.DIAI)
    with ustc.Matmul(D, D) as mm:
        mm.plan()
        assert "DIA product diagonal by diagonal" in mm.plan_info, mm.plan_info
        C = mm.execute()
        assert C.format == D.format
        np.testing.assert_allclose(C.to_dense(), a @ a, rtol=1e-12, atol=1e-12)
