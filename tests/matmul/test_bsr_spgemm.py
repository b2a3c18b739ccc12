"""BSR x BSR SpGEMM without leaving blocks (``kernels._bsr_spgemm``, ``routes.BsrProductRoute``).

Every product is checked against the dense NumPy product, its block pattern against the
boolean product of the operands' block patterns (explicit zero blocks stay stored, as in
SciPy's ``bsr @ bsr``), and the result validated as BSR with sorted, unique block columns.
The BSR format comes from the registry (``formats.by_name``); output formats other than
BSR(r, c) are enumerated from it too, and keep their own routes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ustc
from ustc import formats
from ustc.tensor.interop import plain_format

from matmul_helpers import named_2d, random_dense


def bsr(r: int, c: int):
    return formats.by_name("BSR", r, c)


def _block_pattern(t: ustc.Tensor) -> np.ndarray:
    """The stored blocks of a BSR tensor as a boolean block matrix."""
    nbr, nbc = t.level_shape[:2]
    pos, crd = t.pos(1), t.crd(1)
    out = np.zeros((nbr, nbc), dtype=bool)
    out[np.repeat(np.arange(nbr), np.diff(pos)), crd] = True
    return out


def _random(rng, shape, dtype, density=0.3):
    a = random_dense(rng, shape, density, np.float64 if np.dtype(dtype).kind in "iu" else dtype)
    if np.dtype(dtype).kind in "iu":
        a = np.round(a * 5).astype(dtype)
    return a.astype(dtype)


def _check(a: ustc.Tensor, b: ustc.Tensor, dense_a, dense_b, out_format=None, alpha=1):
    """``alpha * a @ b`` through Matmul: the BSR kernel's route, the dense product, the block pattern."""
    before = [(x.pos(1).copy(), x.crd(1).copy(), x.values.copy()) for x in (a, b)]
    if out_format is None and a.level_shape[3] != b.level_shape[3]:
        out_format = bsr(a.level_shape[2], b.level_shape[3])   # the default (a's BSR) has other blocks
    options = {"out_format": out_format} if out_format is not None else None
    mm = ustc.Matmul(a, b, alpha=alpha, options=options).plan()
    assert mm.plan_info.startswith("built-in kernel: BSR product"), mm.plan_info
    c = mm.execute()
    r, c_blk = a.level_shape[2], b.level_shape[3]
    assert plain_format(c.format) == plain_format(bsr(r, c_blk))
    assert c.shape == (dense_a.shape[0], dense_b.shape[1])
    c.validate()
    want = alpha * (dense_a @ dense_b)
    assert c.dtype == want.dtype
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(c.to_dense(), want)
    else:
        rtol = 1e-5 if want.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(c.to_dense(), want, rtol=rtol, atol=rtol)
    pattern = (_block_pattern(a).astype(np.int64) @ _block_pattern(b).astype(np.int64)) > 0
    np.testing.assert_array_equal(_block_pattern(c), pattern)
    crd, pos = c.crd(1), c.pos(1)
    for i in range(len(pos) - 1):
        assert np.all(np.diff(crd[pos[i]:pos[i + 1]]) > 0), "block columns sorted and unique"
    for x, (p, q, v) in zip((a, b), before):   # operands never written
        np.testing.assert_array_equal(x.pos(1), p)
        np.testing.assert_array_equal(x.crd(1), q)
        np.testing.assert_array_equal(x.values, v)
    return c


# (r, k, c): BSR(r, k) @ BSR(k, c), each block shape in one dtype and each dtype on one block shape:
# the kernel is compiled per block shape (loops of constant trip count) and per dtype, so this
# is one kernel a case (6), not block shapes x dtypes; 2 x 2 (its register path) in float64 and
# complex128, the generic path in every dtype. test_spgemm_kept's BSR cases reuse these kernels.
KERNELS = [((1, 1, 1), np.int32), ((2, 2, 2), np.float64), ((2, 2, 2), np.complex128),
           ((3, 2, 4), np.float64), ((4, 4, 4), np.int64), ((1, 2, 3), np.float32)]
SHAPES = [(8, 8, 8), (9, 7, 11), (1, 12, 5), (13, 5, 1), (0, 6, 4), (6, 0, 4), (6, 4, 0), (0, 0, 0)]


def _kernel_id(case) -> str:
    (r, k, c), dtype = case
    return f"{r}x{k}@{k}x{c}-{np.dtype(dtype).name}"


