"""ustc tensors in ``scipy.sparse.linalg``: ``ustc.aslinearoperator(A)`` and the protocol
that lets SciPy take a Tensor directly.

    >>> import numpy as np, scipy.sparse.linalg as sla, ustc
    >>> A = ustc.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50))
    >>> op = ustc.aslinearoperator(A)          # a scipy.sparse.linalg.LinearOperator
    >>> x, info = sla.cg(op, np.ones(50), rtol=1e-10)
    >>> info, bool(np.allclose(A @ x, 1))
    (0, True)
    >>> x, info = sla.cg(A, np.ones(50), rtol=1e-10)   # the Tensor itself: A.matvec / A.rmatvec
    >>> info
    0

:class:`TensorLinearOperator` (a ``LinearOperator`` subclass, built when first asked for:
``import ustc`` does not import ``scipy.sparse.linalg``) holds planned :class:`ustc.Matmul` products: the first
``matvec`` (``rmatvec``, ``matmat`` with k columns, ...) plans ``A @ v`` for a work vector the
operator owns, later calls copy their input into that vector and only execute, writing a
fresh result array (SciPy keeps what ``matvec`` returns; the Matmul's own result buffer is
reused by every execute, so it is never handed out). One plan per (product, input dtype,
number of columns), at most :data:`MAX_PLANS` kept. ``rmatvec`` / ``rmatmat`` are the
adjoint ``A^H x`` (the transpose for real tensors), through the Matmul's ``transpose_a``
(no transposed copy of ``A``). Values of ``A`` changed in place are seen by the next call;
the caller's ``x`` is never written.

``scipy.sparse.linalg.aslinearoperator`` (which ``cg``, ``gmres``, ``bicgstab``, ``eigsh``,
``svds``, ... call on their operand) accepts any object with ``shape`` and ``matvec``, and
uses its ``rmatvec``, ``rmatmat`` and ``dtype`` when present; ``Tensor`` has those four
(:func:`matvec`, :func:`rmatvec`, :func:`rmatmat` below), so a Tensor goes to SciPy's solvers
as it is. They are one-shot products through ``ustc.matmul``'s plan cache (a repeated call
with the same operand kinds only executes) and hold nothing on the tensor;
``aslinearoperator`` holds its own plans and is the faster of the two per call.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict

import numpy as np

from ..errors import DeviceError, ShapeError, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor

__all__ = ["aslinearoperator", "TensorLinearOperator", "matvec", "rmatvec", "rmatmat"]

#: planned products an operator keeps (per product kind, input dtype and column count)
MAX_PLANS = 8


def _matrix(a, fn: str) -> Tensor:
    """``a`` as a 2-D host Tensor (SciPy / torch sparse and dense arrays viewed zero-copy)."""
    if not isinstance(a, Tensor):
        try:
            a = Tensor.from_package(a)
        except UstcError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything ustc cannot view is a bad operand
            raise UstcError(f"{fn}: cannot view a {type(a).__name__} as a ustc tensor: {exc}") from None
    if a.ndim != 2:
        raise ShapeError(f"{fn}: A has shape {a.shape}; a linear operator is a matrix (2-D)")
    if a.device != "cpu":
        raise DeviceError(f"{fn}: A is on '{a.device}'; scipy.sparse.linalg works on host arrays "
                          f"(call A.to('cpu') first)")
    return a


def _operand_dtype(x: np.ndarray, fn: str) -> np.dtype:
    if x.dtype.kind not in "biufc":
        raise UstcError(f"{fn}: x has dtype {x.dtype}; numbers only")
    return x.dtype


@functools.cache
def _operator_class():
    """The class, built at first use: ``import ustc`` does not import scipy.sparse.linalg."""
    from scipy.sparse.linalg import LinearOperator

    class TensorLinearOperator(LinearOperator):
        """``A`` (a 2-D ustc Tensor on the host) as a SciPy ``LinearOperator`` over planned Matmuls
        (see the module docstring). ``tensor`` is ``A``; ``release()`` drops the plans (a later
        call plans again)."""

        def __init__(self, a):
            a = _matrix(a, "aslinearoperator")
            super().__init__(dtype=np.dtype(a.dtype), shape=a.shape)
            self.tensor = a
            self._plans: OrderedDict = OrderedDict()
            self._lock = threading.Lock()

        # -- SciPy's hooks ----------------------------------------------------------------
        def _matvec(self, x):
            return self._product(x, adjoint=False, columns=False)

        def _rmatvec(self, x):
            return self._product(x, adjoint=True, columns=False)

        def _matmat(self, X):
            return self._product(X, adjoint=False, columns=True)

        def _rmatmat(self, X):
            return self._product(X, adjoint=True, columns=True)

        # -- products ---------------------------------------------------------------------
        def _product(self, x, *, adjoint: bool, columns: bool):
            """``A @ x`` or ``A^H @ x`` (``x`` of shape (n,) or (n, 1), or (n, k) for ``columns``)
            into a new array; ``x`` is only read."""
            fn = ("rmatmat" if columns else "rmatvec") if adjoint else ("matmat" if columns else "matvec")
            x = packages.host_array(x)
            m, n = self.shape[::-1] if adjoint else self.shape
            if columns:
                if x.ndim != 2 or x.shape[0] != n:
                    raise ShapeError(f"{fn}: X has shape {x.shape}, expected ({n}, k) for an operator of shape "
                                     f"{self.shape}")
                out_shape = (m, x.shape[1])
            else:
                if x.shape not in ((n,), (n, 1)):
                    raise ShapeError(f"{fn}: x has shape {x.shape}, expected ({n},) or ({n}, 1) for an operator "
                                     f"of shape {self.shape}")
                out_shape = (m,) if x.ndim == 1 else (m, 1)
                x = x.reshape(n)
            dtype = _operand_dtype(x, fn)
            out_dtype = np.result_type(self.tensor.dtype, dtype)
            if 0 in x.shape or m == 0:
                return np.zeros(out_shape, out_dtype)
            conj = adjoint and self.tensor.dtype.kind == "c"     # A^H x = conj(A^T conj(x))
            y = np.empty((m,) + x.shape[1:], out_dtype)
            with self._lock:
                mm, v = self._plan(adjoint, dtype, x.shape[1:])
                if conj:
                    np.conjugate(x, out=v)
                else:
                    v[...] = x
                mm.execute(out=y)
            if conj:
                np.conjugate(y, out=y)
            return y.reshape(out_shape)

        def _plan(self, adjoint: bool, dtype: np.dtype, tail: tuple):
            """The planned Matmul for this product and the work array it reads, planned once."""
            from .plan import Matmul

            key = (adjoint, dtype.str, tail)
            found = self._plans.get(key)
            if found is not None:
                self._plans.move_to_end(key)
                return found
            n = self.shape[0] if adjoint else self.shape[1]
            v = np.zeros((n,) + tail, dtype)
            mm = Matmul(self.tensor, v, transpose_a=adjoint).plan()
            self._plans[key] = (mm, v)
            while len(self._plans) > MAX_PLANS:
                old, _ = self._plans.popitem(last=False)[1]
                old.release()
            return mm, v

        @property
        def plan_info(self) -> list[str]:
            """``plan_info`` of every Matmul the operator holds (route and why), oldest first."""
            return [mm.plan_info for mm, _ in self._plans.values()]

        def release(self) -> None:
            """Drop every planned product (their kernels' arguments and buffers)."""
            with self._lock:
                for mm, _ in self._plans.values():
                    mm.release()
                self._plans.clear()

        def __repr__(self) -> str:
            return (f"<{self.shape[0]}x{self.shape[1]} TensorLinearOperator with dtype={self.dtype} over "
                    f"{self.tensor.format}>")

    TensorLinearOperator.__module__ = __name__
    TensorLinearOperator.__qualname__ = "TensorLinearOperator"
    return TensorLinearOperator


def __getattr__(name: str):
    if name == "TensorLinearOperator":
        return _operator_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def aslinearoperator(a):
    """``a`` as a :class:`scipy.sparse.linalg.LinearOperator` whose ``matvec``, ``matmat``,
    ``rmatvec`` and ``rmatmat`` run planned ``ustc.Matmul`` products (plan once, execute per
    call). ``a``: a 2-D ustc Tensor on the host, or anything ``Tensor.from_package`` views (SciPy,
    torch sparse, dense arrays). ShapeError for other ranks, DeviceError for a tensor on
    'cuda'."""
    return _operator_class()(a)


# -- the protocol Tensor offers scipy.sparse.linalg.aslinearoperator (one-shot, plan cache) --------


def _vector_in(a: Tensor, x, n: int, fn: str):
    x = packages.host_array(x)
    if x.shape not in ((n,), (n, 1)):
        raise ShapeError(f"{fn}: x has shape {x.shape}, expected ({n},) or ({n}, 1) for a matrix of shape {a.shape}")
    _operand_dtype(x, fn)
    return x


def matvec(a: Tensor, x):
    """``a @ x`` for ``x`` of shape (n,) or (n, 1), a new array of shape (m,) or (m, 1) (SciPy's
    ``matvec``); ``ustc.matmul`` through its plan cache."""
    from .matmul import matmul

    a = _matrix(a, "matvec")
    x = _vector_in(a, x, a.shape[1], "matvec")
    return _fresh(matmul(a, x.reshape(-1)), (a.shape[0],) + x.shape[1:])


def rmatvec(a: Tensor, x):
    """``a^H @ x`` (the conjugate transpose; the transpose of a real ``a``) for ``x`` of shape
    (m,) or (m, 1): a new array of shape (n,) or (n, 1)."""
    from .matmul import matmul

    a = _matrix(a, "rmatvec")
    x = _vector_in(a, x, a.shape[0], "rmatvec")
    out = (a.shape[1],) + x.shape[1:]
    if a.dtype.kind != "c":
        return _fresh(matmul(a, x.reshape(-1), transpose_a=True), out)
    return np.conjugate(_fresh(matmul(a, np.conjugate(x.reshape(-1)), transpose_a=True), out))


def rmatmat(a: Tensor, X):
    """``a^H @ X`` for ``X`` of shape (m, k): a new (n, k) array."""
    from .matmul import matmul

    a = _matrix(a, "rmatmat")
    X = packages.host_array(X)
    if X.ndim != 2 or X.shape[0] != a.shape[0]:
        raise ShapeError(f"rmatmat: X has shape {X.shape}, expected ({a.shape[0]}, k) for a matrix of shape {a.shape}")
    _operand_dtype(X, "rmatmat")
    out = (a.shape[1], X.shape[1])
    if a.dtype.kind != "c":
        return _fresh(matmul(a, X, transpose_a=True), out)
    return np.conjugate(_fresh(matmul(a, np.conjugate(X), transpose_a=True), out))


def _fresh(y, shape):
    """The one-shot result (``ustc.matmul`` allocates it per call) as a NumPy array of ``shape``."""
    return np.asarray(y).reshape(shape)
