"""ustc.solve never answers silently wrong: duplicates are summed before a triangular solve, the
reported residual is the true one (float64 for float32 systems), and NaN / Inf raise SolveError.

Oracles: SciPy's ``spsolve_triangular`` on the summed matrix, and ``||b - A x|| / ||b||`` in
float64 NumPy. Formats come from the registry (``matmul_helpers.named_2d``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ustc
from matmul_helpers import named_2d
from ustc import LevelProperty, TensorFormat
from ustc.ops import krylov, trisolve

DTYPES = [np.float32, np.float64]
KRYLOV = ["cg", "bicgstab", "gmres"]


def holds_any_matrix(fmt) -> bool:
    return not any(lv.type.keyword == "structured" for lv in fmt.levels)


def any_matrix_formats() -> list:
    """Every named 2-D format of the registry that can hold an arbitrary matrix."""
    return [p for p in named_2d() if holds_any_matrix(p.values[0])]


def duplicating_level(fmt) -> int | None:
    """The last level that may repeat coordinates (``nonunique`` allowed, a ``pos`` buffer) when
    only dense and singleton levels follow it, else None: repeating each of its positions then
    repeats whole entries (or blocks)."""
    for k in range(fmt.nlevels - 1, -1, -1):
        t = fmt.levels[k].type
        if LevelProperty.NONUNIQUE in t.allowed_properties and "pos" in t.buffers:
            tail = {lv.type.keyword for lv in fmt.levels[k + 1:]}
            return k if tail <= {"dense", "singleton"} else None
    return None


def duplicating_formats() -> list:
    return [p for p in named_2d() if duplicating_level(p.values[0]) is not None]


def with_duplicates(t: ustc.Tensor, share: float = 0.25) -> ustc.Tensor:
    """``t`` with every stored entry split in two repeated entries (``share`` and ``1 - share`` of
    its value), in ``t``'s format made ``nonunique`` from the duplicating level on."""
    fmt, k = t.format, duplicating_level(t.format)
    levels = []
    for j, lv in enumerate(fmt.levels):
        props = lv.type.properties
        if j >= k and lv.type.keyword != "dense" and LevelProperty.NONUNIQUE not in props:
            props = tuple(props) + (LevelProperty.NONUNIQUE,)
        levels.append((lv.expr, replace(lv.type, properties=props)))
    buffers = dict(t._buffers)
    count = int(buffers[(k, "pos")][-1])
    buffers[(k, "pos")] = buffers[(k, "pos")] * 2
    for (j, name), b in t._buffers.items():
        if j >= k and name == "crd":
            buffers[(j, name)] = np.repeat(b, 2)
    blocks = np.repeat(t._values[:t.nse].reshape(count, -1), 2, axis=0)
    blocks *= np.tile(np.array([[share], [1 - share]], dtype=blocks.dtype), (count, 1))
    return ustc.Tensor(TensorFormat(fmt.dims, levels), t.shape, buffers, blocks.reshape(-1))


def triangle(n, lower, dtype, seed=3):
    m = (sp.random(n, n, density=0.15, random_state=seed) + sp.eye(n) * 2).toarray()
    return (np.tril(m) if lower else np.triu(m)).astype(dtype)


def system(method, n, dtype, seed=0):
    """A symmetric (CG) or nonsymmetric matrix that the method solves, and a right-hand side."""
    m = sp.random(n, n, density=0.08, random_state=seed)
    m = m + m.T if method == "cg" else m
    m = m + sp.diags(1 + np.asarray(abs(m).sum(axis=1)).ravel())
    b = np.random.default_rng(seed).standard_normal(n)
    return m.toarray().astype(dtype), b.astype(dtype)


def true_relative(dense, x, b) -> float:
    """The float64 oracle ``||b - A x|| / ||b||``."""
    a, x, b = (np.asarray(v, dtype=np.float64) for v in (dense, x, b))
    return float(np.linalg.norm(b - a @ x) / np.linalg.norm(b))


def snapshot(t: ustc.Tensor) -> list:
    return [b.copy() for b in t._buffers.values()] + [t._values.copy()]


def unchanged(t: ustc.Tensor, before: list) -> bool:
    now = list(t._buffers.values()) + [t._values]
    return all(np.array_equal(a, b) for a, b in zip(now, before))


# -- 1. duplicates are summed before a triangular solve ------------------------------------------

