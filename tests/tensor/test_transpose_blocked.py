"""The blocked counting transpose (``fastpaths.transposed`` where entries land far from the
diagonal): each chunk partitions its entries into a few blocks of output rows, then every block is
sorted by row through sub-blocks (``kernels.partition_blocks``, ``sort_blocks``), the row within
the block travelling in the low bits of the major coordinate (packed) or in a COO target's row
array. Every result equals the NumPy pack oracle buffer for buffer; inputs are never written."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from storage_oracle import assert_same_storage, oracle
from test_convert import rand_dense
from ustc import Tensor
from ustc import formats as F
from ustc.tensor import fastpaths
from ustc.tensor.fastpaths import Blocking, blocking
from ustc.tensor.tensor import as_format

FAMILY = {"CSR": F.CSR, "CSC": F.CSC, "COO": F.COO(2),
          "COO by columns": as_format("(i, j) -> (j : compressed(nonunique), i : singleton)")}
TRANSPOSES = [(s, d) for s in FAMILY for d in FAMILY
              if fastpaths.family(FAMILY[s]).major != fastpaths.family(FAMILY[d]).major]


def force(monkeypatch, shift: int, sub: int, packed: bool | None = None, chunks: bool = True):
    """Every transpose blocked with blocks of ``2^shift`` rows and sub-blocks of ``2^sub``; ``packed``
    None keeps :func:`blocking`'s choice of where the row travels, False carries it in the COO rows
    (targets without them keep the packing); ``chunks`` splits the source from the first entry on."""
    monkeypatch.setattr(fastpaths, "BLOCKED_FROM_ROWS", 0)
    monkeypatch.setattr(fastpaths, "BLOCKED_WINDOW", -1)
    monkeypatch.setattr(fastpaths, "BLOCK_BUFFER", 1e9)
    if chunks:
        monkeypatch.setattr(fastpaths, "PARALLEL_TRANSPOSE", 0)

    def cut(n_out, n_in, nnz, entry, crd_dtype, rows):
        chosen = real(n_out, n_in, nnz, entry, crd_dtype, rows)
        keep = chosen.packed if chosen is not None else True
        return Blocking(shift, sub, keep if packed is None else (packed or not rows))

    real = blocking
    monkeypatch.setattr(fastpaths, "blocking", cut)


def snapshot(t: Tensor):
    return [b.copy() for b in t.buffers.values()], t.values.copy()


def assert_unchanged(t: Tensor, saved) -> None:
    for b, s in zip(t.buffers.values(), saved[0]):
        np.testing.assert_array_equal(b, s)
    np.testing.assert_array_equal(t.values, saved[1])


def contents(kind: str, shape, seed: int) -> np.ndarray:
    x = np.zeros(shape) if kind == "zero" else rand_dense(shape, np.float64, 0.3, seed=seed)
    if kind == "heavy" and x.size:
        x[:, shape[1] // 2] = np.arange(1, shape[0] + 1)  # one output row holding every major
    return x


@pytest.mark.parametrize("shape", [(0, 0), (0, 7), (7, 0), (1, 19), (19, 1), (37, 53)], ids=str)
@pytest.mark.parametrize("kind", ["random", "zero", "heavy", "explicit zeros"])
@pytest.mark.parametrize("mode", ["packed", "rows"])
def test_blocked_transposes_equal_the_oracle(shape, kind, mode, monkeypatch):
    """Blocks of 8 rows in sub-blocks of 2 (4 sub-blocks, a partial last block and sub-block on
    53 rows), the source split into chunks; explicit zeros dropped; the row packed in the major
    coordinate or carried in the COO rows."""
    force(monkeypatch, 3, 1, packed=mode == "packed")
    x = contents(kind, shape, seed=shape[0] + 7)
    for s, d in TRANSPOSES:
        a = Tensor.from_dense(x, FAMILY[s])
        if kind == "explicit zeros" and a.nse:
            a._values[::3] = 0
        saved = snapshot(a)
        got = a.convert(FAMILY[d])
        assert_same_storage(got, oracle(a, FAMILY[d]))
        assert_unchanged(a, saved)


@pytest.mark.parametrize("shift, sub", [(0, 0), (2, 2), (4, 0), (6, 3)])
def test_block_and_sub_block_sizes(shift, sub, monkeypatch):
    """Blocks of one row, blocks that are one sub-block, sub-blocks of one row, blocks wider than
    the matrix: one chunk and several."""
    x = contents("random", (29, 41), seed=3)
    for chunks in (False, True):
        with monkeypatch.context() as m:
            force(m, shift, sub, chunks=chunks)
            for s, d in TRANSPOSES:
                a = Tensor.from_dense(x, FAMILY[s])
                assert_same_storage(a.convert(FAMILY[d]), oracle(a, FAMILY[d]))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128, np.bool_])
def test_blocked_dtypes(dtype, monkeypatch):
    force(monkeypatch, 3, 1)
    x = rand_dense((31, 26), dtype, 0.3, seed=4)
    for s, d in (("CSR", "CSC"), ("CSC", "CSR"), ("COO", "CSC"), ("CSC", "COO")):
        a = Tensor.from_dense(x, FAMILY[s])
        assert_same_storage(a.convert(FAMILY[d]), oracle(a, FAMILY[d]))


def test_scipy_sources_with_int64_indices(monkeypatch):
    """SciPy int64 indices, as from_package hands them over; the outputs take the index policy's."""
    sp = pytest.importorskip("scipy.sparse")
    force(monkeypatch, 4, 2)
    csr = sp.random_array((300, 200), density=0.05, format="csr", random_state=5, dtype=np.float64)
    csr.indices, csr.indptr = csr.indices.astype(np.int64), csr.indptr.astype(np.int64)
    for source in (csr, csr.tocsc(), csr.tocoo()):
        a = Tensor.from_package(source)
        for target in ("CSR", "CSC", "COO"):
            assert_same_storage(a.convert(target), oracle(a, target))


