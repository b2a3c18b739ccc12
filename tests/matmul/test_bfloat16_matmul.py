"""bfloat16 products on the CPU: ``ustc.matmul`` and ``ustc.ust.Matmul``.

NumPy has no bfloat16, so bfloat16 comes as torch.bfloat16 tensors (dense, torch sparse, or a
TorchUST of any registry format) or, with ml_dtypes installed, as ml_dtypes.bfloat16 arrays.
The product accumulates in float32 and is rounded to nearest even back to bfloat16, in the
operands' package; a bfloat16 ``c`` is updated in place and returned, ``out=`` is written.
Oracle: the float32 product of the (bfloat16) operands, rounded once to bfloat16.
"""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from matmul_helpers import named_2d, random_dense, sparse

torch = pytest.importorskip("torch")
from ustc import ust  # noqa: E402
from ustc.torch import TorchUST  # noqa: E402

BF16 = {"rtol": 2 ** -7, "atol": 2 ** -7}   # one bfloat16 rounding (8 significant bits) of O(1) values


def _bf16(x) -> "torch.Tensor":
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)


def _bf16_ust(A: ustc.Tensor) -> TorchUST:
    """``A``'s values rounded to bfloat16, in A's format, as ustc.torch stores them (uint16 bits)."""
    bits = _bf16(np.asarray(A.values)).view(torch.uint16).numpy()
    return TorchUST(ustc.Tensor(A.format, A.shape, dict(A.buffers), bits, package="torch"), dtype=torch.bfloat16)


def _operands(rng, fmt, shape=(6, 5), k=3):
    """``(W, a, b, c)``: W a bfloat16 TorchUST in ``fmt``, a its float32 values (bfloat16-exact),
    b and c bfloat16 dense torch tensors."""
    A = sparse(random_dense(rng, shape, dtype=np.float32), fmt)
    W = _bf16_ust(A)
    a = torch.from_numpy(np.asarray(A.to_dense(), dtype=np.float32)).to(torch.bfloat16).float()
    b = _bf16(rng.standard_normal((shape[1], k)))
    c = _bf16(rng.standard_normal((shape[0], k)))
    return W, a, b, c


def _close(got, want) -> None:
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.to(torch.bfloat16).float(), **BF16)


@pytest.mark.parametrize("fmt", named_2d())
def test_registry_formats_against_a_float32_oracle(fmt, rng):
    """c := 2 a @ b + c in every format (one bfloat16 kernel each: reads widened, the store rounded)."""
    W, a, b, c = _operands(rng, fmt)
    c0 = c.float()
    assert ustc.matmul(W, b, c, alpha=2.0) is c                     # c := 2 a @ b + c, in place
    _close(c, 2 * (a @ b.float()) + c0)


# a compressed, a singleton, a diagonal (padded) and a blocked format: each a loop nest of its own
SHAPES_OF_LOOPS = ("CSR", "COO", "DIAI", "BSR")


@pytest.mark.parametrize("fmt", [p for p in named_2d() if p.id in SHAPES_OF_LOOPS])
def test_spmm_and_spmv_without_c(fmt, rng):
    """The products without c (their own kernels) on formats of different loop nests; every
    format's loops are those of test_registry_formats_against_a_float32_oracle."""
    W, a, b, _ = _operands(rng, fmt)
    _close(ustc.matmul(W, b), a @ b.float())
    _close(ustc.matmul(W, b[:, 0]), a @ b[:, 0].float())          # SpMV


def test_in_place_c_accumulates_and_out_is_written(rng):
    W, a, b, c = _operands(rng, "CSR")
    c0 = c.float()
    assert ustc.matmul(W, b, c) is c
    once = c.float()
    _close(c, a @ b.float() + c0)
    ustc.matmul(W, b, c, beta=0.5)
    _close(c, a @ b.float() + 0.5 * once)
    out = torch.empty(6, 3, dtype=torch.bfloat16)
    before = c.clone()
    assert ustc.matmul(W, b, c, out=out) is out                     # c only read
    _close(out, a @ b.float() + before.float())
    assert torch.equal(c, before)


