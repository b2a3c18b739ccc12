"""Reductions into sparse outputs through a workspace (``codegen.workspace``) and the leapfrog
intersection: SpGEMM-shaped einsums over every 2-D registry format against a dense NumPy
oracle, semirings, cancellations, edge shapes; and Matmul's SpGEMM routes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from op_helpers import (NAMED_2D, assert_matches, assert_unchanged, named_params, rotated_dtypes, seed_of, snapshot,
                        sparse, subset_2d)
from ustc import formats as F
from ustc.codegen import notation as nt
from ustc.codegen import workspace as wsp
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.emit_cpu import CpuEmitter

FORMATS = named_params(NAMED_2D)
SHAPES = [((5, 6), (6, 4)), ((1, 7), (7, 3)), ((6, 1), (1, 5)), ((0, 4), (4, 3)), ((4, 0), (0, 3)),
          ((5, 3), (3, 0))]
SHAPE_IDS = ["5x6@6x4", "1x7@7x3", "6x1@1x5", "0x4@4x3", "4x0@0x3", "5x3@3x0"]


# -- where a workspace goes (a pure function of the loop order) ------------------------------
@pytest.mark.parametrize("lhs, order, expected", [
    (("i", "j"), ("i", "k", "j"), ("j", 1)),      # SpGEMM, row by row
    (("i", "j"), ("j", "k", "i"), ("i", 1)),      # column by column (CSC)
    (("i", "j"), ("i", "j", "k"), None),          # inner products: the register reduces
    (("i", "j"), ("i", "j"), None),               # no reduction
    (("i", "j"), ("k", "i", "j"), None),          # the reduction outermost: rows repeat
    (("j",), ("k", "j"), ("j", 0)),               # a sparse vector x^T A
    (("i", "j", "l"), ("i", "k", "j", "l"), None),  # two indices after the reduction
])
def test_placement_follows_the_loop_order(lhs, order, expected):
    assert wsp.placement(lhs, order, {}) == expected


def test_placement_skips_derived_output_indices():
    assert wsp.placement(("i", "j"), ("i", "k", "j"), {"j": object()}) is None


# -- einsum reductions into every sparse format ------------------------------------------------
@pytest.mark.parametrize("shapes", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_spgemm_einsum_into_the_operands_format(fmt, shapes):
    seed = seed_of("ws-spgemm", fmt, shapes)
    A, B = sparse(fmt, shapes[0], seed=seed), sparse(fmt, shapes[1], seed=seed + 1)
    before = snapshot(A, B)
    out = fmt if all(lv.type.any_pattern for lv in fmt.levels) else F.CSR  # n:m holds no product
    C = ustc.einsum("ik,kj->ij", A, B, out_format=out)
    assert C.format == out
    C.validate()
    assert_matches(C, A.to_dense() @ B.to_dense())
    assert_unchanged([A, B], before)


@pytest.mark.parametrize("fmt, dtype", rotated_dtypes(("CSR", "CSC", "COO", "DCSR", "DCSC", "DIAI", "BSR")))
def test_spgemm_einsum_dtypes(fmt, dtype):
    """float64 (the kernel of test_spgemm_einsum_into_the_operands_format) and one other dtype per
    format, rotated: each of float32, int64, complex128 on two or three of these formats."""
    for dtype in (np.float64, dtype):
        seed = seed_of("ws-dtype", fmt, dtype)
        A = sparse(fmt, (7, 9), seed=seed, dtype=dtype)
        B = sparse(fmt, (9, 6), seed=seed + 1, dtype=dtype)
        C = ustc.einsum("ik,kj->ij", A, B, out_format=fmt)
        assert C.dtype == dtype
        assert_matches(C, A.to_dense() @ B.to_dense())


# A (times a CSR B) into another format: every row-major A (CSR, DCSR, COO) into one row-major and
# one column-major output, the column-major A (CSC) into every output, so each output is written
# from a row-major and a column-major A (each pair is a kernel; the full 4 x 5 product repeated them).
ACROSS = [("CSR", "CSR"), ("CSR", "DCSC"), ("DCSR", "COO"), ("DCSR", "CSC"), ("COO", "DCSR"), ("COO", "DCSC"),
          ("CSC", "CSR"), ("CSC", "CSC"), ("CSC", "COO"), ("CSC", "DCSR"), ("CSC", "DCSC")]


@pytest.mark.parametrize("fmt, out", [pytest.param(NAMED_2D[a], NAMED_2D[o], id=f"{a}-{o}") for a, o in ACROSS])
def test_spgemm_einsum_across_formats(fmt, out):
    seed = seed_of("ws-across", fmt, out)
    A, B = sparse(fmt, (8, 8), seed=seed, density=0.3), sparse(F.CSR, (8, 5), seed=seed + 1, density=0.3)
    C = ustc.einsum("ik,kj->ij", A, B, out_format=out)
    assert C.format == out
    C.validate()
    assert_matches(C, A.to_dense() @ B.to_dense())


def test_all_zero_and_cancelling_products_store_no_entries():
    a = np.array([[1.0, 1.0], [0.0, 0.0]])
    b = np.array([[2.0, 3.0], [-2.0, 0.0]])  # row 0 of a @ b: (0, 3)
    for fmt in (F.CSR, F.DCSR, F.COO(2)):
        A, B = ustc.Tensor.from_dense(a, fmt), ustc.Tensor.from_dense(b, fmt)
        C = ustc.einsum("ik,kj->ij", A, B, out_format=fmt)
        assert_matches(C, a @ b)
        Z = ustc.einsum("ik,kj->ij", ustc.Tensor.from_dense(np.zeros((3, 4)), fmt),
                        ustc.Tensor.from_dense(np.ones((4, 2)), fmt), out_format=fmt)
        assert Z.nse == 0 and Z.shape == (3, 2)


@pytest.mark.parametrize("fmt", subset_2d("CSR", "DCSR", "COO"))
def test_min_plus_product_through_the_workspace(fmt):
    """A semiring reduction folds in the workspace with its own ⊕ (a 0 distance is an entry)."""
    rng = np.random.default_rng(5)
    n = 12
    w = np.where(rng.random((n, n)) < 0.3, rng.integers(1, 9, (n, n)).astype(float), np.inf)
    A = ustc.Tensor.from_coo(np.nonzero(np.isfinite(w)), w[np.isfinite(w)], (n, n), fmt)
    C = ustc.einsum("ik,kj->ij", A, A, out_format=fmt, semiring="min_plus")
    expected = np.min(w[:, :, None] + w[None, :, :], axis=1)
    got = np.full((n, n), np.inf)
    coords, values = C.entries()
    got[coords[0], coords[1]] = values
    np.testing.assert_array_equal(got, expected)


def test_sparse_vector_times_matrix_into_a_sparse_vector():
    """y[j] = x[k] A[k, j] with y sparse: one workspace for the whole output."""
    rng = np.random.default_rng(3)
    a = np.where(rng.random((9, 11)) < 0.3, rng.standard_normal((9, 11)), 0)
    x = np.where(rng.random(9) < 0.5, rng.standard_normal(9), 0)
    vec = ustc.parse("(i) -> (i : compressed)")
    X, A = ustc.Tensor.from_dense(x, vec), ustc.Tensor.from_dense(a, F.CSR)
    y = ustc.einsum("k,kj->j", X, A, out_format=vec)
    assert_matches(y, x @ a)


def test_long_intersections_leapfrog_and_stay_exact():
    """A short row of A against all of B's rows (DCSR): the k loop gallops; rows far apart."""
    n = 50_000
    rows = np.arange(0, n, 7)
    a = sp.csr_array((np.ones(len(rows)), (rows, (rows * 13) % n)), shape=(n, n))
    b = sp.random_array((n, n), density=2e-4, random_state=np.random.default_rng(1), format="csr")
    A = ustc.Tensor.from_package(a).convert(F.DCSR)
    B = ustc.Tensor.from_package(b).convert(F.DCSR)
    C = ustc.einsum("ik,kj->ij", A, B, out_format=F.DCSR)
    expected = (a @ b).tocoo()
    coords, values = C.entries()
    got = sp.coo_array((values, coords), shape=(n, n)).tocsr()
    assert abs(got - expected.tocsr()).max() < 1e-12
    P = A * B  # element-wise: the j loop intersects two rows the same way
    assert abs(sp.coo_array((P.entries()[1], P.entries()[0]), shape=(n, n)).tocsr() - a.multiply(b)).max() == 0