def test_blocking_choices():
    """Blocks bounded by the partition's streams (2 a block packed, 3 with the rows), packed when
    the major coordinate has the bits, else the rows when the target has them, else more blocks;
    None where blocks would be tiny; sub-blocks about SUB_BLOCK_BYTES, at most 2^SUB_SPLIT a block."""
    i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
    cut = blocking(200_000, 200_000, 2_000_000, 12, i32, rows=False)
    assert cut == Blocking(12, 8, True)
    assert -(-200_000 >> cut.shift) * 2 <= fastpaths.PARTITION_STREAMS
    assert blocking(200_000, 200_000, 2_000_000, 12, i64, rows=False) == Blocking(12, 8, True)
    rows = blocking(200_000, 1 << 20, 2_000_000, 16, i32, rows=True)        # 20 bits of majors: 11 free
    assert not rows.packed and -(-200_000 >> rows.shift) * 3 <= fastpaths.PARTITION_STREAMS
    more = blocking(200_000, 1 << 20, 2_000_000, 12, i32, rows=False)       # no rows: as many as fit
    assert more.packed and more.shift == 11
    assert blocking(200_000, 1 << 26, 2_000_000, 12, i32, rows=False) is None  # 5 bits free
    assert blocking(500, 500, 10, 12, i32, rows=False) is None              # blocks of 32 rows
    dense_rows = blocking(1 << 20, 1 << 20, 100 << 20, 12, i64, rows=False)  # 1,200 bytes a row
    assert dense_rows.sub == dense_rows.shift - fastpaths.SUB_SPLIT
    with pytest.raises(ValueError):
        Blocking(3, 4, True)


def test_bunched_entries_take_the_direct_scatter(monkeypatch):
    """A block holding most entries would need sort buffers past BLOCK_BUFFER of the output: the
    direct scatter runs instead (same result); scattered entries take the blocks."""
    monkeypatch.setattr(fastpaths, "BLOCKED_FROM_ROWS", 0)
    monkeypatch.setattr(fastpaths, "BLOCKED_WINDOW", -1)
    monkeypatch.setattr(fastpaths, "MIN_BLOCK_SHIFT", 0)
    monkeypatch.setattr(fastpaths, "PARTITION_STREAMS", 16)
    calls = []
    original = fastpaths._blocked
    monkeypatch.setattr(fastpaths, "_blocked", lambda *a: calls.append(1) or original(*a))
    n, rng = 4000, np.random.default_rng(6)
    rows, cols = rng.integers(0, n, 40 * n), rng.integers(0, n, 40 * n)
    scattered = Tensor.from_coo((rows, cols), rng.random(40 * n) + 1, (n, n), "CSR")
    bunched = Tensor.from_coo((rows, cols % 50), rng.random(40 * n) + 1, (n, n), "CSR")
    for a, want in ((scattered, [1]), (bunched, [])):
        calls.clear()
        assert_same_storage(a.convert("CSC"), oracle(a, "CSC"))
        assert calls == want


def test_scattered_entries_take_the_blocks_by_default(monkeypatch):
    """With the shipped constants (only the window lowered to this size), a random matrix is
    transposed through the blocks, a banded one directly."""
    monkeypatch.setattr(fastpaths, "BLOCKED_WINDOW", 1 << 16)
    calls = []
    original = fastpaths._blocked
    monkeypatch.setattr(fastpaths, "_blocked", lambda *a: calls.append(a[8]) or original(*a))
    n, rng = 1 << 15, np.random.default_rng(7)
    scattered = Tensor.from_coo((rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)), rng.random(4 * n) + 1,
                                (n, n), "CSC")
    banded = ustc.diags([np.ones(n - 1), np.full(n, 2.0), np.ones(n - 1)], [-1, 0, 1], tensor_format="CSR")
    for a, target, want in ((scattered, "COO", 1), (banded, "CSC", 0)):
        calls.clear()
        assert_same_storage(a.convert(target), oracle(a, target))
        assert len(calls) == want
