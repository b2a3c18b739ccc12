"""A planned SpGEMM executed again keeps its output structure (``routes.KeptStructureRoute``,
``kernels._spgemm_kept``): later executes run only the numeric pass while the operands' structure
is unchanged, reading their current values; any change of structure (in place or new operands)
is detected and recomputed. Oracle: SciPy / NumPy on the operands' current values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.kernels import _spgemm, _spgemm_kept
from ustc.ops import routes, runtime
from matmul_helpers import named_2d, random_dense, sparse, tol


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the kept structure too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


def _kept_route(mm):
    """The :class:`routes.KeptStructureRoute` of a planned Matmul (directly or inside a route
    through CSR), else None."""
    route = mm._route
    for r in (route, getattr(route, "inner", None)):
        if isinstance(r, routes.KeptStructureRoute):
            return r
    return None


def _dense(C):
    return C.to_dense() if isinstance(C, ustc.Tensor) else np.asarray(C)


def _rescale(T, rng):
    """New values in place, zeros (and a padded format's padding) kept zero."""
    T.values[...] *= rng.uniform(0.5, 2.0, T.values.shape).astype(T.values.dtype)


@pytest.mark.parametrize("fmt", named_2d())
def test_values_changed_in_place_between_executes(fmt, rng, every_size):
    a, b = random_dense(rng, (9, 7)), random_dense(rng, (7, 11))
    A, B = sparse(a, fmt), sparse(b, fmt)
    mm = ustc.Matmul(A, B).plan()
    for _ in range(4):
        C = mm.execute()
        np.testing.assert_allclose(_dense(C), A.to_dense() @ B.to_dense(), **tol(np.float64))
        _rescale(A, rng)
        _rescale(B, rng)
    kept = _kept_route(mm)
    if kept is not None:
        assert kept._kept is not None     # kept after the second execute, used by the third and fourth


@pytest.mark.parametrize("fmt", ["CSR", "DCSR", "COO"])
def test_rows_formats_keep_the_structure_of_a_times_a(fmt, rng, every_size):
    A = sparse(random_dense(rng, (30, 30), density=0.2), fmt)
    mm = ustc.Matmul(A, A).plan()
    kept = _kept_route(mm)
    assert kept is not None and "kept output structure" in mm.plan_info, mm.plan_info
    results = [mm.execute() for _ in range(3)]
    assert kept._kept is not None and kept._kept[0].b_pos is None   # a @ a: its structure copied once
    a = A.to_dense()
    for C in results:
        assert C.format == A.format
        np.testing.assert_allclose(C.to_dense(), a @ a, **tol(np.float64))
    # results own their buffers: writing one changes neither the others nor later executes
    last = results[-1].convert("CSR")
    for C in results[:-1]:
        c = C.convert("CSR")
        assert not np.shares_memory(c.crd(1), last.crd(1)) and not np.shares_memory(c.values, last.values)
    results[0].values[...] = 7
    if fmt == "CSR":
        results[0].crd(1)[...] = 0
    np.testing.assert_allclose(mm.execute().to_dense(), a @ a, **tol(np.float64))


def _csr(rows, cols, shape, vals=None):
    vals = np.arange(1.0, len(rows) + 1) if vals is None else vals
    return sp.csr_array((vals, (rows, cols)), shape=shape)


def test_structure_changed_in_place_is_detected(every_size):
    a = _csr([0, 1, 1, 2, 3], [1, 0, 3, 2, 3], (4, 4))
    b = _csr([0, 1, 2, 2, 3, 3], [0, 1, 2, 3, 0, 2], (4, 4))
    A, B = ustc.Tensor.from_package(a), ustc.Tensor.from_package(b)
    mm = ustc.Matmul(A, B).plan()
    for _ in range(3):
        np.testing.assert_allclose(mm.execute().to_dense(), (a @ b).toarray())
    assert _kept_route(mm)._kept is not None
    a.indices[0] = 2                       # row 0's entry moves to column 2 (a column index changed)
    np.testing.assert_allclose(mm.execute().to_dense(), (a @ b).toarray())
    b.indptr[2] = 3                        # b's row 2 gives its first entry to row 1 (row pointers changed)
    np.testing.assert_allclose(mm.execute().to_dense(), (a @ b).toarray())
    np.testing.assert_allclose(mm.execute().to_dense(), (a @ b).toarray())   # kept again, the new structure


def test_reset_operands_of_another_structure(rng, every_size):
    shape = (40, 40)
    A = sparse(random_dense(rng, shape, density=0.1), "CSR")
    mm = ustc.Matmul(A, A).plan()
    for _ in range(3):
        mm.execute()
    for density in (0.1, 0.3):             # a new operand: other buffers, another structure
        A2 = sparse(random_dense(rng, shape, density=density), "CSR")
        mm.reset_operands(a=A2, b=A2)
        for _ in range(3):
            np.testing.assert_allclose(mm.execute().to_dense(), A2.to_dense() @ A2.to_dense(), **tol(np.float64))
    B = sparse(random_dense(rng, shape, density=0.2), "CSR")   # no longer a @ a: b's structure copied
    mm.reset_operands(a=A2, b=B)
    for _ in range(3):
        np.testing.assert_allclose(mm.execute().to_dense(), A2.to_dense() @ B.to_dense(), **tol(np.float64))
    assert _kept_route(mm)._kept[0].b_pos is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64])
