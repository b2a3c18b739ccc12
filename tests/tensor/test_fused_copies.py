"""Conversions that copy in one fused pass and dense selections routed through the conversion:

* CSR -> COO (same major order) expands the rows while it copies coordinates and values
  (``kernels.rows_to_coo``); COO -> CSR marks the row offsets while it copies
  (``kernels.coo_to_rows``) and closes them with a parallel running maximum (``kernels.run_max``);
* ``Tensor.from_dense`` / ``sparsify`` / ``sparse_relu`` into any other matrix format convert the
  selection held as a CSR (the generated writer where it applies, as ``from_package(x).convert``).

Every result equals the NumPy pack oracle buffer for buffer; the default copies (no buffer shared
with the source), ``copy=False`` shares; inputs are never written."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from fitting import structured_fit
from storage_oracle import assert_same_storage, oracle
from ustc import Tensor
from ustc import formats as F
from ustc.errors import StorageError
from ustc.tensor import fastpaths, kernels
from ustc.tensor.tensor import as_format

REGISTRY_2D = {nf.name: nf.format() for nf in F.NAMED if nf.format().ndim == 2}
COO_FORMATS = {name: fmt for name, fmt in REGISTRY_2D.items() if fastpaths.coo_like(fmt)}
CSR_FORMATS = {name: fmt for name, fmt in REGISTRY_2D.items()
               if (fam := fastpaths.family(fmt)) is not None and fam.kind == "csr"}
SHAPES = [(0, 0), (0, 5), (5, 0), (1, 13), (13, 1), (17, 29), (40, 9)]
DTYPES = [np.float64, np.float32, np.int32, np.int64, np.complex128, np.bool_]
COLUMN_COO = as_format("(i, j) -> (j : compressed(nonunique), i : singleton)")


def sample(shape, dtype, density=0.3, seed=0):
    rng = np.random.default_rng(seed)
    keep = rng.random(shape) < density
    if np.dtype(dtype) == np.bool_:
        return keep
    x = np.where(keep, rng.integers(1, 9, shape) * rng.choice([-1, 1], shape), 0).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * keep * rng.integers(0, 3, shape)
    return x


@pytest.fixture(params=[False, True], ids=["one chunk", "chunks"])
def chunks(request, monkeypatch):
    """One thread's range, or the entries split into the threads' ranges from the first one on."""
    if request.param:
        monkeypatch.setattr(fastpaths, "PARALLEL_TRANSPOSE", 0)
    return request.param


def snapshot(t: Tensor):
    return {k: b.copy() for k, b in t.buffers.items()}, t.values.copy()


def assert_unchanged(t: Tensor, saved) -> None:
    for k, b in saved[0].items():
        np.testing.assert_array_equal(t.buffers[k], b)
    np.testing.assert_array_equal(t.values, saved[1])


def assert_no_sharing(got: Tensor, src: Tensor) -> None:
    for a in (*got.buffers.values(), got.values):
        for b in (*src.buffers.values(), src.values):
            assert not np.shares_memory(a, b)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("contents", ["random", "zero", "full row"])
@pytest.mark.parametrize("src_name", sorted(CSR_FORMATS))
def test_csr_family_into_coo_is_the_fused_copy(src_name, shape, contents, chunks):
    x = np.zeros(shape) if contents == "zero" else sample(shape, np.float64, seed=len(shape) + shape[0])
    if contents == "full row" and x.size:
        x[shape[0] // 2] = np.arange(1, shape[1] + 1)
    a = Tensor.from_dense(x, CSR_FORMATS[src_name])
    saved = snapshot(a)
    for dst in (*COO_FORMATS.values(), COLUMN_COO):
        got = a.convert(dst)
        assert_same_storage(got, oracle(a, dst))
        assert_no_sharing(got, a)
        np.testing.assert_array_equal(got.to_dense(), x)
    assert_unchanged(a, saved)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes_both_ways(dtype, chunks):
    x = sample((23, 31), dtype, seed=4)
    for src, dst in ((F.CSR, F.COO(2)), (F.COO(2), F.CSR), (F.CSC, COLUMN_COO), (COLUMN_COO, F.CSC)):
        a = Tensor.from_dense(x, src)
        saved = snapshot(a)
        got = a.convert(dst)
        assert_same_storage(got, oracle(a, dst))
        assert_no_sharing(got, a)
        assert_unchanged(a, saved)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("contents", ["random", "zero", "sparse rows"])
def test_coo_into_csr_marks_offsets_while_copying(shape, contents, chunks):
    x = {"random": lambda: sample(shape, np.float64, seed=6), "zero": lambda: np.zeros(shape),
         "sparse rows": lambda: sample(shape, np.float64, density=0.04, seed=7)}[contents]()
    for src, dst in ((F.COO(2), F.CSR), (COLUMN_COO, F.CSC)):
        a = Tensor.from_dense(x, src)
        saved = snapshot(a)
        got = a.convert(dst)
        assert_same_storage(got, oracle(a, dst))
        assert_no_sharing(got, a)
        assert_unchanged(a, saved)


@pytest.mark.parametrize("index", [np.int32, np.int64], ids=["int32", "int64"])
def test_index_widths_of_scipy_sources(index, chunks):
    sp = pytest.importorskip("scipy.sparse")
    x = sample((37, 300), np.float32, density=0.2, seed=8)
    csr = sp.csr_array(x)
    csr.indptr, csr.indices = csr.indptr.astype(index), csr.indices.astype(index)
    coo = csr.tocoo()
    coo.coords = tuple(c.astype(index) for c in coo.coords)
    for src, dst in ((csr, "COO"), (coo, "CSR")):
        a = Tensor.from_package(src)
        got = a.convert(dst)
        assert_same_storage(got, oracle(a, dst))
        assert_no_sharing(got, a)
        np.testing.assert_array_equal(got.to_dense(), x)


@pytest.mark.parametrize("fmt", ["(i, j) -> (i : compressed(nonunique), j : singleton), posWidth = 64, crdWidth = 16",
                                 "(i, j) -> (i : compressed(nonunique), j : singleton), crdWidth = 64"])
def test_coo_targets_with_index_widths(fmt, chunks):
    x = sample((19, 41), np.float64, seed=9)
    a = Tensor.from_dense(x, "CSR")
    target = as_format(fmt)
    assert_same_storage(a.convert(target), oracle(a, target))


def test_explicit_zeros_are_dropped_and_copy_false_still_shares(chunks):
    x = sample((30, 20), np.float64, seed=10)
    a = Tensor.from_dense(x, "CSR")
    a._values[::4] = 0  # stored zeros: not stored in the result (the generic path drops them)
    for dst in ("COO", COLUMN_COO):
        assert_same_storage(a.convert(dst), oracle(a, dst))
    b = Tensor.from_dense(x, "CSR")
    shared = b.convert("COO", copy=False)
    assert np.shares_memory(shared.values, b.values)
    assert np.shares_memory(shared.buffers[(1, "crd")], b.buffers[(1, "crd")])
    back = shared.convert("CSR", copy=False)
    assert np.shares_memory(back.values, b.values)


def test_the_fused_kernels_run_and_the_writer_does_not(monkeypatch):
    import ustc.ops.convert as ops_convert

    calls = []
    for name in ("rows_to_coo", "coo_to_rows"):
        original = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _o=original, _n=name: calls.append(_n) or _o(*a))
    monkeypatch.setattr(ops_convert, "written", lambda *a, **k: pytest.fail("the writer ran"))
    x = sample((300, 200), np.float64, seed=11)
    Tensor.from_dense(x, "CSR").convert("COO")
    Tensor.from_dense(x, "COO").convert("CSR")
    assert calls == ["rows_to_coo", "coo_to_rows"]


@pytest.mark.parametrize("n", [0, 1, 2, 7, 100, 4097])
@pytest.mark.parametrize("parts", [1, 2, 3, 8])
def test_run_max_is_the_running_maximum(n, parts):
    rng = np.random.default_rng(n + parts)
    pos = np.where(rng.random(n) < 0.3, np.arange(n), 0).astype(np.int64)
    want = np.maximum.accumulate(pos) if n else pos.copy()
    kernels.run_max(pos, parts)
    np.testing.assert_array_equal(pos, want)


# -- dense selections routed through the conversion ------------------------------------------

OTHER_TARGETS = {name: fmt for name, fmt in REGISTRY_2D.items()
                 if fastpaths.family(fmt) is None and not fastpaths.coo_like(fmt) and not fmt.all_dense}


def _first_per_leaf_type(names) -> list[str]:
    """The first of ``names`` for each type of leaf level (its class): the writer's code differs by
    the level it stores values under (compressed, dense, range, delta, structured)."""
    leaves = {}
    for name in names:
        leaves.setdefault(type(OTHER_TARGETS[name].levels[-1].type), name)
    return list(leaves.values())


# every target in float32; int64 (another value width, integers) on one target per leaf type
DENSE_CASES = [(np.float32, name) for name in sorted(OTHER_TARGETS)] \
    + [(np.int64, name) for name in _first_per_leaf_type(OTHER_TARGETS)]


@pytest.mark.parametrize("shape", [(0, 0), (1, 16), (16, 1), (12, 20), (64, 96)], ids=str)
@pytest.mark.parametrize("dtype, name", DENSE_CASES, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_from_dense_equals_the_oracle(name, shape, dtype, monkeypatch):
    from ustc.ops import convert as ops_convert

    monkeypatch.setattr(ops_convert, "COMPILE_FROM", 0)  # the generated writer from the first entry on
    fmt = OTHER_TARGETS[name]
    x = structured_fit(sample(shape, dtype, seed=12), fmt)
    saved = x.copy()
    try:
        want = oracle(Tensor.from_dense(x, "CSR"), fmt)
    except StorageError as exc:
        with pytest.raises(StorageError, match=str(exc).split(":")[-1].strip()[:30]):
            Tensor.from_dense(x, fmt)
        return
    got = Tensor.from_dense(x, fmt)
    assert_same_storage(got, want)
    assert_same_storage(Tensor.from_package(x).convert(fmt), want)
    np.testing.assert_array_equal(x, saved)


@pytest.fixture
def structured():
    return F.Structured(2, 4)


def test_structured_from_dense_takes_the_writer(structured, monkeypatch):
    from ustc.ops import convert as ops_convert

    monkeypatch.setattr(ops_convert, "COMPILE_FROM", 0)
    calls = []
    original = ops_convert.written
    monkeypatch.setattr(ops_convert, "written", lambda *a: calls.append(1) or original(*a))
    x = structured_fit(sample((32, 64), np.float32, density=0.6, seed=13), structured)
    assert_same_storage(Tensor.from_dense(x, structured), oracle(Tensor.from_dense(x, "CSR"), structured))
    assert calls == [1]


def test_structured_over_full_blocks_raise_and_prune_keeps_the_largest(structured):
    x = sample((16, 32), np.float64, density=0.9, seed=14)
    x[0, :4] = [1, 2, 3, 4]
    with pytest.raises(StorageError, match="more than 2 of 4; pass prune=True"):
        Tensor.from_dense(x, structured)
    with pytest.raises(StorageError, match="more than 2 of 4"):
        ustc.sparse_relu(np.abs(x), structured)
    got = Tensor.from_dense(x, structured, prune=True)
    assert_same_storage(got, oracle(Tensor.from_dense(x, "CSR"), structured, prune=True))
    np.testing.assert_array_equal(got.to_dense()[0, :4], [0, 0, 3, 4])


def test_sparsify_and_relu_into_structured(structured):
    rng = np.random.default_rng(15)
    x = structured_fit(rng.standard_normal((24, 40)), structured)
    where = np.abs(x) > 0.7
    got = ustc.sparsify(x, structured, where=where)
    assert_same_storage(got, oracle(Tensor.from_dense(np.where(where, x, 0), "CSR"), structured))
    relu = ustc.sparse_relu(x, structured)
    assert_same_storage(relu, oracle(Tensor.from_dense(np.maximum(x, 0), "CSR"), structured))
