"""The registered n:m structured SpMM (ustc.kernels._structured.nm_spmm) against the dense oracle, through
``ustc.Matmul`` and through a sparse ``nn.Linear`` (inference and training)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ustc  # noqa: E402
import ustc.torch  # noqa: E402
from ustc import formats  # noqa: E402
from ustc.kernels.builtin import _nm  # noqa: E402

NAMED = [nf.format() for nf in formats.NAMED if _nm(nf.format()) is not None]
OTHERS = [formats.Structured(n, m) for n, m in ((1, 4), (2, 8), (3, 3))]
SHAPES = [(6, 8), (5, 10), (1, 7), (7, 1), (0, 8), (4, 0), (33, 67)]
BATCHES = (1, 3, 16, 0)


def _pruned(rng, shape, n, m, dtype, zero=False):
    w = rng.standard_normal(shape).astype(dtype) * (0 if zero else 1)
    return ustc.prune.decompress(ustc.prune.prune_nm(w, n, m)) if shape[1] else w


# Each (n, m, dtype) compiles its own kernel: every pattern in float32, the wider dtypes on the
# named patterns and on 3:3 (m not a power of two), pairwise rather than every combination.
CASES = ([(f, np.float32) for f in NAMED + OTHERS]
         + [(f, d) for f in NAMED + [formats.Structured(3, 3)] for d in (np.float64, np.complex128)])


@pytest.mark.parametrize("fmt, dtype", CASES, ids=[f"{np.dtype(d).name}-{f.name or f}" for f, d in CASES])
def test_structured_spmm_matches_numpy(fmt, dtype):
    n, m = _nm(fmt)
    rng = np.random.default_rng(1)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for shape in SHAPES:
        for zero in (False, True):
            w = _pruned(rng, shape, n, m, dtype, zero)
            A = ustc.Tensor.from_dense(w, fmt)
            for batch in BATCHES:
                b = rng.standard_normal((shape[1], batch)).astype(dtype)
                b_before, values_before = b.copy(), A._values.copy()
                mm = ustc.Matmul(A, b).plan()
                if shape[0] and shape[1]:
                    assert "structured_spmm" in mm.plan_info
                np.testing.assert_allclose(mm.execute(), w @ b, rtol=tol, atol=tol)
                c = rng.standard_normal((shape[0], batch)).astype(dtype)
                got = ustc.matmul(A, np.asfortranarray(b), c.copy(), alpha=2, beta=3)
                np.testing.assert_allclose(got, 2 * (w @ b) + 3 * c, rtol=tol, atol=tol)
                assert np.array_equal(b, b_before) and np.array_equal(A._values, values_before)


def test_wide_batch_and_unrolled_tail():
    """128 columns, rows whose slot count is not a multiple of the unroll (10 and 14 slots)."""
    rng = np.random.default_rng(2)
    for shape in ((9, 20), (3, 28), (64, 256)):
        w = _pruned(rng, shape, 2, 4, np.float32)
        A = ustc.Tensor.from_dense(w, formats.Structured(2, 4))
        b = rng.standard_normal((shape[1], 128)).astype(np.float32)
        np.testing.assert_allclose(ustc.matmul(A, b), w @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", [formats.Structured(2, 4), formats.Structured(3, 3)], ids=str)
def test_blocks_of_columns_and_chunks_of_rows(fmt):
    """A batch wide enough that a block of columns is one pass of slots (several blocks per row), rows in
    several chunks, the last partial (nm_spmm.ROW_CHUNK), a partial last group; aligned and not (3:3)."""
    from ustc.kernels import _structured

    n, m = _nm(fmt)
    rows, columns = 2 * _structured.ROW_CHUNK + 6, 50
    batch = _structured.L1_TILE // 8 // 6  # float64: 6 columns' rows of b per block, under one pass
    rng = np.random.default_rng(3)
    w = _pruned(rng, (rows, columns), n, m, np.float64)
    A = ustc.Tensor.from_dense(w, fmt)
    b = rng.standard_normal((columns, batch))
    mm = ustc.Matmul(A, b).plan()
    assert "structured_spmm" in mm.plan_info
    np.testing.assert_allclose(mm.execute(), w @ b, rtol=1e-12, atol=1e-12)
    few = w[:3]  # fewer rows than threads times a chunk: chunks of one or two rows
    np.testing.assert_allclose(ustc.matmul(ustc.Tensor.from_dense(few, fmt), b), few @ b, rtol=1e-12, atol=1e-12)


def _layers(dtype, shape=(37, 70), seed=0):
    torch.manual_seed(seed)
    dense = torch.nn.Linear(shape[1], shape[0]).to(dtype)
    ustc.torch.prune_model(torch.nn.Sequential(dense), method="2:4")
    sparse = torch.nn.Linear(shape[1], shape[0]).to(dtype)
    sparse.load_state_dict(dense.state_dict())
    as_2_4 = lambda w: ustc.torch.TorchUST.from_torch(w, formats.Structured(2, 4))  # noqa: E731
    ustc.torch.reformat_model(torch.nn.Sequential(sparse), as_2_4)
    assert isinstance(sparse.weight, ustc.torch.TorchUST) and _nm(sparse.weight.ust.format) == (2, 4)
    return dense, sparse


TOLS = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", list(TOLS), ids=str)
@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_sparse_linear_2_4_matches_dense(dtype, mode):
    dense, sparse = _layers(dtype)
    context = torch.inference_mode if mode == "inference_mode" else torch.no_grad
    for batch in (1, 3, 16, 128, 0):
        for lead in ((batch,), (2, batch)):
            x = torch.randn(*lead, 70).to(dtype)
            before = x.clone()
            with context():
                got = sparse(x)
                want = torch.nn.functional.linear(x.double(), dense.weight.double(), dense.bias.double())
            assert got.dtype == dtype and got.shape == want.shape
            tol = TOLS[dtype] * max(1.0, float(want.abs().max()) if want.numel() else 1.0)
            torch.testing.assert_close(got.double(), want, rtol=0, atol=tol)
            assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_sparse_linear_2_4_training_gradients(dtype):
    dense, sparse = _layers(dtype)
    mask = dense.weight.detach() != 0
    for batch in (3, 16):
        x = torch.randn(batch, 70, dtype=dtype, requires_grad=True)
        xd = x.detach().clone().requires_grad_()
        g = torch.randn(batch, 37, dtype=dtype)
        sparse.zero_grad(), dense.zero_grad()
        (sparse(x) * g).sum().backward()
        (dense(xd) * g).sum().backward()
        tol = 1e-4 if dtype == torch.float32 else 1e-10
        torch.testing.assert_close(x.grad, xd.grad, rtol=tol, atol=tol)
        torch.testing.assert_close(sparse.weight.grad.to_dense(), dense.weight.grad * mask, rtol=tol, atol=tol)
        torch.testing.assert_close(sparse.bias.grad, dense.bias.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("parallel", [True, False])
def test_serial_and_parallel_kernels_agree_with_numpy(parallel):
    """Both builds of each kernel (builtin picks the serial one below ustc.ops.runtime.SERIAL_WORK)."""
    from ustc.kernels._structured import nm_spmm, nm_spmv

    rng = np.random.default_rng(3)
    for n, m, shape in ((2, 4, (40, 66)), (3, 3, (17, 31))):
        w = _pruned(rng, shape, n, m, np.float64)
        A = ustc.Tensor.from_dense(w, formats.Structured(n, m))
        groups = -(-shape[1] // m)
        args = (A._buffers[(2, "crd")], A._values)
        x = rng.standard_normal(shape[1])
        y = np.ones(shape[0])
        nm_spmv(n, m, parallel)(*args, x, y, 2.0, shape[0], groups, shape[1])
        np.testing.assert_allclose(y, 1 + 2 * (w @ x), rtol=1e-12, atol=1e-12)
        b = rng.standard_normal((shape[1], 5))
        out = np.ones((shape[0], 5))
        nm_spmm(n, m, parallel)(*args, b, out, 2.0, shape[0], groups, shape[1])
        np.testing.assert_allclose(out, 1 + 2 * (w @ b), rtol=1e-12, atol=1e-12)
    assert nm_spmm(2, 4, True) is not nm_spmm(2, 4, False)


@pytest.mark.parametrize("m", [1, 4])
def test_zero_slot_structured_products_are_zero(m):
    """Structured(0, m) stores no slot: SpMV and SpMM through Matmul add nothing (the kernel builds
    for n = 0, which once divided by n while choosing its unrolled offsets)."""
    rng = np.random.default_rng(5)
    A = ustc.Tensor.from_dense(np.zeros((6, 9)), formats.Structured(0, m))
    for b in (rng.standard_normal(9), rng.standard_normal((9, 3)), np.zeros((9, 0))):
        c = np.ones((6,) + b.shape[1:])
        out = ustc.Matmul(A, b, c).execute()
        np.testing.assert_array_equal(out, np.ones((6,) + b.shape[1:]))
