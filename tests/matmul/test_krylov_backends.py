"""The Krylov solvers against the vector-backend protocol (:mod:`ustc.ops.vectors`), on the host.

``Reference`` implements the protocol in plain NumPy, operation for operation as the
device backend (:class:`ustc.ops.cuda_vectors.DeviceVectors`) does it: float64 sums,
classical Gram-Schmidt twice, the diagonal summed from the matrix. Swapped in for the
host backend, ``ustc.solve`` must still meet SciPy's answers; the device kernels
themselves run in ``tests/cuda/test_krylov.py`` (simulator, PTX, GPU).
"""

from __future__ import annotations

import importlib.util
import inspect
import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ustc
from matmul_helpers import named_2d
from ustc.ops import solve as solve_module
from ustc.ops import vectors


class Reference:
    """The protocol in NumPy expressions, mirroring DeviceVectors; counts its reductions."""

    def __init__(self):
        self.calls = 0

    empty = staticmethod(lambda n, dtype: np.empty(n, dtype=dtype))
    zeros = staticmethod(lambda n, dtype: np.zeros(n, dtype=dtype))

    def asarray(self, v, dtype, copy=True):
        return np.array(v, dtype=dtype, order="C")

    def basis(self, rows, n, dtype):
        data = np.empty((rows, n), dtype=dtype)
        return vectors.Basis(data, [data[k] for k in range(rows)])

    def diagonal(self, a, n, dtype):
        return np.diagonal(np.asarray(a.to_dense())).astype(dtype)

    def dot(self, a, b):
        self.calls += 1
        s = np.vdot(a.astype(np.complex128), b.astype(np.complex128))
        dtype = np.result_type(a.dtype, b.dtype)
        return dtype.type(s if dtype.kind == "c" else s.real)

    def norm2(self, a):
        self.calls += 1
        return math.sqrt(float(np.vdot(a, a).real))

    def cg_step(self, x, r, z, p, q, dinv, alpha, jacobi):
        x += alpha * p
        r -= alpha * q
        if jacobi:
            np.multiply(dinv, r, out=z)
        return float(np.vdot(r, r).real), self.dot(r, z if jacobi else r)

    def xpby(self, x, beta, y):
        y[...] = x + beta * y

    def scale_into(self, out, d, x):
        np.multiply(d, x, out=out)

    def residual(self, r, b, ax):
        return self.axpy_norm(r, b, -1, ax)

    def axpy_norm(self, out, x, alpha, y):
        self.calls += 1
        out[...] = x + alpha * y
        return float(np.vdot(out, out).real)

    def bicg_p(self, p, r, beta, omega, v):
        p[...] = r + beta * (p - omega * v)

    def bicg_x(self, x, alpha, ph, omega, sh):
        x += alpha * ph + omega * sh

    def copy(self, out, v):
        out[...] = v

    def axpy(self, y, alpha, x):
        y += alpha * x

    def set_row(self, V, k, w, d):
        V.rows[k][...] = w / d

    def orthogonalize(self, V, k1, w):
        h = np.zeros(k1, dtype=w.dtype)
        for _ in range(2):
            c = V.data[:k1].conj() @ w
            w -= c @ V.data[:k1]
            h += c
        return h, self.norm2(w)

    def combine(self, out, V, y):
        out[...] = y @ V.data[:len(y)] if len(y) else 0


def spd(n, dtype=np.float64, seed=0):
    m = sp.random(n, n, density=0.05, random_state=seed)
    if np.dtype(dtype).kind == "c":
        m = m + 1j * sp.random(n, n, density=0.03, random_state=seed + 1)
    m = m + m.T.conj()
    return (m + sp.diags(1 + np.asarray(abs(m).sum(axis=1)).ravel())).astype(dtype).tocsr()


