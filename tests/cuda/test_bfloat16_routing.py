"""Which bfloat16 products reach the generated CUDA kernels, and the errors before any kernel runs.

In process, without a device: planning a cuda product raises DeviceError (kernels run in
``matrix.py``'s simulator and GPU modes, where the same products are checked against NumPy).
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import ust
from ustc.errors import DeviceError, UnsupportedOperation
from ustc.ops import library, runtime

BF16 = ml_dtypes.bfloat16
CUDA = {"target": "cuda"}


def operands():
    a = sp.random(6, 5, density=0.5, format="csr", random_state=1)
    A = ustc.Tensor.from_dense(a.toarray().astype(BF16), "CSR")
    return A, np.arange(5).astype(BF16), np.ones(6, BF16)


def test_ml_dtypes_operands_are_bound_as_bfloat16_for_the_cuda_kernels():
    A, x, c = operands()
    mm = ustc.Matmul(A, x, c, alpha=0.5, beta=2.0, options=CUDA)
    bound = mm._bound
    assert mm._wide is None and bound.a is A                        # no float32 twins
    assert bound.dtype == np.dtype(BF16) and mm.problem.out_dtype == "bfloat16"   # Python floats keep it
    assert type(bound.alpha) is np.float32 and type(bound.beta) is np.float32     # the kernels compute in float32
    with pytest.raises(DeviceError, match="NVIDIA GPU"):            # no device here: refused before a launch
        mm.plan()
    assert np.array_equal(c, np.ones(6, BF16))                       # c untouched
    compat = ust.Matmul(ust.Tensor.from_package(A), x, execution=ust.ExecutionCUDA())
    assert compat._wide is None and compat._mm._bound.dtype == np.dtype(BF16)


def test_the_cpu_target_keeps_float32_twins():
    A, x, c = operands()
    mm = ustc.Matmul(A, x, c, alpha=0.5)
    assert mm._wide is not None and mm._bound.dtype == np.float32
    got = mm.execute()
    want = (0.5 * A.to_dense().astype(np.float32) @ x.astype(np.float32) + 1).astype(BF16)
    assert got is c and np.array_equal(got.astype(np.float32), want.astype(np.float32))


def test_torch_bfloat16_host_tensors_keep_twins_on_the_cuda_target():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.bfloat16).to_sparse_csr()
    mm = ustc.Matmul(a, torch.ones(2, dtype=torch.bfloat16), options=CUDA)
    assert mm._wide is not None and mm._bound.dtype == np.float32   # ustc reads torch bfloat16 through twins


def test_without_ml_dtypes_a_bfloat16_operand_is_a_clear_error(monkeypatch):
    A, x, _ = operands()
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)              # as if not installed
    with pytest.raises(UnsupportedOperation, match="ml_dtypes"):
        ustc.Matmul(A, x, options=CUDA)



def test_generated_cpu_kernels_refuse_bfloat16_by_name():
    A, x, _ = operands()
    with pytest.raises(UnsupportedOperation, match="tensor '.*' holds bfloat16 values.*cpu target"):
        ustc.einsum("ij,j->i", A, x)
    wide = ustc.Tensor.from_dense(A.to_dense().astype(np.float32), "CSR")
    y = np.zeros(6, BF16)
    program = library.parse_program(["y[i] = A[i,j] * x[j]"])
    with pytest.raises(UnsupportedOperation, match="tensor 'y' holds bfloat16"):   # an output too
        runtime.execute(program, {"A": wide, "x": x.astype(np.float32), "y": y}, target="cpu")
    assert not y.astype(np.float32).any()
