"""Constructors and combinators (``ustc.eye``, ``diags``, ``random``, ``kron``, ``vstack``,
``hstack``, ``block``, ``concatenate``) against SciPy's, in every 2-D format of the registry."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import ustc
from fitting import structured_fit
from op_helpers import FAMILIES_2D, NAMED_2D, assert_unchanged, named_params, rand_dense, snapshot
from strategies import examples

FORMATS = named_params(NAMED_2D)
SHAPES = [(0, 0), (0, 4), (4, 0), (1, 7), (7, 1), (5, 8), (6, 4)]
DTYPES = [np.float64, np.float32, np.int32, np.complex128]


def fits(dense: np.ndarray, fmt) -> bool:
    """Whether ``fmt`` holds ``dense`` (an n:m format holds at most n nonzeros per block)."""
    return np.array_equal(structured_fit(dense, fmt), dense)


def check(build, oracle, fmt, dtype=None):
    """``build()`` in ``fmt`` equals the dense ``oracle``, or, when ``fmt`` cannot hold it (n:m),
    refuses with StorageError."""
    if not fits(oracle, fmt):
        with pytest.raises(ustc.StorageError):
            build()
        return None
    got = build()
    assert isinstance(got, ustc.Tensor) and got.format == fmt
    assert got.shape == oracle.shape
    assert got.dtype == (np.dtype(dtype) if dtype is not None else oracle.dtype)
    np.testing.assert_array_equal(got.to_dense(), oracle)
    return got


# --------------------------------------------------------------------------- eye, diags, random


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_eye_equals_scipy(fmt, shape):
    n, m = shape
    for k in (0, 2, -3):
        try:
            oracle = sp.eye_array(n, m, k=k).toarray()
        except ValueError:                  # SciPy refuses a diagonal outside the matrix; NumPy's is empty
            oracle = np.eye(n, m, k)
        check(lambda: ustc.eye(n, m, k, tensor_format=fmt), oracle, fmt)


def test_eye_defaults_and_dtypes():
    t = ustc.eye(4)
    assert t.format == ustc.formats.CSR and t.dtype == np.float64 and t.shape == (4, 4)
    for dtype in DTYPES + [np.bool_]:
        t = ustc.eye(3, 5, 1, dtype=dtype)
        assert t.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(t.to_dense(), np.eye(3, 5, 1, dtype=dtype))
    assert ustc.eye(3, k=7).nse == 0          # a diagonal outside the matrix is empty, as np.eye


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(6, 6), (4, 7), (7, 4), (1, 5), (5, 1)], ids=str)
def test_diags_equals_scipy(fmt, shape):
    m, n = shape
    offsets = [k for k in (-1, 0, 1, 3) if -m < k < n]
    diagonals = [np.arange(1.0, 1 + max(m, n)) * (j + 1) for j, _ in enumerate(offsets)]
    want = sp.diags_array([d[:min(m + k, n - k, m, n)] for d, k in zip(diagonals, offsets)], offsets=offsets,
                          shape=shape, dtype=None).toarray()
    check(lambda: ustc.diags(diagonals, offsets, shape=shape, tensor_format=fmt), want, fmt)
    scalars = [1.0, -2.0, 1.0]
    want = sp.diags_array(scalars, offsets=[-1, 0, 1], shape=shape, dtype=None).toarray() if m > 1 and n > 1 \
        else None
    if want is not None:
        check(lambda: ustc.diags(scalars, [-1, 0, 1], shape=shape, tensor_format=fmt), want, fmt)


def test_diags_forms_and_dtypes():
    np.testing.assert_array_equal(ustc.diags([1, 2, 3], 1).to_dense(),
                                  sp.diags_array([1, 2, 3], offsets=1, dtype=None).toarray())
    for dtype in DTYPES:
        d = np.arange(1, 5).astype(dtype)
        t = ustc.diags([d, d[:3]], [0, -1])
        assert t.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(t.to_dense(), sp.diags_array([d, d[:3]], offsets=[0, -1], dtype=None).toarray())
    assert ustc.diags([[1, 2]], [0], dtype=np.complex64).dtype == np.complex64
    # repeated offsets add up; an empty diagonal at the corner is allowed
    np.testing.assert_array_equal(ustc.diags([[1, 1], [2, 2]], [0, 0]).to_dense(), 3 * np.eye(2))
    assert ustc.diags([[]], [3], shape=(3, 3)).nse == 0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_random_equals_scipy_for_the_same_generator(fmt, shape):
    for density, seed in ((0.3, 1), (0.05, 2), (1.0, 3)):
        want = sp.random_array(shape, density=density, rng=np.random.default_rng(seed)).toarray()
        check(lambda: ustc.random(*shape, density, tensor_format=fmt, rng=np.random.default_rng(seed)), want, fmt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_dtypes_seeds_and_samplers(dtype):
    want = sp.random_array((9, 13), density=0.4, rng=7, dtype=dtype).toarray()
    got = ustc.random(9, 13, 0.4, rng=7, dtype=dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.to_dense(), want)
    np.testing.assert_array_equal(ustc.random(9, 13, 0.4, seed=7, dtype=dtype).to_dense(), want)
    sampler = lambda size: np.full(size, 5)  # noqa: E731
    t = ustc.random(9, 13, 0.4, rng=7, dtype=dtype, data_sampler=sampler)
    assert t.nse == round(0.4 * 9 * 13) and set(np.unique(t.to_dense())) <= {0, 5}


def test_random_without_the_index_over_every_position(monkeypatch):
    """When NumPy's choice would allocate an index over all m * n positions beyond the budget, the
    positions are drawn with replacement instead: still exactly nnz distinct ones, in O(nnz)."""
    m, n, density = 3_000, 2_000, 0.05                       # choice would allocate 48 MB
    nnz = round(density * m * n)
    monkeypatch.setenv("USTC_MEMORY_BUDGET", str(40_000_000))  # 5 * 24 bytes * 300,000 = 36 MB fits
    tracemalloc.start()
    t = ustc.random(m, n, density, rng=0, tensor_format="COO")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40_000_000
    coords, values = t.entries()
    assert len(values) == nnz and (values != 0).all()
    assert len(np.unique(coords[0] * n + coords[1])) == nnz
    # about uniform: every row band and column band gets its share
    assert np.histogram(coords[0], bins=10)[0].min() > 0.8 * nnz / 10
    assert np.histogram(coords[1], bins=10)[0].min() > 0.8 * nnz / 10
    again = ustc.random(m, n, density, rng=0, tensor_format="COO")
    np.testing.assert_array_equal(again.to_dense(), t.to_dense())


# --------------------------------------------------------------------------- kron, stacking


def operands(fmt, shapes, dtype=np.float64, seed=0):
    """Random matrices of ``shapes`` as Tensors in ``fmt`` (data that fits it)."""
    out = []
    for k, shape in enumerate(shapes):
        x = structured_fit(rand_dense(shape, dtype, 0.4, seed + k), fmt)
        out.append(ustc.Tensor.from_dense(x, fmt))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shapes", [((2, 3), (3, 2)), ((1, 4), (4, 1)), ((0, 3), (2, 2)), ((3, 3), (1, 1))],
                         ids=str)
def test_kron_equals_scipy(fmt, shapes):
    A, B = operands(fmt, shapes)
    before = snapshot(A, B)
    want = sp.kron(sp.csr_array(A.to_dense()), sp.csr_array(B.to_dense())).toarray()
    check(lambda: ustc.kron(A, B, tensor_format=fmt), want, fmt)
    assert_unchanged([A, B], before)


@pytest.mark.parametrize("fmt", FORMATS)
def test_vstack_hstack_block_equal_scipy(fmt):
    A, B, C = operands(fmt, [(3, 4), (2, 4), (3, 2)], seed=3)
    before = snapshot(A, B, C)
    a, b, c = (sp.coo_array(t.to_dense()) for t in (A, B, C))
    check(lambda: ustc.vstack([A, B], tensor_format=fmt), sp.vstack([a, b]).toarray(), fmt)
    check(lambda: ustc.hstack([A, C], tensor_format=fmt), sp.hstack([a, c]).toarray(), fmt)
    grid = [[A, C], [B, None]]
    want = sp.block_array([[a, c], [b, None]]).toarray()
    check(lambda: ustc.block(grid, tensor_format=fmt), want, fmt)
    # the default: the first operand's format where it holds any pattern, else CSR
    default = fmt if fmt.holds_any_pattern and not fmt.dense_storage else ustc.formats.CSR
    assert ustc.vstack([A, B]).format == default
    assert ustc.block([[None, C], [B, None]]).format == default
    assert_unchanged([A, B, C], before)


def test_mixed_operand_kinds():
    rng = np.random.default_rng(5)
    d = rng.standard_normal((3, 3)) * (rng.random((3, 3)) < 0.5)
    kinds = [ustc.Tensor.from_dense(d, "DIAI"), sp.csr_array(d), sp.coo_matrix(d), sp.dia_array(d), sp.bsr_array(d),
             sp.lil_array(d), sp.dok_array(d), d, d.tolist()]
    before = snapshot(*[k for k in kinds if isinstance(k, (ustc.Tensor, np.ndarray))])
    got = ustc.vstack(kinds)
    np.testing.assert_array_equal(got.to_dense(), np.vstack([d] * len(kinds)))
    assert got.format == ustc.Tensor.from_dense(d, "DIAI").format
    assert_unchanged([k for k in kinds if isinstance(k, (ustc.Tensor, np.ndarray))], before)
    assert ustc.hstack([sp.coo_array(d), d]).format == ustc.formats.COO()
    assert ustc.hstack([d, sp.coo_array(d)]).format == ustc.formats.CSR
    assert ustc.hstack([sp.csc_array(d), d]).format == ustc.formats.CSC
    torch = pytest.importorskip("torch")
    t = torch.tensor(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # torch: "sparse CSR support is in beta"
        csr = t.to_sparse_csr()
    np.testing.assert_array_equal(ustc.hstack([t, csr, t.to_sparse()]).to_dense(), np.hstack([d, d, d]))


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64), (np.int32, np.float32), (np.int8, np.int64),
                                    (np.float64, np.complex128)], ids=str)
@pytest.mark.parametrize("fmt", [pytest.param(NAMED_2D[n], id=n) for n in FAMILIES_2D])
def test_stacking_dtypes(dtypes, fmt):
    A, = operands(fmt, [(3, 4)], dtype=dtypes[0], seed=1)
    B, = operands(fmt, [(3, 4)], dtype=dtypes[1], seed=2)
    want_dtype = np.result_type(*dtypes)
    for got, oracle in ((ustc.vstack([A, B]), np.vstack([A.to_dense(), B.to_dense()])),
                        (ustc.kron(A, B), np.kron(A.to_dense(), B.to_dense())),
                        (ustc.concatenate([A, B], axis=1), np.hstack([A.to_dense(), B.to_dense()]))):
        assert got.dtype == want_dtype
        np.testing.assert_array_equal(got.to_dense(), oracle)
    narrow = np.complex64 if want_dtype.kind == "c" else np.float32
    cast = ustc.hstack([A, B], dtype=narrow)
    assert cast.dtype == narrow
    np.testing.assert_allclose(cast.to_dense(), np.hstack([A.to_dense(), B.to_dense()]).astype(narrow))


def test_row_major_operands_skip_the_sort(monkeypatch):
    """Operands whose entries come out row-major and unique (CSR, DCSR, CROW, canonical SciPy CSR,
    dense arrays), stacked top to bottom, give a row-major COO directly (no from_coo); zeros a
    dtype= cast makes are not stored. Any other operand takes from_coo."""
    calls = []
    original = ustc.Tensor.from_coo.__func__
    monkeypatch.setattr(ustc.Tensor, "from_coo", classmethod(lambda cls, *a, **k: calls.append(a) or
                                                             original(cls, *a, **k)))
    x = rand_dense((4, 5), np.float64, 0.5, 1)
    x[0, 0] = 0.25
    ops = [ustc.Tensor.from_dense(x, "CSR"), ustc.Tensor.from_dense(x, "DCSR"), ustc.Tensor.from_dense(x, "CROW"),
           sp.csr_array(x), x]
    got = ustc.vstack(ops, dtype=np.int64, tensor_format="COO")
    want = np.vstack([x] * len(ops)).astype(np.int64)
    np.testing.assert_array_equal(got.to_dense(), want)
    assert got.nse == np.count_nonzero(want) and not calls
    got = ustc.concatenate(ops[:2], axis=0, tensor_format="CSR")
    np.testing.assert_array_equal(got.to_dense(), np.vstack([x, x]))
    assert not calls
    got = ustc.vstack([ops[0], ustc.Tensor.from_dense(x, "CSC")])
    np.testing.assert_array_equal(got.to_dense(), np.vstack([x, x]))
    assert len(calls) == 1


def test_concatenate_any_rank_and_axis():
    x = rand_dense((2, 3, 4), np.float64, 0.5, 1)
    y = rand_dense((2, 5, 4), np.float64, 0.5, 2)
    X = ustc.Tensor.from_dense(x, "CSF(3)")
    got = ustc.concatenate([X, y], axis=1)
    assert got.format == X.format
    np.testing.assert_array_equal(got.to_dense(), np.concatenate([x, y], axis=1))
    got = ustc.concatenate([x, x], axis=-1)
    assert got.format == ustc.formats.COO(3)
    np.testing.assert_array_equal(got.to_dense(), np.concatenate([x, x], axis=-1))
    v = np.array([0.0, 1, 0, 2])
    np.testing.assert_array_equal(ustc.concatenate([v, v[:2]]).to_dense(), np.concatenate([v, v[:2]]))


# --------------------------------------------------------------------------- larger: the writer kernels


@pytest.mark.parametrize("target", ["DCSR", "DIAI", "BSR(2, 2)"])
def test_large_results_are_written_by_the_generated_conversion(target, monkeypatch):
    """Above 65,536 entries ``Tensor.convert`` runs the generated writer; the result still equals
    SciPy's."""
    from ustc.ops import convert as generated

    written = []
    original = generated.written

    def spy(t, fmt):
        out = original(t, fmt)
        written.append(out)
        return out
    monkeypatch.setattr(generated, "written", spy)
    n = 30_000
    got = ustc.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), tensor_format=target)
    assert len(written) == 1 and written[0] is got         # COO -> target by the generated kernel
    want = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n), format="csr")
    assert got.format == ustc.TensorFormat.parse(target)
    csr = got.convert("CSR")
    np.testing.assert_array_equal(csr.pos(1), want.indptr)
    np.testing.assert_array_equal(csr.crd(1), want.indices)
    np.testing.assert_array_equal(csr.values, want.data)