def test_the_issue_example_sums_the_duplicated_diagonal():
    L = sp.csr_array(([1., 1., 3.], [0, 0, 1], [0, 2, 3]), shape=(2, 2))
    data, indices = L.data.copy(), L.indices.copy()
    x, info = ustc.solve(L, np.ones(2), return_info=True)
    np.testing.assert_allclose(x, spla.spsolve_triangular(L, np.ones(2)))          # [0.5, 1/3]
    assert info.relative_residual < 1e-15
    assert np.array_equal(L.data, data) and np.array_equal(L.indices, indices)     # caller's input untouched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("fmt", duplicating_formats())
def test_duplicates_are_summed_in_every_format(fmt, lower, dtype, rng):
    t = triangle(30, lower, dtype)
    A = with_duplicates(ustc.Tensor.from_dense(t, fmt))
    before = snapshot(A)
    B = rng.standard_normal((30, 2)).astype(dtype)
    x, info = ustc.solve(A, B, "triangular", lower=lower, return_info=True)
    want = spla.spsolve_triangular(sp.csr_array(t.astype(np.float64)), B.astype(np.float64), lower=lower)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(x, want, rtol=tol, atol=tol)
    assert x.dtype == np.dtype(dtype) and info.relative_residual <= tol
    assert unchanged(A, before)


def compressed_as_given(rows, cols, vals, shape, kind):
    """A SciPy CSR / CSC array holding the entries in the given order within each row / column
    (duplicates and all: SciPy's own conversions would sum them)."""
    major, minor = (rows, cols) if kind == "csr" else (cols, rows)
    order = np.argsort(major, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=shape[0]))])
    cls = sp.csr_array if kind == "csr" else sp.csc_array
    return cls((vals[order], minor[order], ptr), shape=shape)


@pytest.mark.parametrize("kind", ["csr", "csc", "coo"])
def test_scipy_inputs_with_duplicates_and_unsorted_rows(kind, rng):
    t = triangle(25, True, np.float64, seed=5)
    coo = sp.coo_array(t)
    order = rng.permutation(coo.nnz)                  # unsorted, and every entry split in two
    rows, cols = np.tile(coo.row[order], 2), np.tile(coo.col[order], 2)
    vals = np.concatenate([0.75 * coo.data[order], 0.25 * coo.data[order]])
    if kind == "coo":
        s = sp.coo_array((vals, (rows, cols)), shape=t.shape)
    else:
        s = compressed_as_given(rows, cols, vals, t.shape, kind)
        assert not s.has_canonical_format
    data = s.data.copy()
    b = rng.standard_normal(25)
    np.testing.assert_allclose(ustc.solve(s, b), spla.spsolve_triangular(sp.csr_array(t), b), rtol=1e-10)
    assert np.array_equal(s.data, data)


def test_canonical_rows_are_used_as_they_are(monkeypatch):
    """The cheap path: sorted rows without duplicates are solved in place, never re-assembled."""
    A = ustc.Tensor.from_dense(triangle(20, True, np.float64), "CSR")
    assert trisolve.canonical(A) is A
    monkeypatch.setattr(trisolve, "sum_duplicates", lambda *a: pytest.fail("summed a canonical matrix"))
    ustc.solve(A, np.ones(20))


@pytest.mark.parametrize("seed", range(4))
def test_sum_duplicates_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n, nnz = 12, 60
    rows, cols = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    s = sp.csr_array((rng.standard_normal(nnz), (rows, cols)), shape=(n, n))
    s.has_sorted_indices = False                      # keep SciPy from canonicalising on the way in
    pos, crd, vals = s.indptr.copy(), s.indices.copy(), s.data.copy()
    got = trisolve.sum_duplicates(pos, crd, vals)
    want = s.copy()
    want.sum_duplicates()
    for g, w in zip(got, (want.indptr, want.indices, want.data)):
        np.testing.assert_allclose(g, w, rtol=1e-13)
    assert got[0].dtype == pos.dtype and trisolve.rows_canonical(got[0], got[1])


def test_the_level_schedule_counts_a_repeated_entry_once():
    t = triangle(16, True, np.float64)
    A = with_duplicates(ustc.Tensor.from_dense(t, "CSR"))
    s, plain = trisolve.analyse(A, lower=True), trisolve.analyse(ustc.Tensor.from_dense(t, "CSR"), lower=True)
    assert s.nnz == plain.nnz and np.array_equal(s.diag, plain.diag)
    assert np.array_equal(s.level_ptr, plain.level_ptr) and np.array_equal(s.level_rows, plain.level_rows)