@pytest.mark.parametrize("blocks, dtype", KERNELS, ids=[_kernel_id(c) for c in KERNELS])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dense_oracle(rng, blocks, dtype, shape):
    r, k, c = blocks
    m, n, p = shape
    da, db = _random(rng, (m, n), dtype), _random(rng, (n, p), dtype)
    _check(ustc.Tensor.from_dense(da, bsr(r, k)), ustc.Tensor.from_dense(db, bsr(k, c)), da, db)


def test_mixed_dtypes_and_alpha(rng):
    da, db = _random(rng, (9, 8), np.float32), _random(rng, (8, 10), np.float64)
    _check(ustc.Tensor.from_dense(da, bsr(3, 2)), ustc.Tensor.from_dense(db, bsr(2, 4)), da, db, alpha=2.5)


def test_all_zero_operands(rng):
    da, db = np.zeros((6, 8)), _random(rng, (8, 4), np.float64)
    c = _check(ustc.Tensor.from_dense(da, bsr(2, 2)), ustc.Tensor.from_dense(db, bsr(2, 2)), da, db)
    assert c.nse == 0


def test_explicit_zero_blocks_stay_stored(rng):
    """A stored all-zero block still reaches its block columns (SciPy keeps them too)."""
    fmt = bsr(2, 2)
    # a: block row 0 holds block columns 0 (zeros) and 1; block row 1 block column 1 (zeros)
    a = ustc.Tensor(fmt, (4, 4), {(1, "pos"): np.array([0, 2, 3], np.int32),
                                  (1, "crd"): np.array([0, 1, 1], np.int32)},
                    np.concatenate([np.zeros(4), rng.standard_normal(4), np.zeros(4)]))
    db = _random(rng, (4, 6), np.float64, density=1.0)
    b = ustc.Tensor.from_dense(db, fmt)
    c = _check(a, b, a.to_dense(), db)
    assert c.nse == 2 * 3 * 4 and not c.to_dense()[2:].any()


def test_padding_of_edge_blocks_is_ignored(rng):
    """Values stored in the padding of edge blocks (rows, columns past the shape) never reach the
    product, and the product's own padding is zero."""
    fmt = bsr(2, 2)
    a = ustc.Tensor(fmt, (3, 3), {(1, "pos"): np.array([0, 2, 3], np.int32),
                                  (1, "crd"): np.array([0, 1, 1], np.int32)}, np.arange(1.0, 13.0))
    c = _check(a, a, a.to_dense(), a.to_dense())
    blocks = c.values.reshape(-1, 2, 2)
    last_col = c.crd(1) == 1
    assert not blocks[last_col][:, :, 1].any()
    assert not blocks[c.pos(1)[1]:][:, 1, :].any()


def test_unordered_nonunique_block_columns(rng):
    """Block columns out of order or repeated within a row (SciPy leaves them so): duplicates add up."""
    fmt = ustc.TensorFormat.parse("(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed(nonunique, nonordered), "
                                  "i mod 2 : dense, j mod 2 : dense)")
    values = rng.standard_normal(16)
    a = ustc.Tensor(fmt, (4, 6), {(1, "pos"): np.array([0, 3, 4], np.int32),
                                  (1, "crd"): np.array([2, 0, 2, 1], np.int32)}, values)
    db = _random(rng, (6, 4), np.float64, density=0.8)
    _check(a, ustc.Tensor.from_dense(db, bsr(2, 2)), a.to_dense(), db)


def test_sparse_unordered_output_format_named(rng):
    """An output BSR whose block-column level promises less (nonordered) takes the kernel too."""
    da, db = _random(rng, (8, 6), np.float64), _random(rng, (6, 8), np.float64)
    out = ustc.TensorFormat.parse("(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed(nonordered), "
                                  "i mod 2 : dense, j mod 2 : dense)")
    c = _check(ustc.Tensor.from_dense(da, bsr(2, 2)), ustc.Tensor.from_dense(db, bsr(2, 2)), da, db, out_format=out)
    assert c.format == out


@pytest.mark.parametrize("out_format", [f for f in named_2d() if f.values[0].holds_any_pattern])
def test_other_output_formats_keep_their_routes(rng, out_format):
    """Every rank-2 registry format that holds any pattern as the output of BSR x BSR: the dense
    product either way; the BSR kernel only where the output is BSR with the operands' outer blocks."""
    da, db = _random(rng, (8, 6), np.float64), _random(rng, (6, 8), np.float64)
    a, b = ustc.Tensor.from_dense(da, bsr(2, 2)), ustc.Tensor.from_dense(db, bsr(2, 2))
    mm = ustc.Matmul(a, b, options={"out_format": out_format}).plan()
    native = plain_format(out_format) == plain_format(bsr(2, 2))
    assert mm.plan_info.startswith("built-in kernel: BSR product") == native, mm.plan_info
    np.testing.assert_allclose(mm.execute().to_dense(), da @ db, rtol=1e-12, atol=1e-12)


