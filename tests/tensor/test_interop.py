"""Zero-copy interop with NumPy, SciPy, PyTorch (and CuPy on a GPU machine), design §3.

Every path asserts shared memory both ways: ``from_package`` references the source's
buffers and ``to_package`` hands the same memory back.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import Tensor, TensorFormat
from ustc import formats as F

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR|BSR|BSC|CSC) tensor support is in beta")


def rand_dense(shape, density=0.4, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if mask.size and not mask.any():
        mask.flat[0] = True
    vals = rng.integers(1, 50, shape) * rng.choice([-1, 1], shape)
    return np.where(mask, vals, 0).astype(dtype)


def shares(a, b) -> bool:
    if torch.is_tensor(a):
        a = a.numpy()
    if torch.is_tensor(b):
        b = b.numpy()
    return np.shares_memory(np.asarray(a), np.asarray(b))


def dense_of(x):
    if torch.is_tensor(x):
        return x.to_dense().numpy() if x.layout != torch.strided else x.numpy()
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


# --------------------------------------------------------------------------- NumPy


def _numpy_cases():
    base = rand_dense((3, 4, 5), seed=1)
    return {
        "C": base,
        "F": np.asfortranarray(base),
        "transposed": base.transpose(2, 0, 1),
        "transposed-F": np.asfortranarray(base).transpose(1, 2, 0),
        "2d-T": rand_dense((6, 7), seed=2).T,
    }


@pytest.mark.parametrize("name", sorted(_numpy_cases()))
def test_numpy_zero_copy(name):
    x = _numpy_cases()[name]
    t = Tensor.from_package(x)
    assert t.package == "numpy"
    assert t.shape == x.shape
    assert all(lv.type.keyword == "dense" for lv in t.format.levels)
    assert shares(t.values, x)
    np.testing.assert_array_equal(np.asarray(t.to_dense()), x)
    back = t.to_package()
    assert isinstance(back, np.ndarray)
    assert shares(back, x)
    np.testing.assert_array_equal(back, x)
    # the level order is the memory order: values is x's memory read linearly
    assert t.values.flags.c_contiguous
    assert t.values.__array_interface__["data"][0] == x.__array_interface__["data"][0]


def test_numpy_level_order_follows_memory():
    x = np.asfortranarray(rand_dense((3, 4, 5)))
    t = Tensor.from_package(x)
    assert str(t.format) == "(d0, d1, d2) -> (d2 : dense, d1 : dense, d0 : dense)"
    y = rand_dense((3, 4, 5)).transpose(2, 0, 1)
    assert str(Tensor.from_package(y).format) == "(d0, d1, d2) -> (d1 : dense, d2 : dense, d0 : dense)"


def test_numpy_strided_view_copies_but_is_correct():
    x = rand_dense((4, 10))[:, ::3]
    t = Tensor.from_package(x)
    np.testing.assert_array_equal(t.to_package(), x)


def test_numpy_writes_through():
    x = rand_dense((3, 4))
    t = Tensor.from_package(x)
    t.values[0] = 123.0
    assert x.flat[0] == 123.0


def test_from_dense_default_shares_memory():
    x = rand_dense((3, 4, 5), seed=3)
    t = Tensor.from_dense(x)
    assert shares(t.values, x)
    assert t.format == F.Dense(3)
    t2 = Tensor.from_dense(np.asfortranarray(x), "(i, j, k) -> (k : dense, j : dense, i : dense)")
    assert shares(t2.values, t2.to_dense())


def test_zero_dim_rejected():
    with pytest.raises(ustc.FormatError):
        Tensor.from_package(np.array(3.0))


# --------------------------------------------------------------------------- SciPy

SCIPY_CLASSES = [sp.csr_array, sp.csr_matrix, sp.csc_array, sp.csc_matrix, sp.coo_array, sp.coo_matrix,
                 sp.bsr_array, sp.bsr_matrix, sp.dia_array, sp.dia_matrix]


def _scipy_source(cls, x):
    if cls in (sp.bsr_array, sp.bsr_matrix):
        s = cls(x, blocksize=(2, 2))
        s.sort_indices()
        s.sum_duplicates()
        assert s.has_canonical_format  # SciPy does not always claim it right after construction
        return s
    if cls in (sp.dia_array, sp.dia_matrix):
        d = sp.dia_array(x)
        data = np.zeros((len(d.offsets), x.shape[1]))
        data[:, :d.data.shape[1]] = d.data
        return cls((data, d.offsets.astype(np.int32)), shape=x.shape)  # full-width data: viewable as is
    return cls(x)


def _scipy_buffers(s):
    """(source array, matching ustc buffer key) pairs that must be shared."""
    kind = s.format
    if kind in ("csr", "csc", "bsr"):
        return [(s.indptr, (1, "pos")), (s.indices, (1, "crd"))]
    if kind == "coo":
        row, col = (s.coords if hasattr(s, "coords") else (s.row, s.col))
        return [(row, (0, "crd")), (col, (1, "crd"))]
    return [(s.offsets, (0, "crd"))]


@pytest.mark.parametrize("cls", SCIPY_CLASSES, ids=lambda c: c.__name__)
def test_scipy_zero_copy_both_ways(cls):
    x = rand_dense((6, 8), seed=4)
    s = _scipy_source(cls, x)
    t = Tensor.from_package(s)
    t.validate()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), x)
    assert shares(t.values, s.data)
    for src, key in _scipy_buffers(s):
        assert shares(t.buffers[key], src), key
        assert t.buffers[key].dtype == src.dtype == np.int32
    back = t.to_package()
    assert type(back) is cls
    assert back.format == s.format
    np.testing.assert_array_equal(back.toarray(), x)
    assert shares(back.data, s.data)
    for src, _ in _scipy_buffers(s):
        assert any(shares(b, src) for b, _ in _scipy_buffers(back))


@pytest.mark.parametrize("cls", SCIPY_CLASSES, ids=lambda c: c.__name__)
def test_scipy_derived_format_text(cls):
    s = _scipy_source(cls, rand_dense((6, 8), seed=5))
    t = Tensor.from_package(s)
    expected = {
        "csr": "(d0, d1) -> (d0 : dense, d1 : compressed)",
        "csc": "(d0, d1) -> (d1 : dense, d0 : compressed)",
        "coo": "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton)",
        "bsr": "(d0, d1) -> (d0 floordiv 2 : dense, d1 floordiv 2 : compressed, d0 mod 2 : dense, d1 mod 2 : dense)",
        "dia": str(F.DIAJ),
    }[s.format]
    assert str(t.format) == expected
    assert t.package == "scipy"


def test_scipy_dia_is_diaj():
    s = _scipy_source(sp.dia_array, rand_dense((5, 7), seed=6))
    t = Tensor.from_package(s)
    assert t.format == F.DIAJ
    np.testing.assert_array_equal(np.asarray(t.values).reshape(s.data.shape), s.data)


def test_scipy_dia_unsorted_offsets():
    data = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    s = sp.dia_array((data, np.array([1, -1, 0])), shape=(4, 4))
    t = Tensor.from_package(s)
    assert not t.format.level_is_ordered(0)
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), s.toarray())
    np.testing.assert_array_equal(t.convert(F.DIAJ).to_dense(), s.toarray())


def test_scipy_dia_short_data_row():
    x = np.zeros((4, 8))
    x[0, 0], x[1, 1], x[2, 3] = 1, 2, 3
    s = sp.dia_array(x)
    assert s.data.shape[1] < 8  # SciPy keeps a shorter data row; ustc pads a copy
    t = Tensor.from_package(s)
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), x)


def test_scipy_noncanonical_coo():
    rows, cols = np.array([1, 0, 1], dtype=np.int32), np.array([0, 2, 0], dtype=np.int32)
    s = sp.coo_array((np.array([1.0, 2.0, 3.0]), (rows, cols)), shape=(2, 3))
    assert not s.has_canonical_format
    t = Tensor.from_package(s)
    assert str(t.format) == ("(d0, d1) -> (d0 : compressed(nonunique, nonordered), "
                             "d1 : singleton(nonunique, nonordered))")
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), s.toarray())
    assert t.get_value(1, 0) == 4.0
    back = t.to_package()
    assert type(back) is sp.coo_array and shares(back.data, s.data)


def test_scipy_unsorted_and_duplicate_csr():
    s = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 0]), np.array([0, 3])), shape=(1, 3))
    t = Tensor.from_package(s)
    assert not t.format.level_is_ordered(1) and not t.format.level_is_unique(1)
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), [[5.0, 0.0, 1.0]])
    u = sp.csr_array((np.array([1.0, 2.0]), np.array([2, 0]), np.array([0, 2])), shape=(1, 3))
    u.has_sorted_indices = False
    tu = Tensor.from_package(u)
    assert not tu.format.level_is_ordered(1)
    np.testing.assert_array_equal(tu.to_dense(), [[2.0, 0.0, 1.0]])


def test_scipy_int64_indices_kept():
    x = rand_dense((5, 6), seed=7)
    s = sp.csr_array(x)
    s.indices = s.indices.astype(np.int64)
    s.indptr = s.indptr.astype(np.int64)
    t = Tensor.from_package(s)
    assert t.pos(1).dtype == np.int64 and t.crd(1).dtype == np.int64
    assert shares(t.crd(1), s.indices)


def test_scipy_unsupported_class():
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_package(sp.lil_array(rand_dense((3, 3))))


def test_scipy_validate_flag():
    s = sp.csr_array((np.array([1.0]), np.array([5]), np.array([0, 1])), shape=(1, 3), copy=False)
    t = Tensor.from_package(s)  # structural check only: accepted
    assert t.nse == 1
    with pytest.raises(ustc.StorageError):
        Tensor.from_package(s, validate=True)


def test_numpy_sparse_result_goes_to_scipy():
    x = rand_dense((5, 6), seed=8)
    for fmt, cls in ((F.CSR, sp.csr_array), (F.CSC, sp.csc_array), (F.COO(), sp.coo_array),
                     (F.BSR(5, 2), sp.bsr_array), (F.DIAJ, sp.dia_array)):
        t = Tensor.from_dense(x, fmt)
        p = t.to_package()
        assert type(p) is cls, fmt
        assert shares(p.data, t.values)
        np.testing.assert_array_equal(p.toarray(), x)


@pytest.mark.parametrize("fmt", [F.DCSR, F.DIAI, F.CCOL, F.CSF(2), F.DELTA(4), F.Structured(2, 4), F.SkewDIAJ,
                                 TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)")],
                         ids=lambda f: f.name or str(f))
def test_to_package_unsupported_format(fmt):
    x = np.zeros((4, 8))
    x[0, 0], x[1, 5], x[3, 2] = 1, 2, 3
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_dense(x, fmt).to_package()
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_dense(torch.from_numpy(x), fmt).to_package()


def test_crow_is_torch_hybrid_coo():
    x = np.zeros((4, 8))
    x[0, 0], x[1, 5], x[3, 2] = 1, 2, 3
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_dense(x, F.CROW).to_package()  # no SciPy class
    t = Tensor.from_dense(torch.from_numpy(x), F.CROW)
    p = t.to_package()  # torch: COO with one sparse and one dense dimension
    assert p.layout == torch.sparse_coo and p.sparse_dim() == 1 and p.dense_dim() == 1
    assert _vals(p).data_ptr() == t.values.data_ptr()
    np.testing.assert_array_equal(p.to_dense().numpy(), x)


def test_to_scipy_nondividing_bsr_raises_unsupported():
    x = np.zeros((5, 6))
    x[0, 1], x[4, 5] = 1, 2
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_dense(x, F.BSR(2, 3)).to_package()


def test_to_torch_nondividing_bsr_raises_unsupported():
    x = np.zeros((5, 6))
    x[0, 1], x[4, 5] = 1, 2
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_dense(torch.from_numpy(x), F.BSR(2, 3)).to_package()


def test_unknown_object_rejected():
    with pytest.raises(ustc.UnsupportedOperation):
        Tensor.from_package([[1, 2], [3, 4]])


# --------------------------------------------------------------------------- PyTorch


def _vals(s):
    """Stored values of a torch sparse tensor (``_values`` for COO: works uncoalesced too)."""
    return s._values() if s.layout == torch.sparse_coo else s.values()


def test_torch_dense_zero_copy():
    x = torch.from_numpy(rand_dense((3, 4, 5), seed=9))
    for src in (x, x.transpose(0, 2), x.permute(1, 2, 0)):
        t = Tensor.from_package(src)
        assert t.package == "torch"
        assert torch.is_tensor(t.values)
        assert t.values.data_ptr() == src.data_ptr()
        back = t.to_package()
        assert torch.is_tensor(back) and back.layout == torch.strided
        assert back.data_ptr() == src.data_ptr()
        assert torch.equal(back, src)


def _sparse_sources():
    x = torch.from_numpy(rand_dense((6, 8), seed=10))
    return {
        "coo": x.to_sparse(),
        "csr": x.to_sparse_csr(),
        "csc": x.to_sparse_csc(),
        "bsr": x.to_sparse_bsr((2, 2)),
        "bsc": x.to_sparse_bsc((3, 2)),
    }


def _torch_index_buffers(s):
    if s.layout == torch.sparse_coo:
        return [(s._indices(), None)]
    if s.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [(s.crow_indices(), "pos"), (s.col_indices(), "crd")]
    return [(s.ccol_indices(), "pos"), (s.row_indices(), "crd")]


@pytest.mark.parametrize("kind", ["coo", "csr", "csc", "bsr", "bsc"])
def test_torch_sparse_zero_copy_both_ways(kind):
    s = _sparse_sources()[kind]
    t = Tensor.from_package(s)
    t.validate()
    assert t.package == "torch"
    np.testing.assert_array_equal(np.asarray(t.to_dense()), s.to_dense().numpy())
    assert t.values.data_ptr() == _vals(s).data_ptr()
    for src, name in _torch_index_buffers(s):
        if name is None:  # COO: one (2, nnz) int64 buffer, viewed row by row
            assert t.crd(0).data_ptr() == src[0].data_ptr()
            assert t.crd(1).data_ptr() == src[1].data_ptr()
            assert t.crd(0).dtype == torch.int64
        else:
            level = 1
            assert getattr(t, name)(level).data_ptr() == src.data_ptr()
            assert getattr(t, name)(level).dtype == torch.int64
    back = t.to_package()
    assert back.layout == s.layout
    assert torch.equal(back.to_dense(), s.to_dense())
    assert _vals(back).data_ptr() == _vals(s).data_ptr()
    for (a, _), (b, _) in zip(_torch_index_buffers(back), _torch_index_buffers(s)):
        assert a.data_ptr() == b.data_ptr()


def test_torch_derived_formats():
    srcs = _sparse_sources()
    assert str(Tensor.from_package(srcs["coo"]).format) == "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton)"
    assert Tensor.from_package(srcs["csr"]).format == F.CSR
    assert Tensor.from_package(srcs["csc"]).format == F.CSC
    assert Tensor.from_package(srcs["bsr"]).format == F.BSR(2, 2)
    assert Tensor.from_package(srcs["bsc"]).format == F.BSC(3, 2)


def test_torch_coalesced_coo_round_trip_stays_coalesced():
    s = _sparse_sources()["coo"]
    assert s.is_coalesced()
    back = Tensor.from_package(s).to_package()
    assert back.is_coalesced()


def test_torch_uncoalesced_coo():
    idx = torch.tensor([[1, 0, 1], [0, 2, 0]])
    s = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0]), (2, 3))
    assert not s.is_coalesced()
    t = Tensor.from_package(s)
    assert not t.format.level_is_unique(0) and not t.format.level_is_ordered(0)
    assert not t.format.level_is_unique(1) and not t.format.level_is_ordered(1)
    t.validate()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), [[0, 0, 2.0], [4.0, 0, 0]])
    back = t.to_package()
    assert not back.is_coalesced()
    assert back._indices().data_ptr() == s._indices().data_ptr()
    assert torch.equal(back.to_dense(), s.to_dense())


def test_torch_hybrid_coo():
    x = torch.from_numpy(rand_dense((4, 5, 3), seed=11))
    x[1] = 0
    s = x.to_sparse(2)
    assert s.sparse_dim() == 2 and s.dense_dim() == 1
    t = Tensor.from_package(s)
    assert str(t.format) == "(d0, d1, d2) -> (d0 : compressed(nonunique), d1 : singleton, d2 : dense)"
    t.validate()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), x.numpy())
    assert t.values.data_ptr() == _vals(s).data_ptr()
    back = t.to_package()
    assert back.layout == torch.sparse_coo and back.sparse_dim() == 2 and back.dense_dim() == 1
    assert _vals(back).data_ptr() == _vals(s).data_ptr()
    assert torch.equal(back.to_dense(), x)


def test_torch_hybrid_csr():
    x = torch.from_numpy(rand_dense((4, 5, 2), seed=12))
    x[0, 1] = 0
    x[2] = 0
    s = x.to_sparse_csr(dense_dim=1)
    t = Tensor.from_package(s)
    assert str(t.format) == "(d0, d1, d2) -> (d0 : dense, d1 : compressed, d2 : dense)"
    t.validate()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), x.numpy())
    assert t.values.data_ptr() == s.values().data_ptr()
    assert t.pos(1).data_ptr() == s.crow_indices().data_ptr()
    back = t.to_package()
    assert back.layout == torch.sparse_csr
    assert back.values().data_ptr() == s.values().data_ptr()
    assert torch.equal(back.to_dense(), x)


def test_torch_batched_csr():
    x = torch.zeros(3, 4, 5, dtype=torch.float64)
    gen = np.random.default_rng(13)
    for b in range(3):  # torch needs the same nnz in every batch
        for r, c in zip(gen.choice(4, 3, replace=True), gen.choice(5, 3, replace=False)):
            x[b, r, c] = float(gen.integers(1, 9))
    s = x.to_sparse_csr()
    t = Tensor.from_package(s)
    assert t.format.batch_levels == 1
    assert t.format.levels[0].type.keyword == "batch"
    t.validate()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), x.numpy())
    assert t.pos(2).data_ptr() == s.crow_indices().data_ptr()
    back = t.to_package()
    assert back.layout == torch.sparse_csr
    assert back.crow_indices().data_ptr() == s.crow_indices().data_ptr()
    assert torch.equal(back.to_dense(), x)


def test_torch_from_dense_result_is_torch():
    x = torch.from_numpy(rand_dense((5, 6), seed=14))
    for fmt, layout in ((F.CSR, torch.sparse_csr), (F.CSC, torch.sparse_csc), (F.COO(), torch.sparse_coo),
                        (F.BSR(1, 2), torch.sparse_bsr), (F.BSC(5, 3), torch.sparse_bsc)):
        t = Tensor.from_dense(x, fmt)
        assert t.package == "torch" and torch.is_tensor(t.values)
        p = t.to_package()
        assert p.layout == layout
        assert torch.equal(p.to_dense(), x)
        assert _vals(p).data_ptr() == t.values.data_ptr()
    assert torch.is_tensor(Tensor.from_dense(x, F.CSR).convert(F.DCSR).to_dense())


def test_torch_conversion_keeps_package():
    s = _sparse_sources()["csr"]
    t = Tensor.from_package(s).convert(F.CSC)
    assert t.package == "torch"
    p = t.to_package()
    assert p.layout == torch.sparse_csc
    assert torch.equal(p.to_dense(), s.to_dense())


def test_torch_inputs_not_mutated():
    x = torch.from_numpy(rand_dense((5, 6), seed=15))
    s = x.to_sparse_csr()
    before = [a.clone() for a in (s.crow_indices(), s.col_indices(), s.values())]
    t = Tensor.from_package(s, validate=True)
    t.convert(F.CSC)
    t.convert(F.COO())
    t.to_dense()
    for a, b in zip(before, (s.crow_indices(), s.col_indices(), s.values())):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- CuPy (GPU machines only)


def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # CUDARuntimeError without a driver
        pytest.skip(f"no CUDA device ({exc})")
    return cupy


@pytest.mark.gpu
def test_cupy_dense_zero_copy():
    cupy = _cupy()
    x = cupy.asarray(rand_dense((3, 4, 5), seed=16))
    t = Tensor.from_package(x)
    assert t.device == "cuda"
    assert t.values.data.ptr == x.data.ptr
    back = t.to_package()
    assert back.data.ptr == x.data.ptr
    np.testing.assert_array_equal(cupy.asnumpy(back), cupy.asnumpy(x))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["csr", "csc", "coo"])
def test_cupy_sparse_zero_copy(kind):
    cupy = _cupy()
    import cupyx.scipy.sparse as csp

    x = rand_dense((6, 8), seed=17)
    s = {"csr": csp.csr_matrix, "csc": csp.csc_matrix, "coo": csp.coo_matrix}[kind](cupy.asarray(x))
    t = Tensor.from_package(s)
    assert t.device == "cuda"
    assert t.values.data.ptr == s.data.data.ptr
    back = t.to_package()
    assert type(back) is type(s)
    assert back.data.data.ptr == s.data.data.ptr
    np.testing.assert_array_equal(cupy.asnumpy(back.toarray()), x)


@pytest.mark.gpu
def test_cupy_to_device_and_back():
    _cupy()
    x = rand_dense((5, 6), seed=18)
    t = Tensor.from_dense(x, F.CSR).to("cuda")
    assert t.device == "cuda"
    h = t.to("cpu")
    np.testing.assert_array_equal(np.asarray(h.to_dense()), x)