def test_dtypes_and_alpha(dtype, rng, every_size):
    a = (random_dense(rng, (12, 9), dtype=np.complex128 if dtype == np.complex128 else np.float64) * 4)
    b = (random_dense(rng, (9, 14), dtype=a.dtype) * 4)
    # positive parts: no product cancels to zero, which a kernel may drop (its structure is then
    # not the products' and is not kept: see test_a_structure_missing_an_entry_is_not_kept)
    a, b = (np.round(abs(x.real) + 1j * abs(x.imag) if x.dtype.kind == "c" else abs(x)).astype(dtype) + (x != 0)
            for x in (a, b))
    A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "CSR")
    for alpha in (1, 3):
        mm = ustc.Matmul(A, B, alpha=alpha).plan()
        results = [mm.execute() for _ in range(4)]
        # alpha != 1: the registered kernel's result scaled afterwards drops cancelled entries, so
        # its structure is not the products' and is not kept (every execute runs the kernel)
        assert (_kept_route(mm)._kept is not None) or alpha != 1
        for C in results:
            assert C.dtype == results[0].dtype
            np.testing.assert_allclose(C.to_dense(), alpha * (a @ b), **tol(dtype))


@pytest.mark.parametrize("shapes", [((0, 4), (4, 3)), ((4, 0), (0, 3)), ((1, 9), (9, 5)), ((6, 5), (5, 1))], ids=str)
def test_edge_shapes_and_all_zero(shapes, rng, every_size):
    (m, k), (_, n) = shapes
    for a in (random_dense(rng, (m, k), density=0.5), np.zeros((m, k))):
        A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(random_dense(rng, (k, n), density=0.5), "CSR")
        mm = ustc.Matmul(A, B).plan()
        for _ in range(3):
            np.testing.assert_allclose(mm.execute().to_dense(), a @ B.to_dense())


def test_one_shot_calls_keep_nothing(rng, every_size, monkeypatch):
    made = []
    original = _spgemm_kept.KeptStructure.of
    monkeypatch.setattr(_spgemm_kept.KeptStructure, "of", lambda *args: made.append(1) or original(*args))
    A = sparse(random_dense(rng, (30, 30), density=0.2), "CSR")
    for _ in range(3):
        np.testing.assert_allclose(ustc.matmul(A, A).to_dense(), A.to_dense() @ A.to_dense(), **tol(np.float64))
    assert not made                        # each one-shot call unbinds its plan after one execute
    mm = ustc.Matmul(A, A).plan()
    mm.execute(), mm.execute()
    assert made == [1]
    mm.release_operands()
    assert _kept_route(mm)._kept is None   # dropped with the operands


def test_operands_never_written(rng, every_size):
    A = sparse(random_dense(rng, (20, 20), density=0.3), "CSR")
    before = [x.copy() for x in (A.pos(1), A.crd(1), A.values)]
    mm = ustc.Matmul(A, A).plan()
    for _ in range(3):
        mm.execute()
    for x, y in zip((A.pos(1), A.crd(1), A.values), before):
        np.testing.assert_array_equal(x, y)


def test_kept_structure_matches_the_two_pass_kernel_bit_for_bit(rng):
    n = 12
    lap = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    a = sp.csr_array(sp.kronsum(sp.kronsum(lap, lap), lap))
    a.data = rng.standard_normal(a.nnz)
    args = (a.indptr, a.indices, a.data) * 2
    pos, crd, vals = _spgemm.product(*args, a.shape[1], np.float64, True, 2)
    kept = _spgemm_kept.KeptStructure.of(a.indptr, a.indices, a.indptr, a.indices, pos, crd, 3)
    assert kept.matches(a.indptr, a.indices, a.indptr, a.indices)
    assert not kept.matches(a.indptr, a.indices, a.indptr.copy(), a.indices)   # kept as a @ a
    p2, c2, v2 = kept.product(*args, np.float64)
    np.testing.assert_array_equal(p2, pos)
    np.testing.assert_array_equal(c2, crd)
    np.testing.assert_array_equal(v2, vals)
    assert not np.shares_memory(c2, kept.kept) and not np.shares_memory(p2, kept.pos)
    changed = a.indices.copy()
    changed[-1] -= 1
    assert not kept.matches(a.indptr, changed, a.indptr, a.indices.copy())
    assert not kept.matches(a.indptr.astype(np.int64), a.indices, a.indptr, a.indices)


