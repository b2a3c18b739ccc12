"""ustc.ust.Matmul / matmul: nvmath-python's calls, checked against NumPy."""

import logging

import numpy as np
import pytest
import scipy.sparse as sps

import ustc
from ustc import ust
from ustc.ust import Matmul, MatmulOptions, Tensor, matmul, matmul_matrix_qualifiers_dtype

RNG = np.random.default_rng(7)
A = sps.random_array((5, 6), density=0.4, format="csr", rng=RNG) + sps.eye_array(5, 6, format="csr")
B = RNG.random((6, 3))
C = RNG.random((5, 3))


def qualifiers(transpose=(0, 0), conjugate=(0, 0)):
    q = np.zeros((3,), dtype=matmul_matrix_qualifiers_dtype)
    q["is_transpose"][:2], q["is_conjugate"][:2] = transpose, conjugate
    return q


def test_ust_operands_update_c_in_place_and_return_it():
    a, b, c_array = Tensor.from_package(A), Tensor.from_package(B.copy()), C.copy()
    c = Tensor.from_package(c_array)
    r = matmul(a, b, c, alpha=2.0, beta=0.5)
    assert r is c
    assert np.allclose(c_array, 2.0 * A.toarray() @ B + 0.5 * C)
    assert np.allclose(Tensor.to_package(r), c_array)


def test_package_operands():
    c = C.copy()
    r = matmul(A, B, c, alpha=1.5, beta=1.0)
    assert np.allclose(r, 1.5 * A.toarray() @ B + C)


def test_stateful_with_reset_operands():
    a, b, c_array = Tensor.from_package(A), B.copy(), C.copy()
    c = Tensor.from_package(c_array)
    with Matmul(a, Tensor.from_package(b), c, alpha=1.0, beta=0.0) as mm:
        mm.plan()
        assert mm.execute() is c and np.allclose(c_array, A.toarray() @ b)
        b *= 3.0                                                  # in place: seen by the next execute
        mm.execute(stream=None)
        assert np.allclose(c_array, A.toarray() @ b)
        a2 = Tensor.from_package(sps.csr_array(2 * A.toarray()))
        c2_array = np.zeros_like(C)
        c2 = Tensor.from_package(c2_array)
        mm.reset_operands(a=a2, c=c2)
        assert mm.execute() is c2 and np.allclose(c2_array, 2 * A.toarray() @ b)
        mm.reset_operands_unchecked(b=Tensor.from_package(B.copy()))
        assert np.allclose(mm.execute().to_package(), 2 * A.toarray() @ B)


def test_transpose_qualifiers():
    at = sps.csr_array(A.toarray().T)
    c = np.zeros((5, 3))
    r = matmul(at, B, c, beta=0.0, qualifiers=qualifiers(transpose=(1, 0)))
    assert np.allclose(r, A.toarray() @ B)
    r = matmul(A, np.ascontiguousarray(B.T), np.zeros((5, 3)), beta=0.0, qualifiers=qualifiers(transpose=(0, 1)))
    assert np.allclose(r, A.toarray() @ B)


def test_conjugate_qualifiers_follow_the_operands():
    a = sps.csr_array(A.toarray() * (1 + 2j))
    b = B * (2 - 1j)
    c = np.zeros((5, 3), dtype=complex)
    with Matmul(a, b, c, beta=0.0, qualifiers=qualifiers(conjugate=(1, 1))) as mm:
        mm.plan()
        assert np.allclose(mm.execute(), np.conj(a.toarray()) @ np.conj(b))
        b *= 1j                                               # the conjugated copy is refreshed
        assert np.allclose(mm.execute(), np.conj(a.toarray()) @ np.conj(b))
    real = matmul(A, B, np.zeros((5, 3)), beta=0.0, qualifiers=qualifiers(conjugate=(1, 1)))
    assert np.allclose(real, A.toarray() @ B)