def test_generated_spgemm_source_has_a_workspace_and_no_coordinate_lists():
    spgemm = nt.Statement(nt.Access("C", ("i", "j")), nt.Mul(nt.Access("A", ("i", "k")), nt.Access("B", ("k", "j"))))
    operands = {t: Operand(t, F.CSR, 2, "float64") for t in "ABC"}
    module = compile_program(nt.Program((spgemm,)), operands)
    plan = module.meta["plan"][0]
    assert plan.workspace == "j" and plan.rows == "i"
    src = CpuEmitter().emit(module)
    assert "ws_j_mark" in src and "prange" in src


# -- Matmul's SpGEMM routes ------------------------------------------------------------------
# Matmul's SpGEMM in every registry format (the generated kernel, or DIA / BSR's own products, values
# changed in place seen at the next execute) is tests/matmul/test_products.py's
# test_spgemm_in_every_named_format: the same kernels, the same checks.


def test_matmul_spgemm_routes_are_chosen_from_the_plan():
    A = ustc.Tensor.from_package(sp.random_array((40, 40), density=0.1, random_state=np.random.default_rng(2),
                                                 format="csr"))
    with ustc.Matmul(A, A) as mm:
        mm.plan()
        assert "workspace" in mm.plan_info
    D = A.convert(F.DCSR)   # DCSR converts to CSR in O(nnz) in parallel: the row-parallel CSR kernel
    with ustc.Matmul(D, D) as mm:
        mm.plan()
        assert "row-parallel CSR" in mm.plan_info and "DCSR" in mm.plan_info, mm.plan_info
        assert mm.execute().format == D.format
    with ustc.Matmul(D, D, options={"route": "generated"}) as mm:  # the serial workspace kernel in DCSR
        mm.plan()
        assert mm.plan_info.startswith("generated: cpu") and "row-parallel" not in mm.plan_info, mm.plan_info
        assert_matches(mm.execute(), D.to_dense() @ D.to_dense())
    C = A.convert(F.COO(2))  # COO converts to CSR in O(nnz): the row-parallel CSR kernel
    with ustc.Matmul(C, C) as mm:
        mm.plan()
        assert "row-parallel CSR" in mm.plan_info and "COO" in mm.plan_info, mm.plan_info
        assert mm.execute().format == C.format
    B = A.convert(F.BSR(2, 2))  # BSR x BSR into BSR: the block product, no conversion
    with ustc.Matmul(B, B) as mm:
        mm.plan()
        assert "BSR product" in mm.plan_info, mm.plan_info
    with ustc.Matmul(B, B, options={"out_format": F.CSR}) as mm:  # derived indices take no workspace: through CSR
        mm.plan()
        assert "row-parallel CSR" in mm.plan_info, mm.plan_info
        assert_matches(mm.execute(), B.to_dense() @ B.to_dense())
