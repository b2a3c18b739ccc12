"""``@ustc.jit`` kernels: the body's language, outputs, specialisation and caching, errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ustc
import ustc.cache as cache
from op_helpers import (FAMILIES_2D, NAMED_2D, assert_matches, assert_unchanged, rand_values, seed_of, snapshot,
                        sparse, subset_2d)
from ustc import Tensor
from ustc import formats as F

FAMILIES = subset_2d(*FAMILIES_2D)
HERE = __file__


def _line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (for KernelError locations)."""
    with open(HERE, encoding="utf-8") as fh:
        return next(n for n, line in enumerate(fh, 1) if marker in line and "_line_of" not in line)


@ustc.jit
def residual(r, t, A, x, b, alpha):
    t[i] = A[i, j] * x[j]
    r[i] = b[i] - alpha * t[i]


@ustc.jit
def affine(y, A, x, z, beta):
    y[i] = -(A[i, j] * x[j]) + 2 * z[i] - beta * 0.5 * z[i]


@ustc.jit
def scale_add(C, A, B, s):
    C[i, j] = s * A[i, j] + B[i, j] * 3


@ustc.jit
def two_outputs(y, C, A, x):
    y[i] = A[i, j] * x[j]
    C[i, j] = A[i, j] * A[i, j]


@ustc.jit
def accumulate(C, A):
    C[i, j] += A[i, j]


@pytest.mark.parametrize("fmt", FAMILIES)
def test_several_statements_with_scalars(fmt):
    seed = seed_of("residual", fmt)
    rng = np.random.default_rng(seed)
    A = sparse(fmt, (6, 5), seed=seed)
    x, b = rand_values(5, rng=rng), rand_values(6, rng=rng)
    r, t = np.full(6, 7.0), np.full(6, -3.0)   # '=' overwrites whatever they held
    before = snapshot(A, x, b)
    got = residual(r, t, A, x, b, 0.75)
    assert isinstance(got, tuple) and got[0] is t and got[1] is r  # in the order statements write them
    assert_matches(t, A.to_dense() @ x)
    assert_matches(r, b - 0.75 * (A.to_dense() @ x))
    assert_unchanged([A, x, b], before)


def test_unary_minus_constants_and_right_only_sums():
    """An index only on the right sums over the whole right-hand side: z[i] is added once per j."""
    A = sparse(F.CSR, (4, 6), seed=3)
    x, z = rand_values(6), rand_values(4, rng=np.random.default_rng(9))
    y = affine(np.zeros(4), A, x, z, 1.5)
    assert_matches(y, -(A.to_dense() @ x) + 6 * (2 * z - 0.75 * z))


@pytest.mark.parametrize("out", ["CSR", "COO", "DCSC", "BSR(2, 2)", "(i, j) -> (j : compressed, i : compressed)"])
def test_sparse_output_bound_to_a_format(out):
    A, B = sparse(F.CSR, (5, 6), seed=1), sparse(F.COO(), (5, 6), seed=2)
    C = scale_add(out, A, B, -2.0)
    assert isinstance(C, Tensor) and C.format == ustc.TensorFormat.parse(out)
    C.validate()
    assert_matches(C, -2.0 * A.to_dense() + 3 * B.to_dense())


def test_dense_output_with_integer_scalar():
    A, B = sparse(F.CSR, (3, 4), np.int64, seed=1), sparse(F.CSR, (3, 4), np.int64, seed=2)
    C = np.zeros((3, 4), np.int64)
    scale_add(C, A, B, 5)
    assert_matches(C, 5 * A.to_dense() + 3 * B.to_dense(), np.int64)


def test_tensor_output_takes_new_storage_and_plus_equal_merges():
    A = sparse(F.CSR, (4, 5), seed=4)
    C = sparse(F.DCSR, (4, 5), seed=5)
    old = C.to_dense()
    got = accumulate(C, A)
    assert got is C and C.format == F.DCSR
    C.validate()
    assert_matches(C, old + A.to_dense())
    D = sparse(F.CSR, (4, 5), seed=6)
    scale_add(D, A, A, 1.0)           # '=' replaces what D held
    assert_matches(D, 4 * A.to_dense())


