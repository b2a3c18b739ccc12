"""Distributed SpGEMM equals single-process ustc.matmul and SciPy: the 2-D formats of the
registry as block formats, partitions P in {1, 2, 3, 7} with uneven and empty blocks, a B
whose row blocks do not follow A's column blocks, rectangular and complex operands; each
block fetches exactly the rows of B its columns touch and the bytes moved equal the plan."""

from __future__ import annotations

import numpy as np
import pytest
from dist_helpers import random_sparse

import ustc
import ustc.distributed as ud
from ustc import formats as F

# Every 2-D registry format; Structured (n:m) cannot hold a random pattern.
FORMATS = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED
           if nf.format().ndim == 2 and nf.name != "Structured"]
PARTITIONS = [1, 2, 3, 7, [0, 0, 9, 10, 23], [0, 23, 23]]


def _dense(c: ud.DTensor) -> np.ndarray:
    return c.gather("CSR").to_dense()


def _single(a, b) -> np.ndarray:
    out = ustc.matmul(ustc.Tensor.from_package(a), ustc.Tensor.from_package(b))
    return out.to_dense()


def _touched_rows(a, rows: ud.RowBlocks, b_rows: ud.RowBlocks) -> list[int]:
    """Rows of B that block d's rows of a touch and block d does not own, per block."""
    out = []
    for d in range(rows.parts):
        r0, r1 = rows.range(d)
        blk = a[r0:r1]
        used = np.unique(blk.indices[blk.data != 0])
        lo, hi = b_rows.range(d)
        out.append(int(np.count_nonzero((used < lo) | (used >= hi))))
    return out


@pytest.mark.parametrize("partition", PARTITIONS, ids=str)
def test_partitions(rt, partition):
    a, b = random_sparse(23, 23, 0.15, seed=1), random_sparse(23, 23, 0.15, seed=2)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), partition)
    db = ud.DTensor.from_tensor(ustc.Tensor.from_package(b), partition)
    c = da @ db
    assert isinstance(c, ud.DTensor) and c.rows == da.rows and c.shape == (23, 23)
    np.testing.assert_allclose(_dense(c), (a @ b).toarray(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(_dense(c), _single(a, b), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(c @ np.ones(23), (a @ b) @ np.ones(23), rtol=1e-12)   # its halo plan works


@pytest.mark.parametrize("fmt", FORMATS)
def test_registry_formats(rt, fmt):
    a, b = random_sparse(20, 20, 0.2, seed=3), random_sparse(20, 20, 0.2, seed=4)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a).convert(fmt), [0, 7, 7, 20])
    db = ud.DTensor.from_tensor(ustc.Tensor.from_package(b).convert(fmt), [0, 7, 7, 20])
    c = ud.matmul(da, db)
    assert c.plan_info()["formats"][0] == da.plan_info()["formats"][0]      # A's block format
    np.testing.assert_allclose(_dense(c), (a @ b).toarray(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("partition", [1, 3, 7])
def test_rectangular_and_complex(rt, partition):
    a = random_sparse(17, 29, 0.2, seed=5, dtype=np.complex128)
    b = random_sparse(29, 11, 0.2, seed=6)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), partition)
    db = ud.DTensor.from_tensor(ustc.Tensor.from_package(b), partition)
    mm = ud.Matmul(da, db, alpha=2.0)
    mm.plan()
    c = mm.execute()
    assert c.dtype == np.complex128 and c.shape == (17, 11) and c.cols == db.cols
    np.testing.assert_allclose(_dense(c), 2 * (a @ b).toarray(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("bounds", [[0, 3, 3, 29], [0, 29, 29, 29], [0, 0, 0, 29]], ids=str)
def test_b_rows_not_following_a_columns(rt, bounds):
    """B's row blocks differ from A's column blocks: a block's local columns may live elsewhere."""
    a, b = random_sparse(20, 29, 0.2, seed=10), random_sparse(29, 8, 0.3, seed=11)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 3)
    db = ud.DTensor.from_tensor(ustc.Tensor.from_package(b), bounds)
    mm = ud.Matmul(da, db)
    info = mm.plan()
    assert info["rows_fetched"] == _touched_rows(a, da.rows, db.rows)
    np.testing.assert_allclose(_dense(mm.execute()), (a @ b).toarray(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("partition", [3, 7, [0, 0, 12, 12, 30]], ids=str)
def test_fetches_exactly_touched_rows_and_bytes_equal_plan(rt, partition):
    a = random_sparse(30, 30, 0.08, seed=7)
    b = random_sparse(30, 30, 0.1, seed=8, dtype=np.complex128)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), partition)
    db = ud.DTensor.from_tensor(ustc.Tensor.from_package(b), partition)
    mm = ud.Matmul(da, db)
    info = mm.plan()
    assert info["rows_fetched"] == _touched_rows(a, da.rows, db.rows)
    # each fetched row carries its count and its entries (int64 column, complex128 value)
    rows = sum(_touched_rows(a, da.rows, db.rows))
    assert info["bytes"] == 8 * rows + (8 + 16) * info["entries"]
    before = mm.counters()
    c = mm.execute()
    after = mm.counters()
    assert sum(x["bytes"] - y["bytes"] for x, y in zip(after, before)) == info["bytes"]
    assert sum(x["messages"] - y["messages"] for x, y in zip(after, before)) == info["messages"]
    np.testing.assert_allclose(_dense(c), (a @ b).toarray(), rtol=1e-13, atol=1e-13)
    c2 = mm.execute()                                     # planned once, executed again
    np.testing.assert_allclose(_dense(c2), _dense(c), rtol=0, atol=0)
    mm.free()


def test_one_block_moves_nothing_and_result_format(rt):
    a = random_sparse(12, 12, 0.3, seed=9)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 1)
    mm = ud.Matmul(da, da, block_format="COO")
    assert mm.plan()["messages"] == 0 and mm.plan_info["bytes"] == 0
    c = mm.execute()
    assert c.plan_info()["formats"] == [str(F.COO(2))]
    np.testing.assert_allclose(_dense(c), (a @ a).toarray(), rtol=1e-13)


def test_errors(rt):
    d2 = ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(6, 6)), 2)
    d3 = ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(6, 6)), 3)
    d5 = ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(5, 5)), 2)
    with pytest.raises(ustc.ShapeError):
        d2 @ d3                                       # block counts differ
    with pytest.raises(ustc.ShapeError):
        d2 @ d5
    with pytest.raises(ustc.UstcError):
        ud.Matmul(d2, d2, c=d2)