def test_default_output_with_other_blocks_keeps_its_route(rng):
    """No output format named: a's BSR(3, 2), not the kernel's BSR(3, 4), so the product converts."""
    da, db = _random(rng, (9, 6), np.float64), _random(rng, (6, 8), np.float64)
    mm = ustc.Matmul(ustc.Tensor.from_dense(da, bsr(3, 2)), ustc.Tensor.from_dense(db, bsr(2, 4))).plan()
    assert "BSR product" not in mm.plan_info
    c = mm.execute()
    assert plain_format(c.format) == plain_format(bsr(3, 2))
    np.testing.assert_allclose(c.to_dense(), da @ db, rtol=1e-12, atol=1e-12)


def test_inner_blocks_that_differ_keep_their_route(rng):
    da, db = _random(rng, (8, 6), np.float64), _random(rng, (6, 9), np.float64)
    a, b = ustc.Tensor.from_dense(da, bsr(2, 2)), ustc.Tensor.from_dense(db, bsr(3, 3))
    mm = ustc.Matmul(a, b).plan()
    assert "BSR product" not in mm.plan_info
    np.testing.assert_allclose(mm.execute().to_dense(), da @ db, rtol=1e-12, atol=1e-12)


def test_repeated_executes_see_current_values(rng):
    da = _random(rng, (6, 6), np.float64)
    a = ustc.Tensor.from_dense(da, bsr(2, 2))
    mm = ustc.Matmul(a, a).plan()
    first = mm.execute().to_dense()
    a.values[:] *= 2
    np.testing.assert_allclose(mm.execute().to_dense(), 4 * first, rtol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_block_patterns(data):
    """Random block patterns (any density, empty block rows and columns) and ragged shapes."""
    (r, k, c), dtype = data.draw(st.sampled_from(KERNELS), label="blocks, dtype")
    nbr, nbk, nbc = (data.draw(st.integers(0, 7)) for _ in range(3))
    m = max(nbr * r - data.draw(st.integers(0, r - 1)), 0) if nbr else 0
    n = max(nbk * k - data.draw(st.integers(0, k - 1)), 0) if nbk else 0
    p = max(nbc * c - data.draw(st.integers(0, c - 1)), 0) if nbc else 0
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    density_a, density_b = data.draw(st.floats(0, 1)), data.draw(st.floats(0, 1))

    def blocky(rows, cols, rb, cb, density):
        nb = (-(-rows // rb), -(-cols // cb))
        keep = np.kron(rng.random(nb) < density, np.ones((rb, cb)))[:rows, :cols]
        x = rng.standard_normal((rows, cols)) * keep
        return np.round(x * 5).astype(dtype) if np.dtype(dtype).kind in "iu" else x.astype(dtype)

    da, db = blocky(m, n, r, k, density_a), blocky(n, p, k, c, density_b)
    _check(ustc.Tensor.from_dense(da, bsr(r, k)), ustc.Tensor.from_dense(db, bsr(k, c)), da, db)


@pytest.mark.parametrize("columns", ["dense span", "spread", "clustered"])
def test_long_rows_are_sorted(rng, columns):
    """Rows of more than 64 blocks take the long-row sort: read off the marks (a dense span),
    bucketed by high bits (spread), or the library sort (a cluster overfills one bucket)."""
    n_cols = 4000
    if columns == "dense span":
        cols = rng.permutation(300)[:250] + 1000
    elif columns == "spread":
        cols = rng.choice(n_cols, 900, replace=False)
    else:
        cols = np.concatenate([np.arange(100, 200), [n_cols - 1]])
    rows = rng.permutation(len(cols)) % 40          # b's 40 rows share the columns in random order
    db = np.zeros((40, n_cols))
    db[rows, cols] = rng.standard_normal(len(cols))
    da = _random(rng, (5, 40), np.float64, density=0.9)
    da[2] = 0                                       # an empty row beside the long ones
    for (r, k, c), dtype in (KERNELS[0], KERNELS[1]):   # the generic loop (1 x 1) and 2 x 2's register path
        x, y = (np.where(v != 0, np.round(v * 5) + np.sign(v), 0).astype(dtype) for v in (da, db))  # no zeros lost
        _check(ustc.Tensor.from_dense(x, bsr(r, k)), ustc.Tensor.from_dense(y, bsr(k, c)), x, y)