def test_a_structure_missing_an_entry_is_not_kept():
    a = _csr([0, 0, 1], [0, 1, 1], (2, 2), np.array([1.0, 1.0, -1.0]))   # (a @ a)[0, 1] = 1 - 1 = 0
    pos, crd, vals = _spgemm.product(*(a.indptr, a.indices, a.data) * 2, 2, np.float64, True, 1)
    assert _spgemm_kept.KeptStructure.of(a.indptr, a.indices, a.indptr, a.indices, pos, crd, 1) is not None
    dropped = np.array([0, 1, 2]), np.array([0, 1])       # a kernel that dropped the cancelled entry
    assert _spgemm_kept.KeptStructure.of(a.indptr, a.indices, a.indptr, a.indices, *dropped, 1) is None


def test_cancellations_coming_and_going(every_size):
    """Values changed in place so that a product cancels to zero, then no longer does: every
    execute equals the dense product (whether the route drops the cancelled entry or keeps it)."""
    a = _csr([0, 0, 1, 1, 2], [0, 1, 1, 2, 2], (3, 3), np.array([1.0, 1.0, -1.0, 2.0, 1.0]))
    for dtype in (np.float64, np.int64):
        A = ustc.Tensor.from_package(sp.csr_array(a, dtype=dtype))
        mm = ustc.Matmul(A, A).plan()
        for values in ([1, 1, -1, 2, 1], [1, 2, -1, 2, 1], [1, 1, -1, 2, 1], [1, 1, -1, 2, 1]):
            A.values[...] = values
            dense = A.to_dense()
            np.testing.assert_array_equal(mm.execute().to_dense(), dense @ dense)


# block shapes and dtypes of test_bsr_spgemm's KERNELS: the first execute's product (the block fill,
# compiled per block shape and dtype) is one the suite has compiled there
BSR_CASES = [(blocks, shape, dtype) for blocks, dtype in ((((2, 2), (2, 2)), np.float64), (((3, 2), (2, 4)), np.float64),
                                                          (((1, 2), (2, 3)), np.float32))
             for shape in ((8, 6, 10), (7, 5, 9), (1, 3, 4), (0, 3, 2))] + [(((2, 2), (2, 2)), (7, 5, 9), np.complex128)]


@pytest.mark.parametrize("blocks, shape, dtype", BSR_CASES, ids=str)
def test_bsr_keeps_its_block_structure(blocks, shape, dtype, rng, every_size):
    """Block shapes with padded edge blocks (shapes not multiples of the blocks): the kept pass
    stores the padding as zeros and follows values changed in place."""
    (r, k), (k2, c) = blocks
    m, inner, n = shape
    a = random_dense(rng, (m, inner), density=0.4, dtype=dtype)
    b = random_dense(rng, (inner, n), density=0.4, dtype=dtype)
    A, B = ustc.Tensor.from_dense(a, ustc.formats.BSR(r, k)), ustc.Tensor.from_dense(b, ustc.formats.BSR(k2, c))
    mm = ustc.Matmul(A, B, options={"out_format": ustc.formats.BSR(r, c)}).plan()
    kept = _kept_route(mm)
    assert kept is not None and "BSR product" in mm.plan_info, mm.plan_info
    first = None
    for _ in range(4):
        C = mm.execute()
        assert C.format == ustc.formats.BSR(r, c)
        C.validate()
        np.testing.assert_allclose(C.to_dense(), A.to_dense() @ B.to_dense(), **tol(dtype))
        first = C if first is None else first
        _rescale(A, rng)
        _rescale(B, rng)
    assert kept._kept is not None
    pad = C._values.reshape(-1, r, c)      # padding of the edge blocks stored as zeros
    if len(pad) and m % r:
        last_row = C.pos(1)[-2]
        assert not pad[last_row:, m % r:, :].any()
    if len(pad) and n % c:
        assert not pad[C.crd(1) == C.level_shape[1] - 1][:, :, n % c:].any()


def test_bsr_kept_pass_matches_the_block_fill_bit_for_bit(rng, every_size):
    n = 10
    lap = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    a = sp.csr_array(sp.kronsum(lap, lap))
    a.data = rng.standard_normal(a.nnz)
    A = ustc.Tensor.from_package(a).convert(ustc.formats.BSR(2, 2))
    mm = ustc.Matmul(A, A).plan()
    first, second, third = (mm.execute() for _ in range(3))
    assert _kept_route(mm)._kept is not None
    for buffers in ((first.pos(1), third.pos(1)), (first.crd(1), third.crd(1)), (first.values, third.values)):
        np.testing.assert_array_equal(*buffers)
        assert not np.shares_memory(*buffers)
    A.crd(1)[0], A.crd(1)[1] = A.crd(1)[1], A.crd(1)[0]   # two block columns of row 0 swapped: a new structure
    A.values.reshape(-1, 2, 2)[[0, 1]] = A.values.reshape(-1, 2, 2)[[1, 0]]   # ... with their blocks
    np.testing.assert_allclose(mm.execute().to_dense(), A.to_dense() @ A.to_dense(), atol=1e-12)
