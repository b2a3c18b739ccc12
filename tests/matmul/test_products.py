"""ustc.matmul / ustc.Matmul against NumPy on random data, over the format registry."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc.tensor import fastpaths_rows
from matmul_helpers import named_2d, random_dense, sparse, tol

SHAPES = [(7, 5), (1, 9), (9, 1), (0, 4), (4, 0), (6, 6)]


@pytest.mark.parametrize("fmt", named_2d())
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_spmv_spmm_every_named_format(fmt, shape, rng):
    a = random_dense(rng, shape)
    A = sparse(a, fmt)
    a = A.to_dense()                       # n:m formats pruned the data
    x, X = rng.standard_normal(shape[1]), rng.standard_normal((shape[1], 3))
    np.testing.assert_allclose(ustc.matmul(A, x), a @ x, **tol(a.dtype))
    np.testing.assert_allclose(ustc.matmul(A, X), a @ X, **tol(a.dtype))
    z = rng.standard_normal(shape[0])
    np.testing.assert_allclose(ustc.matmul(z, A), z @ a, **tol(a.dtype))
    np.testing.assert_allclose(ustc.matmul(A, z, transpose_a=True), a.T @ z, **tol(a.dtype))


@pytest.mark.parametrize("fmt", named_2d())
def test_all_zero_operand(fmt, rng):
    A = sparse(np.zeros((5, 8)), fmt)
    np.testing.assert_array_equal(ustc.matmul(A, rng.standard_normal(8)), np.zeros(5))


# SpMV (and the operand's conversion) compiles per format and dtype: CSR takes every dtype; DIAI and
# DELTA(4, packed) a float dtype (their hand-written kernels, _dia / _delta) and int64 (the generated
# kernel); COO and BSR(2, 2) one other dtype each. float64 of the registry formats (DIAI, COO,
# BSR(2, 2)) is test_spmv_spmm_every_named_format's; DELTA(4, packed) is not a registry format.
DTYPE_CASES = [("CSR", np.float32), ("CSR", np.complex128), ("CSR", np.int64), ("DIAI", np.complex128),
               ("DIAI", np.int64), ("DELTA(4, packed)", np.float64), ("DELTA(4, packed)", np.int64),
               ("COO", np.complex128), ("BSR(2, 2)", np.float32)]


@pytest.mark.parametrize("fmt, dtype", DTYPE_CASES, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_dtypes(fmt, dtype, rng):
    a = (random_dense(rng, (10, 12), dtype=np.complex128 if dtype == np.complex128 else np.float64) * 4)
    a = a.astype(dtype)
    x = (rng.standard_normal(12) * 3).astype(dtype)
    A = ustc.Tensor.from_dense(a, fmt)
    y = ustc.matmul(A, x)
    assert y.dtype == np.result_type(a.dtype, x.dtype)
    np.testing.assert_allclose(y, a @ x, **tol(dtype))


def test_alpha_beta_c_and_out(rng):
    a = random_dense(rng, (6, 4))
    A = ustc.Tensor.from_dense(a, "CSR")
    x, c = rng.standard_normal(4), rng.standard_normal(6)
    c0 = c.copy()
    out = np.empty(6)
    got = ustc.matmul(A, x, c, alpha=2.5, beta=-0.5, out=out)  # with out=, c is only read
    assert got is out
    np.testing.assert_allclose(out, 2.5 * a @ x - 0.5 * c0)
    np.testing.assert_array_equal(c, c0)
    got = ustc.matmul(A, x, c, alpha=1, beta=2)                # without, c is updated in place
    assert got is c
    np.testing.assert_allclose(c, a @ x + 2 * c0)
    np.testing.assert_allclose(ustc.matmul(A, x, c0, beta=0), a @ x)


def test_dot_and_dense_dense(rng):
    x, y = rng.standard_normal(5), rng.standard_normal(5)
    assert ustc.matmul(x, y) == pytest.approx(x @ y)
    X, Y = rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    mm = ustc.Matmul(X, Y).plan()
    assert mm.plan_info.startswith("library: dense matmul")
    np.testing.assert_allclose(mm.execute(), X @ Y)


def test_row_vector_times_column(rng):
    v = random_dense(rng, (1, 9), density=0.6)
    V = ustc.Tensor.from_dense(v, "CSR")
    w = rng.standard_normal((9, 1))
    np.testing.assert_allclose(ustc.matmul(V, w), v @ w)


@pytest.mark.parametrize("fa", ["CSR", "CSC", "COO", "DCSR", "BSR(2, 2)", "DIAI"])
@pytest.mark.parametrize("fb", ["CSR", "CSC", "COO"])
def test_spgemm_mixed_formats(fa, fb, rng):
    a, b = random_dense(rng, (8, 6)), random_dense(rng, (6, 10))
    A, B = ustc.Tensor.from_dense(a, fa), ustc.Tensor.from_dense(b, fb)
    C = ustc.matmul(A, B)
    assert isinstance(C, ustc.Tensor)
    np.testing.assert_allclose(C.to_dense(), a @ b, atol=1e-12)
    C.validate()
    C2 = ustc.matmul(A, B, alpha=-2.0, options={"out_format": "COO"})
    assert C2.format == ustc.TensorFormat.parse("COO")
    np.testing.assert_allclose(C2.to_dense(), -2 * a @ b, atol=1e-12)


def test_spgemm_with_sparse_c(rng):
    a, b, c = random_dense(rng, (5, 5)), random_dense(rng, (5, 5)), random_dense(rng, (5, 5))
    A, B, C = (ustc.Tensor.from_dense(m, "CSR") for m in (a, b, c))
    np.testing.assert_allclose(ustc.matmul(A, B, C, beta=3.0).to_dense(), a @ b + 3 * c, atol=1e-12)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_transposes(ta, tb, rng):
    a, b = random_dense(rng, (5, 7)), rng.standard_normal((7, 3))
    A = ustc.Tensor.from_dense(a.T if ta else a, "CSR")
    B = b.T.copy() if tb else b
    np.testing.assert_allclose(ustc.matmul(A, B, transpose_a=ta, transpose_b=tb), a @ b)
    Bs = ustc.Tensor.from_dense(B, "CSC")
    got = ustc.matmul(A, Bs, transpose_a=ta, transpose_b=tb)
    np.testing.assert_allclose(got.to_dense(), a @ b, atol=1e-12)


def test_batched(rng):
    a = random_dense(rng, (3, 4, 5))
    A = ustc.Tensor.from_dense(a, "BatchedCSR")
    B3, B2 = rng.standard_normal((3, 5, 2)), rng.standard_normal((5, 2))
    np.testing.assert_allclose(ustc.matmul(A, B3), a @ B3)
    np.testing.assert_allclose(ustc.matmul(A, B2), a @ B2)        # b broadcast over the batch
    S = ustc.Tensor.from_dense(a[0], "CSR")
    np.testing.assert_allclose(ustc.matmul(S, rng.standard_normal((3, 5, 2)) * 0 + B3), a[0] @ B3)
    with pytest.raises(ustc.ShapeError, match="batch shapes differ"):
        ustc.matmul(A, rng.standard_normal((2, 5, 2)))


def test_sparse_right_operand_dense_left(rng):
    b = random_dense(rng, (6, 4))
    B = ustc.Tensor.from_dense(b, "CSC")
    X = rng.standard_normal((3, 6))
    np.testing.assert_allclose(ustc.matmul(X, B), X @ b)


def test_inputs_not_mutated(rng):
    a = random_dense(rng, (6, 6))
    A = ustc.Tensor.from_dense(a, "COO")
    before = {k: v.copy() for k, v in A.buffers.items()}
    vals = A.values.copy()
    x = rng.standard_normal(6)
    x0 = x.copy()
    ustc.matmul(A, x, alpha=3)
    ustc.matmul(A, A)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(A.values, vals)
    for k, v in A.buffers.items():
        np.testing.assert_array_equal(v, before[k])


def test_errors_name_the_operand(rng):
    A = ustc.Tensor.from_dense(random_dense(rng, (4, 5)), "CSR")
    with pytest.raises(ustc.ShapeError, match="a has 5 columns but b has 4 rows"):
        ustc.matmul(A, np.ones(4))
    with pytest.raises(ustc.ShapeError, match="c has shape"):
        ustc.matmul(A, np.ones(5), np.ones(3), beta=1)
    with pytest.raises(ustc.ShapeError, match=r"operand b is a scalar"):
        ustc.matmul(A, np.ones(()))
    with pytest.raises(ustc.ShapeError, match="transpose_b needs a matrix"):
        ustc.matmul(A, np.ones(5), transpose_b=True)
    with pytest.raises(ustc.UstcError, match="unknown option 'rout'"):
        ustc.matmul(A, np.ones(5), options={"rout": "generated"})
    with pytest.raises(ustc.UstcError, match="alpha and beta must be numbers"):
        ustc.matmul(A, np.ones(5), alpha="2")
    with pytest.raises(ustc.ShapeError, match="out has shape"):
        ustc.matmul(A, np.ones(5), out=np.zeros(3))


def test_mixed_devices_name_both(rng):
    A = ustc.Tensor.from_dense(random_dense(rng, (4, 5)), "CSR")
    G = ustc.Tensor(A.format, A.shape, A.buffers, A.values, device="cuda", package="cupy")
    with pytest.raises(ustc.DeviceError, match="a on cuda, b on cpu"):
        ustc.matmul(G, np.ones(5))


def test_torch_operands_come_back_as_torch(rng):
    torch = pytest.importorskip("torch")
    a = random_dense(rng, (5, 4))
    A = ustc.Tensor.from_dense(a, "CSR")
    x = torch.randn(4, dtype=torch.float64)
    y = ustc.matmul(A, x)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), a @ x.numpy())
    S = torch.from_numpy(a).to_sparse_csr()
    np.testing.assert_allclose(np.asarray(ustc.matmul(S, x)), a @ x.numpy())


def test_scipy_operand_zero_copy(rng):
    sp = pytest.importorskip("scipy.sparse")
    s = sp.random(20, 30, density=0.2, random_state=3, format="csr")
    x = rng.standard_normal(30)
    np.testing.assert_allclose(ustc.matmul(s, x), s @ x)


@pytest.mark.parametrize("fmt", ["BSR(1, 1)", "BSR(1, 3)", "BSC(1, 2)", "BSR(3, 1)"])
def test_unit_blocks(fmt, rng):
    """Blocks of one row or column: guards like ``max(0, -i)`` on a prange index (Numba types it unsigned,
    so the emitter binds a signed copy)."""
    a = random_dense(rng, (7, 9), density=0.5)
    A = ustc.Tensor.from_dense(a, fmt)
    x, z = rng.standard_normal(9), rng.standard_normal(7)
    np.testing.assert_allclose(ustc.matmul(A, x), a @ x)
    np.testing.assert_allclose(ustc.matmul(z, A), z @ a)


@pytest.mark.parametrize("fmt", named_2d())
def test_spgemm_in_every_named_format(fmt, rng):
    """Both operands in one registry format: the generated SpGEMM, in their own formats where
    that kernel is row-parallel, else after converting to CSR; values changed in place are seen
    at the next execute."""
    a, b = random_dense(rng, (9, 12), 0.3), random_dense(rng, (12, 7), 0.3)
    A, B = sparse(a, fmt), sparse(b, fmt)
    a, b = np.array(A.to_dense()), np.array(B.to_dense())  # what n:m pruning kept (copies: Dense shares)
    with ustc.Matmul(A, B) as mm:
        mm.plan()
        dense = all(lv.type.locate for lv in fmt.levels)   # Dense(2) operands are dense operands
        kind = fastpaths_rows.source_kind(fmt, A.level_shape)  # DIA x DIA, BSR x BSR: their own products
        own = {"diai": "built-in kernel: DIA", "diaj": "built-in kernel: DIA", "bsr": "built-in kernel: BSR"}
        assert mm.plan_info.startswith("library: dense" if dense else own.get(kind, "generated")), mm.plan_info
        C = mm.execute()
        C = C.to_dense() if isinstance(C, ustc.Tensor) else C
        np.testing.assert_allclose(C, a @ b, atol=1e-12)
        if not dense:
            A.values[...] *= -3
            np.testing.assert_allclose(mm.execute().to_dense(), -3 * a @ b, atol=1e-12)


@pytest.mark.parametrize("fmt, via", [("DCSR", True), ("COO", True), ("BSR(1, 1)", False)])
def test_spgemm_generated_edge_shapes(rng, fmt, via):
    """Edge shapes through CSR (DCSR, COO; BSR takes its block product) and, forced, in the
    operands' own kernel (DCSR's workspace kernel)."""
    for shape_a, shape_b in (((0, 4), (4, 3)), ((4, 0), (0, 3)), ((1, 6), (6, 1)), ((5, 5), (5, 5))):
        a, b = random_dense(rng, shape_a, 0.5), np.zeros(shape_b)
        if shape_a == (1, 6):
            b = random_dense(rng, shape_b, 0.9)
        A, B = ustc.Tensor.from_dense(a, fmt), ustc.Tensor.from_dense(b, fmt)
        mm = ustc.Matmul(A, B).plan()
        assert ("to CSR at every execute" in mm.plan_info) == via, mm.plan_info
        C = mm.execute()
        assert C.format == A.format and C.shape == (shape_a[0], shape_b[1])
        np.testing.assert_allclose(C.to_dense(), a @ b)
        own = ustc.Matmul(A, B, options={"route": "generated"}).plan().execute()
        assert own.format == A.format
        np.testing.assert_allclose(own.to_dense(), a @ b)
    forced = ustc.Matmul(A, B, options={"route": "generated"}).plan()
    assert forced.plan_info.startswith("generated")
