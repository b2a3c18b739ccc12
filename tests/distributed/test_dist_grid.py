"""2-D (Grid2D) partitions: SpMV / SpMM over process grids of P in {1, 4, 6} blocks, uneven
and empty blocks, registry formats, rectangular and complex operands, against single-process
ustc.matmul and SciPy; the bytes one product sends (column all-gathers of x, row
reduce-scatters of partial y) equal the plan's count."""

from __future__ import annotations

import numpy as np
import pytest
from dist_helpers import random_sparse

import ustc
import ustc.distributed as ud
from ustc import formats as F

GRIDS = [(1, 1), (2, 2), (1, 4), (4, 1), (2, 3), (3, 2), (6, 1), (1, 6),
         ([0, 0, 23], [0, 12, 17]),                  # 2 x 2, an empty row block
         ([0, 20, 23], [0, 0, 9, 17]),               # 2 x 3, an empty column block
         ([0, 0, 0, 23], [0, 17, 17])]               # 3 x 2, mostly empty
FORMATS = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED
           if nf.format().ndim == 2 and nf.name != "Structured"]


def _single(a, x):
    return ustc.matmul(ustc.Tensor.from_package(a), x)


@pytest.mark.parametrize("rows, cols", GRIDS, ids=str)
def test_grids(rt, rows, cols):
    a = random_sparse(23, 17, 0.3, seed=1)
    x = np.random.default_rng(2).standard_normal(17)
    grid = ud.Grid2D(23, 17, rows, cols)
    assert grid.parts in (1, 4, 6)
    g = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), grid)
    assert isinstance(g, ud.GridTensor)
    np.testing.assert_allclose(g @ x, _single(a, x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g @ x, a @ x, rtol=1e-13, atol=1e-13)
    assert g.gather().to_dense().tolist() == a.toarray().tolist()


@pytest.mark.parametrize("fmt", FORMATS)
def test_block_formats(rt, fmt):
    a = random_sparse(20, 20, 0.25, seed=3)
    x = np.random.default_rng(4).standard_normal(20)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a).convert(fmt), ud.Grid2D(20, 20, 2, [0, 3, 3, 20]))
    np.testing.assert_allclose(g @ x, a @ x, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape", [(2, 2), (3, 2), (1, 6)], ids=str)
def test_complex_rectangular_spmm(rt, shape):
    a = random_sparse(13, 31, 0.2, seed=5, dtype=np.complex128)
    x = np.random.default_rng(6).standard_normal((31, 3)) + 0.5j
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(13, 31, *shape))
    np.testing.assert_allclose(g @ x, a @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g @ x[:, 0].real, a @ x[:, 0].real, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape", [(2, 2), (2, 3), (6, 1)], ids=str)
def test_bytes_equal_plan(rt, shape):
    a = random_sparse(30, 30, 0.1, seed=7)
    grid = ud.Grid2D(30, 30, *shape)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), grid, block_format="COO")
    mm = ud.GridMatmul(g, np.ones((30, 2)))
    info = mm.plan()
    pr, pc = shape
    # x: every rank's part goes to the pr - 1 others of its column; y: partial rows to pc - 1 others
    x_entries = sum((hi - lo) * (pr - 1) for lo, hi in map(grid.x_range, range(grid.parts)))
    row_size = [hi - lo for lo, hi in (grid.rows.range(grid.coords(r)[0]) for r in range(grid.parts))]
    y_entries = sum(size - (hi - lo) for size, (lo, hi) in zip(row_size, map(grid.y_range, range(grid.parts))))
    assert info["x_entries"] == x_entries and info["y_entries"] == y_entries
    assert info["bytes"] == (x_entries + y_entries) * 2 * 8
    assert info["messages"] == grid.parts * (pr - 1 + pc - 1)
    before = mm.counters()
    y = mm.execute()
    after = mm.counters()
    assert sum(p["bytes"] - q["bytes"] for p, q in zip(after, before)) == info["bytes"]
    assert sum(p["messages"] - q["messages"] for p, q in zip(after, before)) == info["messages"]
    np.testing.assert_allclose(y, a @ np.ones((30, 2)), rtol=1e-13)
    mm.free()


def test_loader_and_layout(rt):
    a = random_sparse(19, 19, 0.3, seed=8)
    grid = ud.Grid2D(19, 19, 2, 3)
    g = ud.GridTensor.from_loader(lambda r0, r1: a[r0:r1], grid, block_format="DCSR")
    np.testing.assert_allclose(g @ np.arange(19.0), a @ np.arange(19.0), rtol=1e-13)
    # x parts in column-major grid order and y parts in rank order each cover 0..n once
    xs = [grid.x_range(r) for r in grid.x_order()]
    ys = [grid.y_range(r) for r in grid.y_order()]
    for parts in (xs, ys):
        assert parts[0][0] == 0 and parts[-1][1] == 19
        assert all(p[1] == q[0] for p, q in zip(parts, parts[1:]))


def test_errors(rt):
    a = random_sparse(6, 6)
    with pytest.raises(ustc.ShapeError):
        ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(6, 7, 2, 2))
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(6, 6, 2, 2))
    with pytest.raises(ustc.ShapeError):
        g @ np.ones(5)
    with pytest.raises(ustc.ShapeError):
        ud.Grid2D(6, 6, [0, 4, 3, 6], 1)