def _complex(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def test_transpose_and_conjugate_together_is_the_conjugate_transpose():
    """nvmath-python: a qualifier with both flags set applies op_h, the conjugate transpose."""
    a = _complex(6, 5) * (RNG.random((6, 5)) < 0.5)
    b = _complex(3, 6)
    r = matmul(sps.csr_array(a), b.T.copy(), np.zeros((5, 3), complex), beta=0.0,
               qualifiers=qualifiers(transpose=(1, 0), conjugate=(1, 0)))
    assert np.allclose(r, a.conj().T @ b.T)
    r = matmul(sps.csr_array(a.T.copy()), b, np.zeros((5, 3), complex), beta=0.0,
               qualifiers=qualifiers(transpose=(0, 1), conjugate=(0, 1)))
    assert np.allclose(r, a.T @ b.conj().T)


def test_conjugated_sparse_values_changed_in_place_are_seen():
    a = sps.csr_array(_complex(5, 6) * (RNG.random((5, 6)) < 0.5) + sps.eye_array(5, 6))
    b = _complex(6, 3)
    with Matmul(a, b, np.zeros((5, 3), complex), beta=0.0, qualifiers=qualifiers(conjugate=(1, 0))) as mm:
        mm.plan()
        assert np.allclose(mm.execute(), np.conj(a.toarray()) @ b)
        a.data *= 1j
        assert np.allclose(mm.execute(), np.conj(a.toarray()) @ b)


def test_torch_complex64_and_lazy_conjugation():
    """A torch tensor's lazy conjugation flag combines with the qualifier (conjugating twice is
    nothing), as nvmath-python combines them; complex64 stays complex64."""
    torch = pytest.importorskip("torch")
    a = _complex(5, 6).astype(np.complex64) * (RNG.random((5, 6)) < 0.5)
    b = _complex(6, 3).astype(np.complex64)
    ta, lazy = torch.from_numpy(a).to_sparse_csr(), torch.from_numpy(b).conj()
    assert lazy.is_conj()
    for flag, want in ((0, a @ b.conj()), (1, a @ b)):
        c = torch.zeros(5, 3, dtype=torch.complex64)
        r = matmul(ta, lazy, c, beta=0.0, qualifiers=qualifiers(conjugate=(0, flag)))
        assert r is c and r.dtype == torch.complex64
        assert np.allclose(r.numpy(), want, atol=1e-5)


def test_qualifying_c_is_unsupported():
    q = np.zeros((3,), dtype=matmul_matrix_qualifiers_dtype)
    q[2]["is_transpose"] = 1
    with pytest.raises(ustc.UnsupportedOperation, match="c"):
        Matmul(A, B, C.copy(), qualifiers=q)
    q[2]["is_transpose"], q[2]["is_conjugate"] = 0, 1
    with pytest.raises(NotImplementedError):                # nvmath-python's exception class
        Matmul(A, B, C.copy(), qualifiers=q)


def test_options_execution_and_logger(caplog):
    logger = logging.getLogger("compat-test")
    for options in (MatmulOptions(codegen=True, logger=logger), {"codegen": True, "logger": logger}):
        with caplog.at_level(logging.INFO, logger="compat-test"):
            r = matmul(A, B, np.zeros((5, 3)), beta=0.0, options=options, execution=ust.ExecutionCPU())
        assert np.allclose(r, A.toarray() @ B)
        assert "generated" in caplog.text
    r = matmul(A, B, np.zeros((5, 3)), beta=0.0, execution="cpu",
               options={"compute_type": ust.ComputeType.CUDA_R_64F})
    assert np.allclose(r, A.toarray() @ B)
    with pytest.raises(ustc.UnsupportedOperation, match="compute_type"):
        Matmul(A, B, C.copy(), options={"compute_type": ust.ComputeType.CUDA_R_32F})
    with pytest.raises(TypeError):
        Matmul(A, B, C.copy(), options={"no_such_option": 1})


def test_a_wider_compute_type_accumulates_in_it_and_keeps_the_operands_type():
    """nvmath-python: ``compute_type`` is the type the product is computed in; the result keeps
    the operands' type. 1e8 + 1 - 1e8 is 0 in float32 partial sums and 1 in float64."""
    a = sps.csr_array(np.array([[1e8, 1.0, -1e8]], dtype=np.float32))
    b = np.ones((3, 2), dtype=np.float32)
    wide = MatmulOptions(compute_type=ust.ComputeType.CUDA_R_64F)
    assert matmul(a, b, np.zeros((1, 2), np.float32), beta=0.0)[0, 0] == 0.0   # float32 (natural)
    c = np.zeros((1, 2), np.float32)
    r = matmul(a, b, c, beta=0.0, options=wide)
    assert r is c and c.dtype == np.float32 and c.tolist() == [[1.0, 1.0]]
    y = matmul(a, b, options=wide)
    assert y.dtype == np.float32 and y.tolist() == [[1.0, 1.0]]


def test_a_wider_compute_type_sees_operands_changed_between_executes():
    a32, b32 = A.toarray().astype(np.float32), B.astype(np.float32)
    a, b, c = sps.csr_array(a32), b32.copy(), np.zeros((5, 3), np.float32)
    with Matmul(a, b, c, options={"compute_type": ust.ComputeType.CUDA_R_64F}) as mm:
        mm.plan()
        assert mm.execute() is c
        assert np.allclose(c, a32 @ b32, rtol=1e-6)
        b *= 2
        a.data *= 3
        mm.execute()                                            # accumulates: c + 6 a @ b
        assert np.allclose(c, 7 * (a32 @ b32), rtol=1e-6)
        mm.reset_operands(b=b32.copy())
        mm.execute()
        assert np.allclose(c, 10 * (a32 @ b32), rtol=1e-6) and c.dtype == np.float32


def test_compute_types_ustc_does_not_take():
    with pytest.raises(ustc.UnsupportedOperation, match="compute_type"):   # narrower than the operands
        Matmul(A, B, C.copy(), options={"compute_type": ust.ComputeType.CUDA_R_32F})
    with pytest.raises(ValueError, match="complex"):                       # real operands, complex type
        Matmul(A, B, C.copy(), options={"compute_type": ust.ComputeType.CUDA_C_64F})


def test_prologs_epilogs_and_semirings_are_forwarded():
    """nvmath's fusion arguments reach ustc.Matmul.plan: compile_matmul_* results carry the
    Python function, which ustc compiles into the generated kernel."""
    a, c0 = A.toarray(), C.copy()
    prolog = ust.compile_matmul_prolog(lambda v: 2 * v, operand_label="a", dtype="float64")
    epilog = ust.compile_matmul_epilog(lambda v: max(v, 0.0), dtype="float64")
    c = C.copy()
    with Matmul(A, B, c, beta=1.0) as mm:
        mm.plan(prologs={"a": prolog}, epilog=epilog)
        assert mm.execute() is c
    np.testing.assert_allclose(c, np.maximum(2 * a @ B + c0, 0))
    c = C.copy()
    plus = ust.compile_matmul_mul(lambda x, y: x + y, dtype="float64")
    r = matmul(A, B, c, semiring={"mul": plus})     # plus-plus: sum over A's stored entries of a + b
    rows, cols = A.nonzero()
    want = c0.copy()
    np.add.at(want, rows, a[rows, cols][:, None] + B[cols])
    np.testing.assert_allclose(r, want)
    with pytest.raises(ustc.UnsupportedOperation, match="prolog"):
        matmul(A, B, C.copy(), prologs={"c": prolog})
    with pytest.raises(ustc.UnsupportedOperation, match="not both"):
        Matmul(A, B, C.copy()).plan(epilog=epilog, epilogs=epilog)


