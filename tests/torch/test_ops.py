"""Every intercepted op against dense torch on random data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ustc
from ustc import formats
from ustc.torch import TorchUST

from torch_helpers import FORMAT_IDS, FORMATS_2D, random_weight, torch_ust

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def close(got, want):
    assert not isinstance(got, TorchUST)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    torch.testing.assert_close(got, want, **TOL[want.dtype])


@pytest.mark.parametrize("nf", FORMATS_2D, ids=FORMAT_IDS)
def test_products_in_every_format(nf):
    T, W = torch_ust(nf.format(), random_weight())
    g = torch.Generator().manual_seed(1)
    x, X, b = torch.randn(8, generator=g, dtype=W.dtype), torch.randn(5, 8, generator=g, dtype=W.dtype), \
        torch.randn(6, generator=g, dtype=W.dtype)
    close(torch.mv(T, x), W @ x)
    close(torch.mm(T, X.t()), W @ X.t())
    close(F.linear(X, T, b), F.linear(X, W, b))
    close(X[:, :6] @ T, X[:, :6] @ W)  # dense @ sparse walks the transposed view


@pytest.mark.parametrize("name", ["CSR", "Structured"])
def test_float32(name):
    T, W = torch_ust(formats.by_name(name, *([2, 4] if name == "Structured" else [])),
                     random_weight(dtype=np.float32))
    assert T.dtype == torch.float32
    X = torch.randn(3, 8)
    close(F.linear(X, T), F.linear(X, W))
    close(T @ X[0], W @ X[0])


@pytest.fixture(scope="module")
def csr():
    return torch_ust(formats.CSR, random_weight(seed=3))


def test_matmul_family(csr):
    T, W = csr
    g = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    x8, x6, X, Y = r(8), r(6), r(8, 3), r(4, 6)
    close(torch.addmv(x6, T, x8, beta=0.5, alpha=2.0), torch.addmv(x6, W, x8, beta=0.5, alpha=2.0))
    inp = r(6, 3)
    close(torch.addmm(inp, T, X), torch.addmm(inp, W, X))
    close(torch.addmm(inp, T, X, beta=0), W @ X)
    close(torch.addmm(inp, T, X, beta=0.25, alpha=3), torch.addmm(inp, W, X, beta=0.25, alpha=3))
    close(torch.matmul(T, x8), W @ x8)
    close(T @ X, W @ X)
    close(Y @ T, Y @ W)
    close(x6 @ T, x6 @ W)
    close(T.mm(X), W.mm(X))
    close(T.mv(x8), W.mv(x8))
    B3 = r(2, 5, 6)
    close(torch.matmul(B3, T), torch.matmul(B3, W))
    X3 = r(2, 8, 3)
    close(torch.matmul(T, X3), torch.matmul(W, X3))
    X4 = r(2, 4, 8)
    close(F.linear(X4, T), F.linear(X4, W))


def test_dot_and_sparse_vectors():
    v = torch.tensor([0.0, 2.0, 0.0, -1.0, 3.0], dtype=torch.float64)
    S = TorchUST.from_torch(v.to_sparse())
    d = torch.arange(5.0, dtype=torch.float64)
    close(torch.dot(S, d), torch.dot(v, d))
    close(torch.dot(d, S), torch.dot(d, v))
    M = torch.randn(3, 5, dtype=torch.float64)
    close(torch.mv(M, S), M @ v)


def test_bmm_and_baddbmm_with_a_batched_format():
    g = torch.Generator().manual_seed(4)
    dense = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    dense[dense.abs() < 0.7] = 0
    T = TorchUST(ustc.Tensor.from_dense(dense, formats.BatchedCSR))
    assert T.ust.format.batch_levels == 1
    X, inp = torch.randn(3, 5, 2, generator=g, dtype=torch.float64), torch.randn(3, 4, 2, generator=g,
                                                                                dtype=torch.float64)
    close(torch.bmm(T, X), torch.bmm(dense, X))
    close(torch.baddbmm(inp, T, X, beta=0.5, alpha=2), torch.baddbmm(inp, dense, X, beta=0.5, alpha=2))
    Y = torch.randn(3, 2, 4, generator=g, dtype=torch.float64)
    close(torch.bmm(Y, T), torch.bmm(Y, dense))
    close(torch.matmul(T, X), torch.matmul(dense, X))


def test_all_dense_torchusts_are_dense_operands_of_batched_products():
    g = torch.Generator().manual_seed(6)
    A = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    B = torch.randn(3, 5, 2, generator=g, dtype=torch.float64)
    inp = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    for fmt in (None, "(b, i, j) -> (b : dense, j : dense, i : dense)"):   # as viewed; permuted dense levels
        T = TorchUST.from_torch(A, fmt)
        assert T.ust.format.all_dense
        close(torch.bmm(T, B), torch.bmm(A, B))
        close(torch.baddbmm(inp, T, B, beta=0.5, alpha=2), torch.baddbmm(inp, A, B, beta=0.5, alpha=2))
        close(torch.matmul(T, B), A @ B)
        close(torch.matmul(T, B[0]), A @ B[0])                 # a 3-D dense TorchUST @ a matrix
        close(torch.bmm(A.transpose(1, 2), TorchUST.from_torch(inp, fmt)), A.transpose(1, 2) @ inp)


def test_t_of_a_vector_is_the_vector():
    x = torch.tensor([0.0, 2.0, 0.0, 3.0], dtype=torch.float64)
    for S in (TorchUST.from_torch(x), TorchUST.from_torch(x.to_sparse())):
        assert isinstance(S.t(), TorchUST) and S.t().shape == (4,)
        close(torch.dot(S.t(), x), torch.dot(x, x))
        close(torch.mv(torch.eye(4, dtype=torch.float64), S.t()), x)
    with pytest.raises(ustc.UnsupportedOperation, match="2-D only"):
        TorchUST.from_torch(x).transpose(0, 1)


def test_shape_and_device_errors(csr):
    T, _ = csr
    with pytest.raises(ustc.ShapeError, match="do not multiply"):
        torch.mv(T, torch.ones(5, dtype=torch.float64))
    with pytest.raises(ustc.ShapeError):
        torch.bmm(T, torch.ones(8, 2, dtype=torch.float64))


def test_views(csr):
    T, W = csr
    for view in (T.t(), T.transpose(0, 1), T.permute(1, 0), T.T, T.mT):
        assert isinstance(view, TorchUST) and view.shape == (8, 6)
        close(view.to_dense(), W.t())
        assert np.shares_memory(view.ust._values, T.ust._values)
    assert T.transpose(0, 0).shape == T.shape
    x = torch.randn(6, dtype=torch.float64)
    close(T.t() @ x, W.t() @ x)
    close(T.t().t() @ torch.ones(8, dtype=torch.float64), W @ torch.ones(8, dtype=torch.float64))


def test_detach_clone_to(csr):
    T, W = csr
    d = T.detach()
    assert isinstance(d, TorchUST) and d.stored_values().data_ptr() == T.stored_values().data_ptr()
    c = T.clone()
    assert isinstance(c, TorchUST) and c.stored_values().data_ptr() != T.stored_values().data_ptr()
    close(c.to_dense(), W)
    f = T.to(torch.float32)
    assert isinstance(f, TorchUST) and f.dtype == torch.float32 and f.ust.format == T.ust.format
    close(f.to_dense(), W.float())
    assert T.cpu() is T and T.to("cpu") is T
    close(T.double().to_dense(), W)


def test_parameter_wrapping(csr):
    T, _ = csr
    p = torch.nn.Parameter(T)
    assert isinstance(p, TorchUST) and isinstance(p, torch.nn.Parameter) and p.requires_grad
    layer = torch.nn.Linear(8, 6).double()
    layer.weight = p
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    assert repr(p).startswith("TorchUST(shape=(6, 8)") and "format=CSR" in repr(p)


def test_zero_copy_from_torch():
    dense = torch.tensor([[1.0, 0, 2], [0, 0, 3]])
    csr = dense.to_sparse_csr()
    T = TorchUST.from_torch(csr)
    assert T.stored_values().data_ptr() == csr.values().data_ptr()
    assert np.shares_memory(T.ust.crd(1).numpy(), csr.col_indices().numpy())
    assert np.shares_memory(T.ust.pos(1).numpy(), csr.crow_indices().numpy())
    D = TorchUST.from_torch(dense)
    assert np.shares_memory(D.ust._values, dense.numpy())
    coo = dense.to_sparse().coalesce()
    C = TorchUST.from_torch(coo)
    assert C.stored_values().data_ptr() == coo.values().data_ptr()
    for x in (csr, coo, dense, dense.to_sparse_csc(), dense.to_sparse_bsr((2, 1)), dense.to_sparse_bsc((2, 1))):
        close(TorchUST.from_torch(x) @ torch.ones(3), dense @ torch.ones(3))
    assert TorchUST.from_torch(dense, "DIAI").ust.format == formats.DIAI


def test_wrap_any_format_and_errors():
    with pytest.raises(TypeError, match="ustc.Tensor"):
        TorchUST(torch.ones(2))
    t = ustc.Tensor.from_dense(np.eye(4), formats.DELTA(2))
    T = TorchUST(t)
    assert T.shape == (4, 4) and T.dtype == torch.float64 and T.nse == t.nse and T.storage_bytes == t.nbytes
    close(T @ torch.ones(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64))


def test_inference_mode_and_single_rows(csr):
    T, W = csr
    x = torch.randn(1, 8, dtype=torch.float64)
    with torch.inference_mode():
        close(F.linear(x, T), F.linear(x, W))
        assert T.t().shape == (8, 6) and T.detach().shape == T.shape
    close(T @ x.t(), W @ x.t())