@pytest.mark.parametrize("layout", ["csr", "coo", "csc", "bsr", "dense"])
def test_torch_layouts(layout, rng):
    a = _bf16(random_dense(rng, (6, 4), dtype=np.float32))
    x = {"csr": a.to_sparse_csr, "coo": a.to_sparse, "csc": a.to_sparse_csc,
         "bsr": lambda: a.to_sparse_bsr((2, 2)), "dense": lambda: a}[layout]()
    b = _bf16(rng.standard_normal((4, 3)))
    y = ustc.matmul(x, b)
    assert isinstance(y, torch.Tensor) and not isinstance(y, TorchUST)
    _close(y, a.float() @ b.float())


def test_rounding_is_to_nearest_even_after_float32_accumulation():
    # 1 + 2**-8 lies halfway between bfloat16 neighbours 1 and 1 + 2**-7: even is 1.
    # 1 + 2**-7 + 2**-8 lies halfway between 1 + 2**-7 (odd) and 1 + 2**-6 (even).
    # 1 + 256 * 2**-8 = 2 needs float32 partial sums (in bfloat16 every 1 + 2**-8 rounds to 1).
    rows = [[1.0, 2 ** -8] + [0.0] * 255,
            [1.0, 2 ** -7, 2 ** -8] + [0.0] * 254,
            [1.0] + [2 ** -8] * 256]
    a = torch.tensor(rows, dtype=torch.bfloat16)
    ones = torch.ones(257, dtype=torch.bfloat16)
    for x in (a.to_sparse_csr(), a):
        y = ustc.matmul(x, ones)
        assert y.dtype == torch.bfloat16
        assert y.float().tolist() == [1.0, 1 + 2 ** -6, 2.0]


def test_operand_dtypes_promote_as_torch_does(rng):
    W, a, b, _ = _operands(rng, "CSR")
    y = ustc.matmul(W, b.float())                                   # bfloat16 with float32: float32
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, a @ b.float(), rtol=1e-5, atol=1e-5)
    assert ustc.matmul(W, torch.ones(5, 2, dtype=torch.int64)).dtype == torch.bfloat16


def test_sparse_times_sparse_gives_a_bfloat16_torchust(rng):
    W, a, _, _ = _operands(rng, "CSR")
    V = _bf16_ust(sparse(random_dense(rng, (5, 4), dtype=np.float32), "CSR"))
    S = ustc.matmul(W, V)
    assert isinstance(S, TorchUST) and S.dtype == torch.bfloat16
    _close(S.to_dense(), a @ V.to_dense().float())


def test_stateful_compat_matmul_sees_operands_changed_between_executes(rng):
    W, a, b, c = _operands(rng, "CSR")
    with ust.Matmul(W, b, c) as mm:
        mm.plan()
        c0 = c.float()
        assert mm.execute() is c
        _close(c, a @ b.float() + c0)
        b.mul_(2)                                                   # a dense operand, in place
        once = c.float()
        mm.execute()
        _close(c, a @ b.float() + once)
        W._v.mul_(-1)                                               # the stored values, in place
        twice = c.float()
        mm.execute()
        _close(c, -a @ b.float() + twice)
        b2 = _bf16(rng.standard_normal((5, 3)))
        mm.reset_operands(b=b2)
        three = c.float()
        mm.execute()
        _close(c, -a @ b2.float() + three)


def test_compat_matmul_takes_float32_compute_type_for_bfloat16(rng):
    W, a, b, _ = _operands(rng, "CSR")
    y = ust.matmul(W, b, options=ust.MatmulOptions(compute_type=ust.ComputeType.CUDA_R_32F))
    _close(y, a @ b.float())
    with pytest.raises(ustc.UnsupportedOperation):
        ust.matmul(W, b, options=ust.MatmulOptions(compute_type=ust.ComputeType.CUDA_R_64F))


def test_ml_dtypes_arrays(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    a = random_dense(rng, (6, 5), dtype=np.float32).astype(bf16)
    b = rng.standard_normal((5, 3)).astype(bf16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    for fmt in ("CSR", "COO", "DIAI"):
        y = ustc.matmul(ustc.Tensor.from_dense(a, fmt), b)
        assert isinstance(y, np.ndarray) and y.dtype == bf16
        np.testing.assert_allclose(y.astype(np.float32), want.astype(bf16).astype(np.float32), **BF16)
    c = np.ones((6, 3), bf16)
    assert ustc.matmul(ustc.Tensor.from_dense(a, "CSR"), b, c) is c
    np.testing.assert_allclose(c.astype(np.float32), (want + 1).astype(bf16).astype(np.float32), **BF16)
    S = ustc.matmul(ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "CSR"))
    assert S.dtype == bf16
