"""ustc.ust.Tensor: nvmath-python's UST attributes and methods, checked against NumPy / SciPy."""

import numpy as np
import pytest
import scipy.sparse as sps

import ustc
from ustc import formats
from ustc.ust import NamedFormats, Tensor, TensorFormat

DENSE = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 3.0, 0.0], [4.0, 5.0, 0.0, 6.0]])


def scipy_forms():
    return [sps.csr_array(DENSE), sps.csc_array(DENSE), sps.coo_array(DENSE), sps.bsr_array(DENSE[:2], blocksize=(2, 2)),
            sps.dia_array(DENSE)]


@pytest.mark.parametrize("a", scipy_forms(), ids=lambda a: a.format)
def test_attributes_against_scipy(a):
    u = Tensor.from_package(a)
    assert isinstance(u, ustc.Tensor)
    assert u.extents == list(a.shape) and u.shape == a.shape
    assert u.num_dimensions == 2 and u.num_levels == u.tensor_format.num_levels
    assert u.levels == u.format.dim2lvl(list(a.shape), as_size=True)
    assert u.size == a.shape[0] * a.shape[1]
    assert u.dtype == a.dtype and u.dtype == "float64"
    assert u.index_type in ("int32", "int64")
    assert u.device == "cpu" and u.device_id == "cpu"
    assert u.base is a
    assert u.tensor_format == u.format and isinstance(u.tensor_format, TensorFormat)
    dense = a.toarray()
    for r in range(a.shape[0]):
        for c in range(a.shape[1]):
            v = u.get_value([r, c])
            assert (v is None and dense[r, c] == 0) or v == dense[r, c]
    last = (a.shape[0] - 1, a.shape[1] - 1)
    assert u.get_value(*last) == u.get_value(list(last)) == dense[last]
    assert np.array_equal(u.to_dense(), dense)


def test_csr_buffers_views_and_missing_levels():
    a = sps.csr_array(DENSE)
    u = Tensor.from_package(a)
    assert u.pos(0) is None and u.crd(0) is None and u.pos(7) is None
    assert u.pos(1) is a.indptr and u.crd(1) is a.indices
    assert u.val is a.data and u.nse == a.nnz
    assert u.tensor_format.name == "CSR"
    back = u.to_package()
    assert np.shares_memory(back.indptr, a.indptr) and np.shares_memory(back.data, a.data)


def test_torch_values_stay_shared():
    torch = pytest.importorskip("torch")
    a = torch.tensor(DENSE).to_sparse_csr()
    u = Tensor.from_package(a)
    assert isinstance(u.val, torch.Tensor) and u.index_type == "int64"
    a.values()[0] = 7.0
    assert u.get_value([0, 0]) == 7.0
    assert u.to_package().values().data_ptr() == a.values().data_ptr()


def test_dense_numpy_view():
    a = np.arange(6.0).reshape(2, 3).T  # column-major view
    u = Tensor.from_package(a)
    assert u.tensor_format.dimensions[0].dimension_name == "i"
    assert list(u.tensor_format.levels) == [u.tensor_format.dimensions[1], u.tensor_format.dimensions[0]]
    assert u.extents == [3, 2] and u.levels == [2, 3] and u.nse == 6 and u.index_type == "int32"
    assert u.to_package().ctypes.data == a.ctypes.data


@pytest.mark.parametrize("target", [NamedFormats.CSC, NamedFormats.COO, NamedFormats.DIAI, NamedFormats.DELTA(2),
                                    NamedFormats.BSRRight((3, 2)), NamedFormats.DensedLeft(2), NamedFormats.DCSR])
def test_convert_equals_ustc_convert(target):
    u = Tensor.from_package(sps.csr_array(DENSE))
    mine, theirs = u.convert(tensor_format=target), ustc.Tensor.from_package(sps.csr_array(DENSE)).convert(target.ustc)
    assert isinstance(mine, Tensor) and mine.tensor_format is target
    assert mine.format == theirs.format and np.array_equal(mine.to_dense(), theirs.to_dense())
    assert np.array_equal(np.asarray(mine.val)[:mine.nse], np.asarray(theirs.values)[:theirs.nse])
    for key, b in theirs.buffers.items():
        assert np.array_equal(mine.buffers[key], b)
    assert mine.index_type == u.index_type  # the source's index type carries over


def test_convert_index_type_dtype_and_copy():
    u = Tensor.from_package(np.arange(1.0, 17.0).reshape(4, 4))
    assert u.convert(copy=False) is u  # ustc's opt-in: no new tensor when nothing changes
    csr = u.convert(tensor_format=NamedFormats.CSR)
    assert (csr.dtype, csr.index_type, csr.get_value([3, 3])) == ("float64", "int32", 16)
    small = csr.convert(index_type="int8", dtype="float32")
    assert (small.dtype, small.index_type, small.get_value([3, 3])) == ("float32", "int8", 16)
    assert all(b.dtype == np.int8 for b in small.buffers.values())
    same = csr.convert(tensor_format=formats.CSR)  # a ustc format works too
    assert same is not csr and same.format == csr.format
    with pytest.raises(ustc.StorageError):
        Tensor.from_package(sps.csr_array(np.ones((1, 300)))).convert(index_type="int8")


