"""Work-balanced row chunks of dense-output kernels (SpMV, SpMM: ``codegen.workspace.balanced_rows``).

Where the lowering's cost pass finds that a row's work is one stored segment under the row's own
position, segments back to back (CSR, BSR, delta), the parallel row loop runs as one chunk per
thread whose borders come from a binary search of ``pos[r] + r``; elsewhere it stays a plain
``prange``. Checked against SciPy on heavy-tailed rows (heavy rows clustered at the top, one full
row at the end, empty rows), fewer rows than chunks, 0 x n, 1 x n and n x 1, for every 2-D registry
format and several thread counts (the host's count is patched, so a 2-core machine runs 64
chunks too)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from op_helpers import NAMED_2D, named_params, structured_fit
from ustc import formats as F
from ustc.codegen import notation as nt
from ustc.codegen import workspace as wsp
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.roles import Role
from ustc.codegen.emit_cpu import CpuEmitter
from ustc.ops import runtime

THREADS = [1, 2, 3, 64]


@pytest.fixture
def threads(monkeypatch):
    """Run the parallel kernel at any size with the host's thread count set to ``n``."""
    def use(n: int) -> None:
        monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
        monkeypatch.setattr(runtime, "_threads", lambda: n)
    return use


def heavy_tailed(rng, rows: int, cols: int) -> np.ndarray:
    """Rows sorted by length, longest first (a power-law graph ordered by degree: Numba's equal
    blocks of rows would give the first thread most of the entries), one full row at the end and
    a few empty rows."""
    lengths = np.minimum(cols, (cols / np.arange(1, rows + 1) ** 1.2).astype(int) + 1)
    x = np.zeros((rows, cols))
    for r, k in enumerate(lengths):
        x[r, rng.choice(cols, size=k, replace=False)] = rng.uniform(0.5, 1.5, k)
    x[rows - 1] = rng.uniform(-1.5, -0.5, cols)
    x[[3, rows // 2, rows - 2]] = 0
    return x


def check_spmv(a: np.ndarray, fmt, k: int | None = None) -> None:
    """``Matmul(A, x)`` (``k``: a dense ``B`` of ``k`` columns) equals SciPy's product, twice (values
    changed in between), and one-shot ``ustc.matmul`` too."""
    a = structured_fit(a, fmt)
    rng = np.random.default_rng(a.shape[0])
    x = rng.uniform(-1, 1, a.shape[1] if k is None else (a.shape[1], k))
    A = ustc.Tensor.from_dense(a, fmt)
    expected = sp.csr_array(a) @ x
    with ustc.Matmul(A, x) as mm:
        mm.plan()
        np.testing.assert_allclose(mm.execute(), expected, rtol=1e-12, atol=1e-12)
        A.values[...] *= -2
        np.testing.assert_allclose(mm.execute(), -2 * expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ustc.matmul(A, x), -2 * expected, rtol=1e-12, atol=1e-12)


def spmv_source(fmt):
    """The plan and source of ``y[i] = A[i, j] * x[j]`` with ``A`` in ``fmt``."""
    stmt = nt.Statement(nt.Access("y", ("i",)), nt.Mul(nt.Access("A", ("i", "j")), nt.Access("x", ("j",))))
    ops = {"y": Operand("y", None, 1, "float64"), "A": Operand("A", fmt, 2, "float64"),
           "x": Operand("x", None, 1, "float64")}
    module = compile_program(nt.Program((stmt,)), ops)
    return module.meta["plan"][0], CpuEmitter().emit(module)


# -- the kernel ---------------------------------------------------------------------------------
def test_csr_rows_split_by_stored_work_without_a_pre_pass():
    """CSR: one chunk per thread, borders from a binary search of pos[r] + r; the row loop still
    overwrites y (no zero fill), and nothing but the chunks runs in parallel."""
    plan, src = spmv_source(F.CSR)
    kernel = src.split("def kernel_0_serial")[0]
    assert Role.of("threads") in plan.params and plan.overwrites
    assert wsp.CHUNKS_PER_THREAD == 1 and "i_chunks = min(i_rows, n_threads)" in kernel
    assert "if np.intp(A_lvl1_pos[np.uintp(i_mid)]) + i_mid < i_goal:" in kernel
    assert kernel.count("prange(") == 1 and "for i_chunk_u in prange(i_chunks):" in kernel
    assert "for i in range(i_border[np.uintp(i_chunk)], i_border[np.uintp(i_chunk + 1)]):" in kernel
    assert "y[np.uintp(i)] = acc" in kernel


@pytest.mark.parametrize("fmt, balanced", [(F.CSR, True), (F.BSR(2, 2), True), (F.DELTA(4), True),
                                           (F.CSC, False), (F.DIAI, False), (F.Dense(2), False),
                                           (ustc.TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)"),
                                            False)],
                         ids=["CSR", "BSR", "DELTA", "CSC", "DIAI", "Dense", "loose"])
def test_balanced_only_where_the_rows_work_is_stored(fmt, balanced):
    """Balanced where a row's work is one back-to-back stored segment under the row; CSC scatters
    into y (no parallel rows), DIAI's rows sit inside its diagonals, a dense row's work is its
    extent, a loose_compressed level stores (start, end) pairs (segments not back to back)."""
    plan, src = spmv_source(fmt)
    assert (Role.of("threads") in plan.params) == balanced, src
    assert ("_border[" in src) == balanced


# -- skewed rows against SciPy --------------------------------------------------------------------
@pytest.mark.parametrize("n", THREADS)
@pytest.mark.parametrize("fmt", named_params(NAMED_2D))
def test_heavy_tailed_rows(fmt, n, threads):
    threads(n)
    a = heavy_tailed(np.random.default_rng(n), 48, 40)
    check_spmv(a, fmt)


@pytest.mark.parametrize("n", [1, 3, 64])
@pytest.mark.parametrize("fmt", named_params({k: NAMED_2D[k] for k in ("CSR", "BSR", "DELTA", "DCSR", "COO")}))
def test_heavy_tailed_rows_spmm(fmt, n, threads):
    threads(n)
    a = heavy_tailed(np.random.default_rng(10 + n), 40, 33)
    check_spmv(a, fmt, k=3)


@pytest.mark.parametrize("shape", [(0, 5), (1, 9), (9, 1), (2, 3), (5, 0)], ids=["0xn", "1xn", "nx1", "2x3", "nx0"])
@pytest.mark.parametrize("fmt", named_params({k: NAMED_2D[k] for k in ("CSR", "BSR", "DELTA", "CSC")}))
def test_fewer_rows_than_chunks(fmt, shape, threads):
    threads(64)
    rng = np.random.default_rng(sum(shape))
    a = rng.uniform(0.5, 1.5, shape) * (rng.random(shape) < 0.6)
    check_spmv(a, fmt)


@pytest.mark.parametrize("n", [2, 5])
def test_all_work_in_one_row(n, threads):
    """Every chunk border lands on the one heavy row or past it: empty chunks are fine."""
    threads(n)
    for r in (0, 17, 29):
        a = np.zeros((30, 50))
        a[r] = np.linspace(1, 2, 50)
        check_spmv(a, F.CSR)
    check_spmv(np.zeros((30, 50)), F.CSR)


# -- the one-shot fast path binds the thread count -----------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 64])
def test_one_shot_repeat_calls_the_balanced_kernel_directly(n, threads, monkeypatch):
    """``ustc.matmul(A, x)`` repeated: the remembered DirectCall passes the thread count (1 to the
    serial twin) and runs without preparing a Run again."""
    from ustc.ops import matmul as one_shot

    threads(n)
    a = heavy_tailed(np.random.default_rng(n), 64, 50)
    A = ustc.Tensor.from_dense(a, F.CSR)
    x = np.linspace(-1, 1, 50)
    np.testing.assert_allclose(ustc.matmul(A, x), a @ x, rtol=1e-12, atol=1e-12)
    repeat = one_shot._REPEATS[id(A._layout)]
    assert ("threads",) in repeat.call.roles

    def no_run(*args, **kwargs):
        raise AssertionError("the one-shot repeat prepared a Run")

    monkeypatch.setattr(runtime, "prepare", no_run)
    for k in range(2):
        A.values[...] *= -1
        np.testing.assert_allclose(ustc.matmul(A, x), A.to_dense() @ x, rtol=1e-12, atol=1e-12)
