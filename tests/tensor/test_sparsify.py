"""``ustc.sparsify`` and ``ustc.sparse_relu`` against NumPy oracles, NumPy and torch inputs."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import TensorFormat
from ustc import formats as F

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR|BSR|BSC|CSC) tensor support is in beta")

FORMATS = [F.CSR, F.CSC, F.COO(), F.DCSR, F.DCSC, F.CROW, F.DIAI, F.DIAJ, F.BSR(2, 3), F.BSC(3, 2), F.DELTA(2),
           F.DELTA(4, True), F.Dense(2), TensorFormat.parse("(i, j) -> (j : dense, i : dense)"),
           TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)")]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


def fid(f):
    return f.name or str(f)


def signed_data(shape, dtype, seed=0):
    """Random values of both signs with about a quarter zeros."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape) * 3
    else:
        x = rng.integers(-9, 10, shape)
    x[rng.random(shape) < 0.25] = 0
    return x.astype(dtype)


def as_numpy(a):
    return a.numpy() if torch.is_tensor(a) else np.asarray(a)


def check(t, expected, fmt, package="numpy"):
    assert t.format == fmt
    assert t.package == package
    t.validate()
    dense = t.to_dense()
    assert torch.is_tensor(dense) == (package == "torch")
    dense = as_numpy(dense)
    assert dense.dtype == expected.dtype
    np.testing.assert_array_equal(dense, expected)
    if t.format in (F.CSR, F.CSC, F.COO(), F.DCSR, F.DCSC):
        assert t.nse == np.count_nonzero(expected)  # nothing but the selected nonzeros is stored


# --------------------------------------------------------------------------- sparsify


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", FORMATS, ids=fid)
def test_sparsify_no_mask(fmt, dtype):
    x = signed_data((7, 9), dtype, seed=1)
    check(ustc.sparsify(x, fmt), x, fmt)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", FORMATS, ids=fid)
def test_sparsify_bool_mask(fmt, dtype):
    x = signed_data((7, 9), dtype, seed=2)
    mask = np.random.default_rng(3).random(x.shape) < 0.5
    x0, m0 = x.copy(), mask.copy()
    check(ustc.sparsify(x, fmt, where=mask), np.where(mask, x, 0).astype(dtype), fmt)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(mask, m0)


@pytest.mark.parametrize("fmt", FORMATS, ids=fid)
def test_sparsify_callable(fmt):
    x = signed_data((6, 10), np.float64, seed=4)
    t = ustc.sparsify(x, fmt, where=lambda a: abs(a) > 1.5)
    check(t, np.where(np.abs(x) > 1.5, x, 0), fmt)


def test_sparsify_default_format_is_csr():
    x = signed_data((4, 5), np.float64, seed=5)
    t = ustc.sparsify(x)
    assert t.format == F.CSR
    check(t, x, F.CSR)


def test_sparsify_mask_all_false_and_all_true():
    x = signed_data((5, 6), np.float64, seed=6)
    check(ustc.sparsify(x, F.CSR, where=np.zeros(x.shape, bool)), np.zeros_like(x), F.CSR)
    check(ustc.sparsify(x, F.CSR, where=np.ones(x.shape, bool)), x, F.CSR)


def test_sparsify_integer_mask_is_truthiness():
    x = signed_data((5, 6), np.int64, seed=7)
    mask = np.random.default_rng(8).integers(0, 3, x.shape)
    check(ustc.sparsify(x, F.CSR, where=mask), np.where(mask != 0, x, 0), F.CSR)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 2, 4)], ids=str)
def test_sparsify_higher_rank(shape):
    x = signed_data(shape, np.float64, seed=9)
    mask = np.random.default_rng(10).random(shape) < 0.6
    expected = np.where(mask, x, 0)
    for fmt in (F.CSF(len(shape)), F.COO(len(shape)), F.Dense(len(shape))):
        check(ustc.sparsify(x, fmt, where=mask), expected, fmt)
    if len(shape) == 3:
        check(ustc.sparsify(x, F.BatchedCSR, where=mask), expected, F.BatchedCSR)


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (1, 1), (1, 9), (9, 1)], ids=str)
def test_sparsify_edge_shapes(shape):
    x = signed_data(shape, np.float64, seed=11)
    mask = np.ones(shape, bool)
    for fmt in (F.CSR, F.COO(), F.DIAI, F.BSR(2, 2)):
        check(ustc.sparsify(x, fmt, where=mask), x, fmt)


def test_sparsify_structured_fits():
    x = np.array([[1.0, -2.0, 3.0, 0.0, 5.0, 6.0, 7.0, 8.0]])
    mask = np.array([[True, False, True, True, False, False, True, True]])
    expected = np.where(mask, x, 0)  # two per block after masking
    check(ustc.sparsify(x, F.Structured(2, 4), where=mask), expected, F.Structured(2, 4))
    with pytest.raises(ustc.StorageError):
        ustc.sparsify(x, F.Structured(2, 4))