def test_dense_plus_equal_accumulates():
    A = sparse(F.CSC, (4, 5), seed=7)
    C = np.ones((4, 5))
    accumulate(C, A)
    assert_matches(C, 1 + A.to_dense())


def test_several_outputs_dense_and_sparse():
    A = sparse(F.CSR, (4, 5), seed=8)
    x = rand_values(5)
    y, C = two_outputs(np.zeros(4), "COO", A, x)
    assert_matches(y, A.to_dense() @ x)
    assert isinstance(C, Tensor) and C.format == F.COO()
    assert_matches(C, A.to_dense() ** 2)


def test_torch_cpu_tensors_are_dense_operands():
    torch = pytest.importorskip("torch")
    A = sparse(F.CSR, (4, 5), seed=9)
    x = torch.arange(5, dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.float64)
    ustc.jit(_spmv_body)(y, A, x)       # the torch output is updated in place
    assert_matches(y.numpy(), A.to_dense() @ x.numpy())


def _spmv_body(y, A, x):
    y[i] += A[i, j] * x[j]


def test_specialises_per_format_and_dtype_and_caches(fresh_cache):
    kernel = ustc.jit(_spmv_body)
    A, x = sparse(F.CSR, (4, 5), seed=1), rand_values(5)
    kernel(np.zeros(4), A, x)
    kernel(np.zeros(6), sparse(F.CSR, (6, 5), seed=2), x)   # other extents: same kernel
    assert cache.stats()["generated"] == 1
    kernel(np.zeros(4), A.convert(F.CSC), x)                 # other format: a new kernel
    kernel(np.zeros(4, np.float32), sparse(F.CSR, (4, 5), np.float32, seed=1), x.astype(np.float32))
    assert cache.stats()["generated"] == 3
    src_csr = kernel.inspect_source(np.zeros(4), A, x)
    src_csc = kernel.inspect_source(np.zeros(4), A.convert(F.CSC), x)
    assert src_csr != src_csc
    assert cache.stats()["generated"] == 3                   # inspect_source reuses the cached kernels
    assert F.CSR.signature in src_csr and F.CSC.signature in src_csc
    assert "y[i] += A[i, j] * x[j]" in src_csr and "def kernel_0" in src_csr
    cache._forget()                                          # a new process: loaded from disk, not generated
    kernel(np.zeros(4), A, x)
    assert cache.stats()["generated"] == 3 and cache.stats()["disk_hits"] >= 1


def test_inspect_source_is_the_generated_module():
    A = sparse(F.CSR, (3, 3), seed=1)
    src = residual.inspect_source(np.zeros(3), np.zeros(3), A, np.ones(3), np.ones(3), 2.0)
    compile(src, "<kernel>", "exec")
    assert "kernel_0" in src and "kernel_1" in src and "float64" in src


# --------------------------------------------------------------------------- errors in the body


def _kernel_error(tmp_path, fn_source: str) -> tuple[str, str]:
    """The KernelError of decorating ``fn_source``, kept in a file since the parser reads the source."""
    path = tmp_path / "kernels_under_test.py"
    path.write_text(fn_source, encoding="utf-8")
    with pytest.raises(ustc.KernelError) as info:
        exec(compile(fn_source, str(path), "exec"), {"ustc": ustc})
    return str(info.value), str(path)


def test_unknown_tensor_points_at_the_line():
    with pytest.raises(ustc.KernelError) as info:
        @ustc.jit
        def bad(y, A):
            y[i] = A[i, j] * w[j]  # marker: unknown tensor
    message = str(info.value)
    assert f"{HERE}:{_line_of('marker: unknown tensor')}:" in message
    assert "unknown tensor 'w'" in message and "y[i] = A[i, j] * w[j]" in message


def test_tensor_indexed_with_different_ranks():
    with pytest.raises(ustc.KernelError) as info:
        @ustc.jit
        def bad(y, A, x):
            y[i] = A[i, j] * x[j]
            y[i] += A[i] * x[i]  # marker: rank
    assert f":{_line_of('marker: rank')}:" in str(info.value)
    assert "'A' is indexed with 1 indices here but 2 elsewhere" in str(info.value)