def test_poisson_2d_by_kron():
    n = 40
    T = ustc.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    I = ustc.eye(n)
    L = ustc.kron(T, I) + ustc.kron(I, T)
    Ts = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    Is = sp.eye_array(n)
    np.testing.assert_array_equal(L.to_dense(), (sp.kron(Ts, Is) + sp.kron(Is, Ts)).toarray())


# --------------------------------------------------------------------------- errors and the budget


def test_shape_errors_name_the_operand():
    A, B = np.ones((3, 4)), np.ones((2, 5))
    with pytest.raises(ustc.ShapeError, match=r"vstack: blocks\[1\] has shape \(2, 5\), but the other blocks have "
                                              r"4 columns"):
        ustc.vstack([A, B])
    with pytest.raises(ustc.ShapeError, match=r"hstack: blocks\[1\] has shape \(2, 5\), but the other blocks have "
                                              r"3 rows"):
        ustc.hstack([A, B])
    with pytest.raises(ustc.ShapeError, match=r"block: blocks\[1\]\[1\] has shape \(2, 5\), but the other blocks "
                                              r"of blocks\[:\]\[1\] have 4 columns"):
        ustc.block([[A, A], [None, B]])
    with pytest.raises(ustc.ShapeError, match=r"kron: B has shape \(4,\); kron takes 2-D operands"):
        ustc.kron(A, np.ones(4))
    with pytest.raises(ustc.ShapeError, match=r"concatenate: operand 1 has shape \(3, 5\), operand 0 has shape "
                                              r"\(3, 4\); along axis 0"):
        ustc.concatenate([A, np.ones((3, 5))])
    with pytest.raises(ustc.ShapeError, match=r"axis 2 is out of range"):
        ustc.concatenate([A, A], axis=2)
    with pytest.raises(ustc.ShapeError, match=r"diags: diagonals\[1\] has length 2 but diagonal 1 of a 4 x 4 "
                                              r"matrix has 3 entries"):
        ustc.diags([np.ones(4), [1, 2]], [0, 1])
    with pytest.raises(ustc.ShapeError, match=r"offsets\[0\] = 5 is outside a matrix of shape \(3, 3\)"):
        ustc.diags([1.0], [5], shape=(3, 3))
    with pytest.raises(ustc.ShapeError, match="2 diagonals but 1 offsets"):
        ustc.diags([[1, 2], [3]], [0])
    with pytest.raises(ustc.ShapeError, match="eye: n must be a non-negative integer"):
        ustc.eye(-2)
    with pytest.raises(ustc.ShapeError, match="block: the rows of blocks have different lengths"):
        ustc.block([[A, None], [A]])
    with pytest.raises(ustc.ShapeError, match=r"vstack: blocks\[0\] has shape \(2, 3, 4\); vstack takes 2-D"):
        ustc.vstack([np.ones((2, 3, 4))])
    with pytest.raises(ustc.ShapeError, match="empty"):
        ustc.hstack([])


