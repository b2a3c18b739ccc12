"""Vector backends of the Krylov solvers (:mod:`ustc.ops.krylov`).

:mod:`ustc.ops.krylov` is written once against a backend object: where the
vectors live (host NumPy, or device CuPy arrays) and which kernels update them.
Every backend has the operations below, with one meaning on all of them
(``dot(a, b)`` is ``sum(conj(a) * b)``; scalars come back to the host as NumPy
scalars of the vectors' dtype, squared norms as floats):

* allocation: ``empty(n, dtype)``, ``zeros(n, dtype)``, ``asarray(v, dtype,
  copy)`` (a contiguous 1-D vector of the backend; ``copy=True`` when the solver
  writes into it), ``basis(rows, n, dtype)`` (a :class:`Basis` for GMRES),
  ``diagonal(a, n, dtype)`` (``diag(a)`` as a host array);
* the fused updates of :mod:`ustc.ops._vector`: ``dot``, ``cg_step``,
  ``xpby``, ``scale_into``, ``residual``, ``axpy_norm``, ``bicg_p``,
  ``bicg_x``, plus ``copy(out, v)`` and ``axpy(y, alpha, x)`` (``y += alpha x``);
* GMRES: ``set_row(V, k, w, d)`` (``V[k] = w / d``), ``orthogonalize(V, k1, w)``
  (makes ``w`` orthogonal to ``V[:k1]``, Gram-Schmidt with a second pass where the
  first cancelled much (the host) or always (a device); returns the
  coefficients as a host array and ``||w||`` after) and ``combine(out, V, y)``
  (``out = sum_j y[j] V[j]``, ``y`` on the host).

:class:`HostVectors` runs the Numba CPU kernels; the device backend is
:class:`ustc.ops.cuda_vectors.DeviceVectors` (numba-cuda kernels over CuPy
arrays, imported only when a solve runs on 'cuda').
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: the reorthogonalisation test of :meth:`HostVectors.orthogonalize`: one Gram-Schmidt pass
#: suffices when ``||w - V^H h||^2`` keeps more than this share of ``||w||^2``: Rutishauser's
#: factor 10 on norms (a pass then leaves at most ~10 eps of ``w`` along ``V``). DGKS's 1/sqrt(2)
#: would ask for a second pass at nearly every GMRES step (the norm typically halves)
KEEP = 0.01


@dataclass
class Basis:
    """The GMRES basis: ``data`` (rows, n) and ``rows[k]``, a vector view of row k."""

    data: object
    rows: list


class HostVectors:
    """NumPy vectors updated by the Numba kernels of :mod:`ustc.ops._vector`: the parallel
    ones, or their one-thread twins for vectors shorter than ``_vector.SERIAL_LENGTH``."""

    name = "host"

    def __init__(self):
        from types import SimpleNamespace

        from . import _vector

        self.parallel, self.serial = _vector, SimpleNamespace(**_vector.SERIAL)
        self.short = _vector.SERIAL_LENGTH

    def _k(self, v):
        """The kernels for vectors like ``v``."""
        return self.serial if v.size < self.short else self.parallel

    # -- allocation ------------------------------------------------------------------------
    def empty(self, n: int, dtype) -> np.ndarray:
        return np.empty(n, dtype=dtype)

    def zeros(self, n: int, dtype) -> np.ndarray:
        return np.zeros(n, dtype=dtype)

    def asarray(self, v, dtype, copy: bool = False) -> np.ndarray:
        return np.array(v, dtype=dtype, order="C") if copy else np.ascontiguousarray(v, dtype=dtype)

    def basis(self, rows: int, n: int, dtype) -> Basis:
        data = np.empty((rows, n), dtype=dtype)
        return Basis(data, list(data))

    def diagonal(self, a, n: int, dtype) -> np.ndarray:
        (rows, cols), vals = a.entries()
        diag = np.zeros(n, dtype=dtype)
        on = rows == cols
        np.add.at(diag, rows[on], vals[on])
        return diag

    # -- fused updates ---------------------------------------------------------------------
    def dot(self, a, b):
        return self._k(a).dot(a, b)

    def norm2(self, a) -> float:
        return math.sqrt(max(float(np.real(self._k(a).dot(a, a))), 0.0))

    def cg_step(self, x, r, z, p, q, dinv, alpha, jacobi: bool):
        return self._k(x).cg_step(x, r, z, p, q, dinv, alpha, jacobi)

    def xpby(self, x, beta, y) -> None:
        self._k(y).xpby(x, beta, y)

    def scale_into(self, out, d, x) -> None:
        self._k(out).scale_into(out, d, x)

    def residual(self, r, b, ax) -> float:
        return self._k(r).residual(r, b, ax)

    def axpy_norm(self, out, x, alpha, y) -> float:
        return self._k(out).axpy_norm(out, x, alpha, y)

    def bicg_p(self, p, r, beta, omega, v) -> None:
        self._k(p).bicg_p(p, r, beta, omega, v)

    def bicg_x(self, x, alpha, ph, omega, sh) -> None:
        self._k(x).bicg_x(x, alpha, ph, omega, sh)

    def copy(self, out, v) -> None:
        out[...] = v

    def axpy(self, y, alpha, x) -> None:
        self._k(y).bicg_x(y, alpha, x, 0.0, x)

    # -- GMRES -----------------------------------------------------------------------------
    def set_row(self, V: Basis, k: int, w, d) -> None:
        np.divide(w, d, out=V.rows[k])

    def orthogonalize(self, V: Basis, k1: int, w):
        """``w`` minus its projection on ``V[:k1]`` (orthonormal rows); returns the coefficients
        and the new ``||w||``. Classical Gram-Schmidt with selective reorthogonalisation: the first
        pass also measures ``||w||``; when ``||w||^2 - ||h||^2`` keeps more than :data:`KEEP` of
        it, little cancelled and one subtraction (which returns the true norm) leaves ``w``
        orthogonal to working precision; otherwise a second pass follows ("twice is enough"), fused with the
        first subtraction (each chunk of ``V`` re-read from cache). Reductions go through
        :meth:`_allsum`, so a distributed subclass synchronises once per pass."""
        if not k1:
            return np.zeros(0, dtype=w.dtype), self.norm2(w)
        k = self._k(w)
        chunks = -(-w.size // self.parallel.GS_CHUNK)
        partial = np.empty((chunks, k1), dtype=w.dtype)
        norms = np.empty(chunks)
        k.gs_coefficients(V.data, k1, w, partial, norms)
        first = self._allsum(np.append(partial.sum(axis=0), w.dtype.type(norms.sum())))
        h, before = first[:k1], float(np.real(first[k1]))
        if before - float(np.real(np.vdot(h, h))) > KEEP * before:
            k.gs_subtract(V.data, k1, h, w, partial, norms, False)
            return h, self._norm_from(norms)
        k.gs_subtract(V.data, k1, h, w, partial, norms, True)
        again = self._allsum(partial.sum(axis=0))
        k.gs_subtract(V.data, k1, again, w, partial, norms, False)
        return h + again, self._norm_from(norms)

    def _allsum(self, a: np.ndarray) -> np.ndarray:
        """The sum of ``a`` over every part of the vectors (here there is one part)."""
        return a

    def _norm_from(self, norms: np.ndarray) -> float:
        """``sqrt`` of the summed squared-norm shares."""
        total = self._allsum(np.array([norms.sum()]))[0]
        return math.sqrt(max(float(np.real(total)), 0.0))

    def combine(self, out, V: Basis, y) -> None:
        if len(y):
            np.matmul(y, V.data[:len(y)], out=out)
        else:
            out.fill(0)


HOST = HostVectors()