@pytest.mark.parametrize("body, match", [
    ("y[i] = A[i, j] / x[j]", "operator Div"),
    ("y[i] -= A[i, j] * x[j]", "only '=' and '\\+=' statements"),
    ("y[i] = A[i, j] * x[j] * i", "used both as an index and as a parameter|unknown name 'i'"),
    ("y[i] = A[i, x] * x[i]", "parameter of the kernel, not an index"),
    ("y[i] = A[i, i]", "repeats an index"),
    ("y = A[i, j]", "left-hand side must be a tensor access"),
    ("y[i] = A[i, j] * x[j]\n    print(y)", "expected 'T\\[i, ...\\] = expression'"),
    ("y[i] = A[i, j] * x(j)", "unsupported expression"),
    ("y[i] = A[i, j] * alpha[j] + alpha", "tensor here but used as a scalar|used both as a scalar"),
    ("y[n_i] = A[n_i, j]", "reserved"),
])
def test_bad_bodies_raise_kernel_error_with_location(body, match, tmp_path):
    text = f"\n\n@ustc.jit\ndef bad(y, A, x, alpha):\n    y[i] = A[i, j] * x[j]\n    {body}\n"
    message, path = _kernel_error(tmp_path, text)
    assert re.search(match, message), message
    assert re.search(f"^{re.escape(path)}:[67]:\\d+: ", message), message   # file:line:column
    assert body.splitlines()[-1].strip() in message.splitlines()[-1]       # and the source line


def test_kernel_without_statements(tmp_path):
    message, _ = _kernel_error(tmp_path, "@ustc.jit\ndef empty(y):\n    'nothing'\n")
    assert "no index-notation statement" in message


# --------------------------------------------------------------------------- errors at call time


def test_rank_mismatch_at_call_names_the_statement_line():
    A = sparse(F.CSR, (3, 4), seed=1)
    with pytest.raises(ustc.KernelError) as info:
        residual(np.zeros(3), np.zeros(3), A, np.ones((4, 1)), np.ones(3), 1.0)
    line = _line_of("t[i] = A[i, j] * x[j]")
    assert f"line {line}" in str(info.value) and "'x' has 2 dimensions" in str(info.value)


def test_extent_mismatch_raises_shape_error():
    A = sparse(F.CSR, (3, 4), seed=1)
    with pytest.raises(ustc.ShapeError, match="index 'i' has extent"):
        residual(np.zeros(5), np.zeros(3), A, np.ones(4), np.ones(3), 1.0)


def test_binding_errors():
    A = sparse(F.CSR, (3, 4), seed=1)
    with pytest.raises(ustc.KernelError, match="residual\\(\\)"):
        residual(np.zeros(3), A)                      # missing arguments
    with pytest.raises(ustc.KernelError, match="bound to a format"):
        residual(np.zeros(3), np.zeros(3), "CSR", np.ones(4), np.ones(3), 1.0)
    readonly = np.zeros(3)
    readonly.flags.writeable = False
    with pytest.raises(ustc.KernelError, match="read-only"):
        residual(readonly, np.zeros(3), A, np.ones(4), np.ones(3), 1.0)
    with pytest.raises(ustc.UnsupportedOperation, match="target"):
        ustc.jit(target="tpu")(_spmv_body)(np.zeros(3), A, np.ones(4))


def test_device_errors():
    A = sparse(F.CSR, (3, 4), seed=1)
    on_gpu = Tensor(A.format, A.shape, A.buffers, A.values, device="cuda")
    with pytest.raises(ustc.DeviceError, match="cuda"):
        residual(np.zeros(3), np.zeros(3), on_gpu, np.ones(4), np.ones(3), 1.0)
    torch = pytest.importorskip("torch")
    with pytest.raises(ustc.DeviceError, match="GPU"):
        residual(np.zeros(3), np.zeros(3), A, torch.empty(4, device="meta"), np.ones(3), 1.0)