def test_argument_errors():
    with pytest.raises(ustc.UstcError, match=r"density must be in \[0, 1\]"):
        ustc.random(3, 3, 1.5)
    with pytest.raises(ustc.UstcError, match="rng= or seed="):
        ustc.random(3, 3, rng=1, seed=1)
    with pytest.raises(ustc.UstcError, match=r"blocks\[0\] is ndarray; blocks must be a list of rows"):
        ustc.block([np.ones((2, 2))])
    with pytest.raises(ustc.UstcError, match="operand 1 is None"):
        ustc.concatenate([np.ones(2), None])
    with pytest.raises(ustc.UstcError, match="blocks\\[0\\] is str"):
        ustc.vstack(["abc"])
    with pytest.raises(ustc.FormatError, match="has 3 dimensions, the result has 2"):
        ustc.eye(3, tensor_format="CSF(3)")


def test_device_operands_are_refused():
    A = ustc.Tensor.from_dense(np.eye(2), "CSR")
    A._device = "cuda"                      # what a tensor on a GPU reports (no GPU needed to check)
    with pytest.raises(ustc.DeviceError, match=r"vstack: blocks\[0\] is on 'cuda'"):
        ustc.vstack([A, A])


@pytest.mark.parametrize("build", [
    pytest.param(lambda: ustc.eye(10 ** 9), id="eye"),
    pytest.param(lambda: ustc.diags([1.0, 2.0], [0, 1], shape=(10 ** 9, 10 ** 9)), id="diags"),
    pytest.param(lambda: ustc.random(10 ** 6, 10 ** 6, 0.001), id="random"),
    pytest.param(lambda: ustc.kron(ustc.eye(50_000), ustc.eye(50_000)), id="kron"),
])
def test_sizes_over_the_budget_are_refused_before_allocating(build, monkeypatch):
    monkeypatch.setenv("USTC_MEMORY_BUDGET", str(50_000_000))
    tracemalloc.start()
    with pytest.raises(ustc.StorageError, match=r"more than the memory budget of 50,000,000 bytes \(USTC_MEMORY_BUDGET"):
        build()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 15_000_000   # kron's operands (two 50,000-entry identities) are all it built


