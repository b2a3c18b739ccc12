"""Distributed SpMV / SpMM equal single-process results: partitions P in {1, 2, 3, 7} with
uneven and empty blocks, several format families, rectangular and complex operands; the bytes
each product sends equal the halo plan's count."""

from __future__ import annotations

import numpy as np
import pytest
from dist_helpers import random_sparse

import ustc
import ustc.distributed as ud
from ustc.formats import BSR

FORMATS = ["CSR", "COO", "CSC", "DCSR", "DIAI", BSR(2, 2)]
PARTITIONS = [1, 2, 3, 7, [0, 0, 5, 6, 23], [0, 23, 23]]     # counts; uneven bounds with empty blocks


@pytest.mark.parametrize("partition", PARTITIONS, ids=str)
def test_spmv_partitions(rt, partition):
    a = random_sparse(23, 23, seed=1)
    x = np.random.default_rng(2).standard_normal(23)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), partition)
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13, atol=1e-13)
    assert d.gather("CSR").to_dense().tolist() == a.toarray().tolist()


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_spmv_formats(rt, fmt):
    a = random_sparse(24, 24, seed=3)
    x = np.random.default_rng(4).standard_normal(24)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a).convert(fmt), [0, 7, 7, 24])
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13, atol=1e-13)


def test_block_format_per_block(rt):
    a = random_sparse(20, 20, seed=5)
    x = np.arange(20.0)
    pick = lambda rank, shape: "DIAI" if rank == 0 else "CSR"  # noqa: E731
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 2, block_format=pick, ghost_format="COO")
    assert d.plan_info()["formats"][0] == str(ustc.Tensor.from_dense(np.eye(2), "DIAI").format)
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13)


@pytest.mark.parametrize("partition", [1, 3, 7])
def test_rectangular_and_complex(rt, partition):
    a = random_sparse(17, 29, seed=6, dtype=np.complex128)
    x = np.random.default_rng(7).standard_normal(29) + 1j
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), partition)
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13, atol=1e-13)
    tall = random_sparse(29, 11, seed=8)
    dt = ud.DTensor.from_tensor(ustc.Tensor.from_package(tall), partition)
    np.testing.assert_allclose(dt @ np.arange(11.0), tall @ np.arange(11.0), rtol=1e-13)


@pytest.mark.parametrize("partition", [2, 7])
def test_spmm(rt, partition):
    a = random_sparse(21, 21, seed=9)
    x = np.random.default_rng(10).standard_normal((21, 3))
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), partition)
    mm = ud.Matmul(d, x, alpha=2.0)
    mm.plan()
    np.testing.assert_allclose(mm.execute(gather=True), 2 * (a @ x), rtol=1e-13, atol=1e-13)


def test_bytes_equal_halo_plan(rt):
    a = random_sparse(30, 30, density=0.1, seed=11)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 3)
    mm = ud.Matmul(d, np.ones(30))
    info = mm.plan()
    # exact count: entries of x outside each block that the block's rows touch
    ghosts = sum(len(np.setdiff1d(np.unique(a[r0:r1].indices), np.arange(r0, r1)))
                 for r0, r1 in (d.rows.range(b) for b in range(3)))
    assert info["entries"] == ghosts and info["bytes"] == 8 * ghosts
    before = mm.counters()
    mm.execute()
    after = mm.counters()
    assert sum(x["bytes"] - y["bytes"] for x, y in zip(after, before)) == info["bytes"]
    assert sum(x["messages"] - y["messages"] for x, y in zip(after, before)) == info["messages"]


def test_loader_and_file(rt, tmp_path):
    a = random_sparse(19, 19, seed=12)
    x = np.arange(19.0)
    d = ud.DTensor.from_loader(lambda r0, r1: a[r0:r1], (19, 19), 3)      # built on the workers
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13)
    path = tmp_path / "a.mtx"
    ustc.to_file(ustc.Tensor.from_package(a), path)
    f = ud.DTensor.from_file(path, 2)
    np.testing.assert_allclose(f @ x, a @ x, rtol=1e-13)


def test_shape_errors(rt):
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(6, 6)), 2)
    with pytest.raises(ustc.ShapeError):
        ud.Matmul(d, np.ones(5))
    with pytest.raises(ustc.ShapeError):
        ud.RowBlocks(6, bounds=[0, 4, 3, 6])