def nonsymmetric(n, dtype=np.float64, seed=1):
    m = sp.random(n, n, density=0.08, random_state=seed)
    if np.dtype(dtype).kind == "c":
        m = m + 1j * sp.random(n, n, density=0.03, random_state=seed + 1)
    return (m + sp.diags(np.linspace(0.5, 2, n) + 0.6 * np.asarray(abs(m).sum(axis=1)).ravel())).astype(dtype).tocsr()


@pytest.fixture
def reference(monkeypatch):
    backend = Reference()
    monkeypatch.setattr(solve_module, "_vectors", lambda a: backend)
    return backend


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("pre", [None, "jacobi"])
@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
def test_reference_backend_meets_scipy(reference, method, pre, dtype, rng):
    n = 80
    s = spd(n, dtype) if method == "cg" else nonsymmetric(n, dtype)
    b = (rng.standard_normal(n) + (1j * rng.standard_normal(n) if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, method, preconditioner=pre, rtol=rtol, restart=10,
                         return_info=True)
    assert info.converged and x.dtype == np.dtype(dtype) and reference.calls > info.iterations
    assert np.linalg.norm(s @ x - b) <= 1.05 * rtol * np.linalg.norm(b) + (1e-5 if dtype == np.float32 else 0)
    wide = np.result_type(dtype, np.float64)
    exact = spla.spsolve(s.tocsc().astype(wide), b.astype(wide))
    np.testing.assert_allclose(x, exact, rtol=1e3 * rtol, atol=1e3 * rtol)


@pytest.mark.parametrize("fmt", named_2d())
def test_reference_backend_in_every_named_format(reference, fmt, rng):
    if any(lv.type.keyword == "structured" for lv in fmt.levels):
        pytest.skip("an n:m format cannot hold an arbitrary matrix")
    s = nonsymmetric(40, seed=3)
    A = ustc.Tensor.from_dense(s.toarray(), fmt)
    b = rng.standard_normal(40)
    for method in ("gmres", "bicgstab"):
        x = ustc.solve(A, b, method, preconditioner="jacobi", restart=5)
        np.testing.assert_allclose(s @ x, b, atol=1e-6)


def test_reference_and_host_backends_agree_step_by_step(rng):
    """Each protocol operation of the reference gives what the host backend gives."""
    host, ref = vectors.HOST, Reference()
    v = [rng.standard_normal(30) + 1j * rng.standard_normal(30) for _ in range(4)]
    assert host.dot(v[0], v[1]) == pytest.approx(ref.dot(v[0], v[1]))
    V1, V2 = host.basis(4, 30, np.complex128), ref.basis(4, 30, np.complex128)
    for B, be in ((V1, host), (V2, ref)):
        be.set_row(B, 0, v[0], np.linalg.norm(v[0]))
    for k in (1, 2, 3):
        w1, w2 = v[k].copy(), v[k].copy()
        (h1, n1), (h2, n2) = host.orthogonalize(V1, k, w1), ref.orthogonalize(V2, k, w2)
        np.testing.assert_allclose(h1, h2, atol=1e-12)
        assert n1 == pytest.approx(n2)
        host.set_row(V1, k, w1, n1)
        ref.set_row(V2, k, w2, n2)
    np.testing.assert_allclose(V1.data @ V1.data.conj().T, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(V1.data, V2.data, atol=1e-12)


def test_the_host_backend_is_used_for_host_tensors_and_both_have_the_protocol():
    from ustc.ops.cuda_vectors import DeviceVectors

    A = ustc.Tensor.from_dense(np.eye(3), "CSR")
    assert solve_module._vectors(A) is vectors.HOST
    protocol = {m for m in dir(Reference) if not m.startswith("_")} - {"calls"}
    assert protocol <= set(dir(vectors.HostVectors)) and protocol <= set(dir(DeviceVectors))


def test_device_kernel_signatures_cover_every_kernel():
    """The PTX check compiles what DeviceVectors launches: one signature per kernel and
    dtype, each with the kernel's number of parameters."""
    from numba import types

    from ustc.ops import cuda_vectors

    for name, kernel in cuda_vectors.KERNELS.items():
        sigs = cuda_vectors.signatures(name, types.complex64)
        arity = len(inspect.signature(kernel.py_func).parameters)
        assert sigs and all(len(sig) == arity for sig in sigs), name


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_a_device_solve_without_cupy_names_the_extra():
    host = ustc.Tensor.from_dense(np.eye(3), "CSR")
    on_cuda = ustc.Tensor(host.format, host.shape, host._buffers, host._values, device="cuda", package="cupy")
    with pytest.raises(ustc.MissingDependencyError, match=r"pip install 'ustc\[gpu\]'"):
        solve_module._vectors(on_cuda)


# -- the host kernels: one body, a parallel and a one-thread build ---------------------------

# The parallel build compiles the one body with parallel=True (3-5x the one-thread compile):
# it is checked on one real and one complex dtype, the one-thread build on every dtype.
PARALLEL_DTYPES = (np.float64, np.complex128)


def _builds(dtype) -> tuple:
    """serial=True / False: the builds to check for ``dtype``."""
    return (True, False) if dtype in PARALLEL_DTYPES else (True,)


def _host(serial: bool) -> vectors.HostVectors:
    host = vectors.HostVectors()
    host.short = 2**62 if serial else 0           # every vector short / long
    return host


def _run_ops(backend, v, alpha, beta):
    """Every fused update of the protocol on copies of ``v``; what each returned and left behind."""
    out = {}
    for name, args in [("dot", (0, 1)), ("norm2", (0,)), ("xpby", (0, beta, 1)), ("scale_into", (2, 0, 1)),
                       ("residual", (0, 1, 2)), ("axpy_norm", (0, 1, alpha, 2)), ("bicg_p", (0, 1, beta, alpha, 2)),
                       ("bicg_x", (0, alpha, 1, beta, 2)), ("axpy", (0, alpha, 1)),
                       ("cg_step", (0, 1, 2, 3, 4, 5, alpha, True)), ("cg_step", (0, 1, 2, 3, 4, 5, alpha, False))]:
        h = [a.copy() for a in v]
        got = getattr(backend, name)(*[h[a] if type(a) is int else a for a in args])     # ints pick vectors
        out[(name, args[-1])] = (np.array(got, dtype=np.complex128).ravel(), np.stack(h))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("n", [0, 1, 37, 20_000])
def test_serial_and_parallel_host_kernels_agree_with_numpy(dtype, n):
    rng = np.random.default_rng(n)
    v = [rng.standard_normal(n) + (1j * rng.standard_normal(n) if np.dtype(dtype).kind == "c" else 0)
         for _ in range(6)]
    v = [a.astype(dtype) for a in v]
    alpha, beta = np.dtype(dtype).type(0.7), np.dtype(dtype).type(-1.3)
    want = _run_ops(Reference(), v, alpha, beta)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for serial in _builds(dtype):
        got = _run_ops(_host(serial), v, alpha, beta)
        for key, (scalars, vecs) in want.items():
            np.testing.assert_allclose(got[key][0], scalars, rtol=tol, atol=tol * max(n, 1), err_msg=str((serial, key)))
            np.testing.assert_allclose(got[key][1], vecs, rtol=tol, atol=tol, err_msg=str((serial, key)))


def test_short_vectors_take_the_one_thread_kernels(monkeypatch):
    from ustc.ops import _vector

    host, used = vectors.HostVectors(), []
    for name, twin in _vector.SERIAL.items():
        assert twin.py_func.__qualname__ == name + "_serial"          # its own Numba cache entry
        assert getattr(_vector, name).targetoptions.get("parallel") and not twin.targetoptions.get("parallel")
    monkeypatch.setattr(host, "serial", type("S", (), {"dot": staticmethod(lambda a, b: used.append("serial"))}))
    monkeypatch.setattr(host, "parallel", type("P", (), {"dot": staticmethod(lambda a, b: used.append("parallel"))}))
    host.dot(np.ones(_vector.SERIAL_LENGTH - 1), np.ones(_vector.SERIAL_LENGTH - 1))
    host.dot(np.ones(_vector.SERIAL_LENGTH), np.ones(_vector.SERIAL_LENGTH))
    assert used == ["serial", "parallel"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("n", [1, 7, 1025, 3001])
def test_gram_schmidt_kernels_match_classical_gram_schmidt_twice(dtype, n):
    """The chunked Gram-Schmidt kernels (four rows and two entries per step, remainders, chunk
    borders) in both builds (the parallel one on PARALLEL_DTYPES), against NumPy's classical
    Gram-Schmidt twice."""
    rng = np.random.default_rng(n)
    tol = 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11
    for k1 in (0, 1, 3, 4, 5, 9):
        k1 = min(k1, n - 1) if n > 1 else 0
        raw = rng.standard_normal((n, 10)) + (1j * rng.standard_normal((n, 10)) if np.dtype(dtype).kind == "c" else 0)
        q = np.linalg.qr(raw)[0][:, :k1].T.astype(dtype)
        w0 = (rng.standard_normal(n) + (1j * rng.standard_normal(n) if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
        ref_basis = Reference().basis(10, n, dtype)
        ref_basis.data[:k1] = q
        want_w = w0.copy()
        want_h, want_norm = Reference().orthogonalize(ref_basis, k1, want_w)
        for serial in _builds(dtype):
            host = _host(serial)
            basis = host.basis(10, n, dtype)
            basis.data[:k1] = q
            w = w0.copy()
            h, norm = host.orthogonalize(basis, k1, w)
            np.testing.assert_allclose(h, want_h, rtol=tol, atol=tol * n, err_msg=f"{serial} {k1}")
            np.testing.assert_allclose(w, want_w, rtol=tol, atol=tol, err_msg=f"{serial} {k1}")
            assert norm == pytest.approx(want_norm, rel=tol, abs=tol)
            assert np.abs(q.conj() @ w).max(initial=0) <= 10 * tol * max(1.0, norm)


def _counting_host():
    """A host backend whose one-thread kernels count the Gram-Schmidt subtractions."""
    from types import SimpleNamespace

    be = vectors.HostVectors()
    calls = []
    kernels = dict(vars(be.serial))
    subtract = kernels["gs_subtract"]
    kernels["gs_subtract"] = lambda *a: calls.append(a[-1]) or subtract(*a)
    be.serial = SimpleNamespace(**kernels)
    return be, calls


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_gram_schmidt_second_pass_only_where_the_first_cancelled(rng, dtype):
    """Selective reorthogonalisation: a vector far from span(V) takes one subtraction, one almost inside it two; both
    leave the basis orthonormal to working precision and match Gram-Schmidt twice."""
    be, calls = _counting_host()
    n, k = 200, 5
    q, _ = np.linalg.qr(rng.standard_normal((n, k)) + (1j * rng.standard_normal((n, k)) if dtype is np.complex128 else 0))
    V = be.basis(k + 1, n, dtype)
    V.data[:k] = q.T.conj()
    far = rng.standard_normal(n).astype(dtype)
    near = (V.data[:k].T @ rng.standard_normal(k)).astype(dtype) + 1e-9 * rng.standard_normal(n)
    for w, passes in ((far, [False]), (near, [True, False])):
        calls.clear()
        expect = w.copy()
        for _ in range(2):
            expect -= (V.data[:k].conj() @ expect) @ V.data[:k]
        h, norm = be.orthogonalize(V, k, w)
        assert calls == passes
        assert norm == pytest.approx(np.linalg.norm(expect), rel=1e-6)
        np.testing.assert_allclose(w, expect, atol=1e-14 * np.linalg.norm(far))
        assert np.abs(V.data[:k].conj() @ (w / norm)).max() < 1e-13