def test_shapes_beyond_int64_are_refused():
    tall = sp.coo_array(([1.0], ([0], [0])), shape=(2 ** 40, 1))
    with pytest.raises(ustc.ShapeError, match=r"kron: the result would have shape \(1208925819614629174706176, "
                                              r"1\); dimension 0 exceeds the int64 coordinates"):
        ustc.kron(tall, tall)


# --------------------------------------------------------------------------- properties


def _matrix_in(draw, shape, fmt_names, seed):
    """A random operand of ``shape`` (a Tensor in a registry format, SciPy CSR or dense) and its
    contents."""
    kind = draw(st.sampled_from(["tensor", "scipy", "dense"]))
    x = rand_dense(shape, np.float64, 0.4, seed)
    if kind == "dense":
        return x, x
    if kind == "scipy":
        return sp.csr_array(x), x
    fmt = NAMED_2D[draw(st.sampled_from(fmt_names))]
    x = structured_fit(x, fmt)
    return ustc.Tensor.from_dense(x, fmt), x


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_block_of_random_grids_equals_scipy(data):
    """Random grids of random operands (Tensors in registry formats, SciPy, dense; None blocks,
    empty blocks) give SciPy's block_array, in a random registry target format."""
    names = sorted(NAMED_2D)
    heights = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3), label="heights")
    widths = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3), label="widths")
    grid, oracle_grid = [], []
    for i, h in enumerate(heights):
        row, oracle_row = [], []
        for j, w in enumerate(widths):
            if data.draw(st.booleans(), label=f"None at {i},{j}"):
                row.append(None)
                oracle_row.append(None)
            else:
                block, x = _matrix_in(data.draw, (h, w), names, 10 * i + j)
                row.append(block)
                oracle_row.append(sp.coo_array(x))
        grid.append(row)
        oracle_grid.append(oracle_row)
    want = sp.block_array(oracle_grid).toarray()
    target = NAMED_2D[data.draw(st.sampled_from(names), label="target")]
    check(lambda: ustc.block(grid, tensor_format=target), want.astype(np.float64), target)


@settings(max_examples=examples(30), deadline=None)
@given(a=st.tuples(st.integers(0, 4), st.integers(0, 4)), b=st.tuples(st.integers(0, 4), st.integers(0, 4)),
       target=st.sampled_from(sorted(NAMED_2D)), seed=st.integers(0, 1000))
def test_kron_property(a, b, target, seed):
    x, y = rand_dense(a, np.float64, 0.5, seed), rand_dense(b, np.int32, 0.5, seed + 1)
    fmt = NAMED_2D[target]
    check(lambda: ustc.kron(sp.coo_array(x), y, tensor_format=fmt), np.kron(x, y), fmt)