def test_the_cuda_substitution_gets_the_summed_matrix(monkeypatch, rng):
    """``target="cuda"``: the level-scheduled launches receive the summed rows (the launches are
    played here by the host substitution; the kernels run in tests/cuda)."""
    from ustc.ops import _vector, cuda_host, cuda_trisolve

    def substitute(pos, crd, vals, schedule, b, unit):
        assert trisolve.rows_canonical(pos, crd) and schedule.nnz == pos[-1]
        x = np.empty_like(b)
        assert _vector.triangular_csr(pos, crd, vals, b, x, unit, schedule.lower) == -1
        return x
    monkeypatch.setattr(cuda_host, "require_device", lambda: None)
    monkeypatch.setattr(cuda_trisolve, "substitute", substitute)
    t = triangle(20, True, np.float64)
    A = with_duplicates(ustc.Tensor.from_dense(t, "CSR"))
    b = rng.standard_normal(20)
    x, info = ustc.solve(A, b, target="cuda", return_info=True)
    np.testing.assert_allclose(x, spla.spsolve_triangular(sp.csr_array(t), b), rtol=1e-10)
    assert info.levels.nnz == sp.csr_array(t).nnz and info.relative_residual < 1e-12


# -- 2. the reported residual is the true one -----------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", KRYLOV)
@pytest.mark.parametrize("fmt", any_matrix_formats())
def test_reported_residual_is_the_true_residual(fmt, method, dtype):
    dense, b = system(method, 50, dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    x, info = ustc.solve(ustc.Tensor.from_dense(dense, fmt), b, method, rtol=rtol, restart=10, return_info=True)
    true = true_relative(dense, x, b)
    assert info.relative_residual == pytest.approx(true, rel=1e-6, abs=1e-15)
    assert info.converged and true <= rtol
    assert info.residual_norm == pytest.approx(true * np.linalg.norm(b.astype(np.float64)), rel=1e-6)


def drifting_float32_system():
    """A float32 system whose recursive BiCGSTAB residual drops below 1e-8 while the true one
    stalls near 1e-5 (float32 rounding in a moderately conditioned matrix)."""
    m = sp.random(200, 200, density=0.05, random_state=0)
    dense = ((m + m.T) + sp.eye(200) * 4).toarray().astype(np.float32)
    return dense, np.random.default_rng(0).standard_normal(200).astype(np.float32)


def test_float32_drift_is_not_reported_as_convergence(monkeypatch):
    dense, b = drifting_float32_system()
    recursive = []
    solver = krylov.SOLVERS["bicgstab"]

    def spy(*args):
        out = solver(*args)
        recursive.append(out)
        return out
    monkeypatch.setitem(krylov.SOLVERS, "bicgstab", spy)
    A = ustc.Tensor.from_dense(dense, "CSR")
    x, info = ustc.solve(A, b, "bicgstab", rtol=1e-8, check=False, return_info=True)
    (_, _, res, claimed), = recursive
    assert claimed and res <= 1e-8 * np.linalg.norm(b)              # the premise: the recursion claims it
    true = true_relative(dense, x, b)
    assert true > 1e-6 and not info.converged
    assert info.relative_residual == pytest.approx(true, rel=1e-6)
    with pytest.raises(ustc.SolveError, match="did not converge"):
        ustc.solve(A, b, "bicgstab", rtol=1e-8)


@pytest.mark.parametrize("method", KRYLOV)
def test_a_float32_solve_never_claims_more_than_float64_confirms(method):
    dense, b = drifting_float32_system()
    if method == "cg":
        dense = (dense + dense.T) / 2 + 60 * np.eye(200, dtype=np.float32)    # positive definite for CG
    for rtol in (1e-8, 1e-4):
        x, info = ustc.solve(ustc.Tensor.from_dense(dense, "CSR"), b, method, rtol=rtol, check=False,
                             return_info=True)
        true = true_relative(dense, x, b)
        assert info.relative_residual == pytest.approx(true, rel=1e-6)
        assert info.converged == (true <= rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", any_matrix_formats())
def test_triangular_residual_is_the_true_residual(fmt, dtype, rng):
    t = triangle(40, False, dtype)
    b = rng.standard_normal(40).astype(dtype)
    x, info = ustc.solve(ustc.Tensor.from_dense(t, fmt), b, return_info=True)     # stored zeros: still upper
    assert info.method == "triangular"
    assert info.relative_residual == pytest.approx(true_relative(t, x, b), rel=1e-6, abs=1e-16)


# -- 3. NaN and Inf ----------------------------------------------------------------------------------

def poisoned(dense, b, where, value):
    """Copies of the inputs with ``value`` planted in ``where`` (``a``: a diagonal entry, stored in
    every format; ``b``; ``x0``), and the x0 to pass (None unless ``where == "x0"``)."""
    dense, b, x0 = dense.copy(), b.copy(), None
    if where == "a":
        dense[3, 3] = value
    elif where == "b":
        b[4] = value
    else:
        x0 = np.zeros_like(b)
        x0[5] = value
    return dense, b, x0


MESSAGES = {"a": r"matrix a holds a non-finite value \(NaN or Inf\) at entry \(3, 3\)",
            "b": r"b holds a non-finite value \(NaN or Inf\) at index 4",
            "x0": r"x0 holds a non-finite value \(NaN or Inf\) at index 5"}


@pytest.fixture
def executions(monkeypatch):
    """Every ``Matmul.execute`` call, in order."""
    from ustc.ops.plan import Matmul

    calls, run = [], Matmul.execute
    monkeypatch.setattr(Matmul, "execute", lambda self, **kw: calls.append(self) or run(self, **kw))
    return calls


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["a", "b", "x0"])
@pytest.mark.parametrize("method", KRYLOV + ["triangular", None])
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_inputs_are_named_before_iterating(dtype, method, where, value, executions):
    if method == "triangular" and where == "x0":
        pytest.skip("a substitution takes no x0")
    dense, b = system("cg", 30, dtype)
    dense = np.tril(dense) if method == "triangular" else dense
    dense, b, x0 = poisoned(dense, b, where, value)
    with pytest.raises(ustc.SolveError, match=MESSAGES[where]):
        ustc.solve(ustc.Tensor.from_dense(dense, "CSR"), b, method, x0=x0)
    assert executions == []


@pytest.mark.parametrize("fmt", any_matrix_formats())
def test_a_non_finite_matrix_is_named_in_every_format(fmt):
    dense, b = system("gmres", 20, np.float64)
    dense, _, _ = poisoned(dense, b, "a", np.nan)
    with pytest.raises(ustc.SolveError, match=MESSAGES["a"]):
        ustc.solve(ustc.Tensor.from_dense(dense, fmt), b, "gmres")


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", KRYLOV)
def test_nan_during_the_iteration_stops_it_within_a_few_products(method, dtype, check, monkeypatch):
    """A product that starts returning NaN from its 4th call on (as an overflow or a faulty kernel
    would) ends the solve within two more products, with SolveError saying it broke down. The
    per-step paths (the fused CSR loops of ustc.ops.krylov.FUSED run no product per iteration;
    tests/matmul/test_fused_krylov.py breaks them down by overflow)."""
    from ustc.ops.plan import Matmul

    monkeypatch.setattr(krylov, "FUSED", {})

    run, executions = Matmul.execute, []

    def faulty(self, **kw):
        executions.append(self)
        out = run(self, **kw)
        if len(executions) >= 4:
            out[::7] = np.nan
        return out
    monkeypatch.setattr(Matmul, "execute", faulty)
    dense, b = system(method, 60, dtype)
    with pytest.raises(ustc.SolveError, match=rf"{method} broke down at iteration \d+: a NaN or Inf"):
        ustc.solve(ustc.Tensor.from_dense(dense, "CSR"), b, method, rtol=1e-12, check=check)
    assert 4 <= len(executions) <= 6


@pytest.mark.parametrize("method", KRYLOV)
def test_an_overflow_is_a_breakdown_not_convergence(method):
    """Finite inputs whose squared norm overflows: the old loop compared inf <= inf and returned
    x = 0 as converged."""
    dense, b = system(method, 20, np.float64)
    with pytest.raises(ustc.SolveError, match=f"{method} broke down at iteration 0"):
        ustc.solve(ustc.Tensor.from_dense(dense * 1e200, "CSR"), b * 1e200, method)