def test_clone_copy_and_copy_():
    a = Tensor.from_package(sps.csr_array(DENSE))
    b = Tensor.from_package(sps.csr_array(2 * DENSE))
    clone = a.clone()
    assert clone is not a and clone.val is not a.val and np.array_equal(clone.to_dense(), DENSE)
    b.copy_(a)
    assert np.array_equal(b.to_dense(), DENSE)
    with pytest.raises(ValueError):
        Tensor.from_package(np.ones((2, 2))).copy_(Tensor.from_package(np.ones((2, 3))))
    with pytest.raises(ValueError):  # same shape, different number of stored entries
        b.copy_(Tensor.from_package(sps.csr_array(np.eye(3, 4))))


def test_set_and_run_kernel():
    a = sps.csr_array(DENSE)
    u = Tensor.from_package(a)

    def double(v):
        return 2 * v

    def by_row(v, i, j):
        return v + 100 * i

    with pytest.raises(ValueError):
        u.run_kernel()
    u.set_kernel(double, with_indices=False)
    u.run_kernel()
    assert np.array_equal(a.toarray(), 2 * DENSE)  # in place, seen by the SciPy array
    u.set_kernel(by_row, with_indices=True)
    u.run_kernel()
    expected = 2 * DENSE + 100 * np.arange(3)[:, None] * (DENSE != 0)
    assert np.array_equal(a.toarray(), expected)
    assert u.clone()._nv_kernel is by_row
    with pytest.raises(ustc.UnsupportedOperation):
        u.set_kernel(b"\x00lto")


def test_empty_tensor_constructor():
    t = Tensor((8, 4), tensor_format=NamedFormats.CSR, index_type=np.int32, dtype=np.float32)
    assert t.num_dimensions == 2 and t.extents == [8, 4] and t.tensor_format == NamedFormats.CSR
    assert t.index_type == np.int32 and t.dtype == np.float32 and t.nse == 0
    with pytest.raises(TypeError):
        Tensor((8, 4))
    with pytest.raises(TypeError):
        Tensor((8, 4), tensor_format="COO")
    with pytest.raises(TypeError):
        Tensor((8, 4, 2), tensor_format=NamedFormats.COO)
    with pytest.raises(TypeError):
        Tensor((4, 0), tensor_format=NamedFormats.COO)


def test_from_file(tmp_path):
    path = tmp_path / "a.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n3 4 3\n1 1 1.0\n2 3 2.0\n3 4 3.0\n")
    u = Tensor.from_file(str(path))
    assert isinstance(u, Tensor) and u.tensor_format == NamedFormats.COO
    assert u.extents == [3, 4] and u.nse == 3 and u.get_value([1, 2]) == 2.0 and u.get_value([0, 1]) is None


def test_draw_returns_an_image(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    pytest.importorskip("matplotlib")
    u = Tensor.from_package(sps.csr_array(DENSE))
    image = u.draw()
    assert isinstance(image, image_module.Image) and image.size[0] > 0
    u.draw_storage(str(tmp_path / "storage.png"))
    assert (tmp_path / "storage.png").stat().st_size > 0
    with pytest.raises(ustc.UnsupportedOperation):
        u.animate()


def test_repr_in_nvmath_layout():
    u = Tensor.from_package(sps.csr_array(DENSE.astype(np.float32)))
    assert repr(u) == (
        "---- Sparse Tensor<VAL=float32,POS=int32,CRD=int32,DIM=2,LVL=2>\n"
        "format   : [i, j] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>)\n"
        "device   : cpu\n"
        "dim      : [3, 4]\n"
        "lvl      : [3, 4]\n"
        "nse      : 6\n"
        "pos[1]   : [0, 2, 3, 6] #4\n"
        "crd[1]   : [0, 2, 2, 0, 1, 3] #6\n"
        "values   : [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] #6\n"
        "data     : 64 bytes\n"
        "sparsity : 50.00%\n"
        "----")


def test_ustc_operations_accept_compat_tensors():
    u = Tensor.from_package(sps.csr_array(DENSE))
    x = np.arange(4.0)
    assert np.allclose(ustc.matmul(u, x), DENSE @ x)
    assert np.allclose((u * 2).to_dense(), 2 * DENSE)
    assert u.to("cpu") is u and u.to(device_id="cpu") is u


@pytest.mark.parametrize("target", [None, NamedFormats.DensedRight(2), NamedFormats.DenseMatrixRight])
def test_convert_to_the_same_storage_is_a_new_tensor(target):
    """nvmath-python: convert always gives a new tensor; when format, index type and dtype stay the
    same it is a clone: own buffers (writes to it leave the source alone), a set kernel shared."""
    a = np.arange(1.0, 7.0).reshape(2, 3)
    u = Tensor.from_package(a)
    u.set_kernel(lambda v: v + 1, with_indices=False)
    c = u.convert(tensor_format=target)
    assert c is not u and c.format == u.format and c.base is None
    assert not np.shares_memory(c.val, a)
    c.val[0] = 100.0
    assert a[0, 0] == 1.0 and c.get_value([0, 0]) == 100.0
    c.run_kernel()
    assert c.get_value([0, 1]) == 3.0 and a[0, 1] == 2.0


def test_convert_csr_to_csr_copies_every_buffer():
    u = Tensor.from_package(sps.csr_array(DENSE))
    c = u.convert(tensor_format=NamedFormats.CSR)
    assert c is not u
    for key, b in u.buffers.items():
        assert np.array_equal(c.buffers[key], b) and not np.shares_memory(c.buffers[key], b)
    assert not np.shares_memory(c.val, u.val)