@pytest.mark.parametrize("bad", [(7, 8), (9, 7), (7, 9, 1), (63,)], ids=str)
def test_sparsify_wrong_shape_mask(bad):
    x = signed_data((7, 9), np.float64, seed=12)
    with pytest.raises(ustc.ShapeError):
        ustc.sparsify(x, F.CSR, where=np.ones(bad, bool))
    with pytest.raises(ustc.ShapeError):
        ustc.sparsify(x, F.CSR, where=lambda a: np.ones(bad, bool))
    with pytest.raises(ustc.ShapeError):
        ustc.sparsify(torch.from_numpy(x), F.CSR, where=torch.ones(bad, dtype=torch.bool))


def test_sparsify_complex_and_bool():
    rng = np.random.default_rng(13)
    z = (rng.integers(-3, 4, (4, 6)) + 1j * rng.integers(-3, 4, (4, 6))).astype(np.complex128)
    mask = rng.random(z.shape) < 0.5
    check(ustc.sparsify(z, F.CSR, where=mask), np.where(mask, z, 0), F.CSR)
    b = rng.random((4, 6)) < 0.5
    check(ustc.sparsify(b, F.COO(), where=mask), b & mask, F.COO())


# --------------------------------------------------------------------------- sparse_relu


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", FORMATS, ids=fid)
def test_sparse_relu(fmt, dtype):
    x = signed_data((7, 9), dtype, seed=14)
    x0 = x.copy()
    t = ustc.sparse_relu(x, fmt)
    check(t, np.maximum(x, 0).astype(dtype), fmt)
    np.testing.assert_array_equal(x, x0)
    assert (np.asarray(t.values[:t.nse]) >= 0).all()


def test_sparse_relu_default_format_and_rank3():
    x = signed_data((3, 4, 5), np.float32, seed=15)
    check(ustc.sparse_relu(x, F.CSF(3)), np.maximum(x, 0), F.CSF(3))
    y = signed_data((4, 5), np.float64, seed=16)
    t = ustc.sparse_relu(y)
    assert t.format == F.CSR
    check(t, np.maximum(y, 0), F.CSR)


def test_sparse_relu_all_negative_and_all_positive():
    neg = -np.abs(signed_data((4, 5), np.float64, seed=17)) - 1
    check(ustc.sparse_relu(neg, F.CSR), np.zeros_like(neg), F.CSR)
    pos = np.abs(neg)
    check(ustc.sparse_relu(pos, F.COO()), pos, F.COO())


def test_sparse_relu_bool():
    b = np.random.default_rng(18).random((4, 6)) < 0.5
    check(ustc.sparse_relu(b, F.CSR), b, F.CSR)


def test_sparse_relu_complex_rejected():
    z = np.ones((2, 3), dtype=np.complex128)
    with pytest.raises(TypeError):
        ustc.sparse_relu(z, F.CSR)
    with pytest.raises(TypeError):
        ustc.sparse_relu(torch.from_numpy(z), F.CSR)


# --------------------------------------------------------------------------- torch inputs


@pytest.mark.parametrize("fmt", [F.CSR, F.CSC, F.COO(), F.BSR(2, 3), F.DIAI, F.DELTA(2)], ids=fid)
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float64, torch.int64], ids=str)
def test_torch_inputs(fmt, tdtype):
    x = torch.from_numpy(signed_data((6, 9), np.float64, seed=19)).to(tdtype)
    xn = x.numpy().copy()
    mask = torch.from_numpy(np.random.default_rng(20).random((6, 9)) < 0.5)
    check(ustc.sparsify(x, fmt), xn, fmt, package="torch")
    check(ustc.sparsify(x, fmt, where=mask), np.where(mask.numpy(), xn, 0).astype(xn.dtype), fmt,
          package="torch")
    check(ustc.sparsify(x, fmt, where=lambda a: abs(a) > 1), np.where(np.abs(xn) > 1, xn, 0).astype(xn.dtype),
          fmt, package="torch")
    relu = ustc.sparse_relu(x, fmt)
    check(relu, torch.relu(x).numpy(), fmt, package="torch")
    np.testing.assert_array_equal(x.numpy(), xn)


def test_torch_result_to_package():
    x = torch.from_numpy(signed_data((6, 8), np.float32, seed=21))
    p = ustc.sparse_relu(x, F.CSR).to_package()
    assert p.layout == torch.sparse_csr
    assert torch.equal(p.to_dense(), torch.relu(x))
    q = ustc.sparsify(x, F.COO(), where=x < 0).to_package()
    assert q.layout == torch.sparse_coo
    assert torch.equal(q.to_dense(), torch.where(x < 0, x, torch.zeros_like(x)))


def test_torch_requires_grad_input():
    x = torch.from_numpy(signed_data((3, 4), np.float64, seed=22)).requires_grad_(True)
    t = ustc.sparse_relu(x, F.CSR)
    np.testing.assert_array_equal(as_numpy(t.to_dense()), torch.relu(x).detach().numpy())
