"""The device vector backend of the Krylov solvers: numba-cuda kernels over CuPy arrays.

Imported only when a Krylov solve runs on 'cuda' (``import ustc`` does not import
``numba.cuda`` or CuPy). :class:`DeviceVectors` has the operations of
:mod:`ustc.ops.vectors` with the meaning of the Numba CPU kernels in
:mod:`ustc.ops._vector`; each fused update is one kernel launch on CuPy's current
stream. Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's simulator on
NumPy arrays (``DeviceVectors(numpy)``), which is how they are tested without a GPU.

Reductions: each thread sums its grid-stride share in float64 (real and imaginary
parts apart: atomics have no complex type), a block folds the shares in shared
memory and one thread per block adds the block's sum atomically into a float64
accumulator ``acc`` (slot ``s``: real part at ``acc[2 s]``, imaginary at
``acc[2 s + 1]``). The host reads ``acc`` once per reduction, or once per GMRES step
for the whole classical Gram-Schmidt pass (twice) and the norm after it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64

from . import cuda_host
from .vectors import Basis

THREADS = 256          # threads per block on a GPU (a power of two: the block fold halves it)
MAX_BLOCKS = 1024      # grid-stride loops cover longer vectors
SIM_THREADS, SIM_BLOCKS = 4, 2    # the simulator runs every thread as a Python thread


# Every reducing kernel ends with the same block fold (inline: numba-cuda compiles a device
# function only with a device present, and the PTX check runs without one): the block's
# threads put their shares in row q of ``sh``, halve the rows until element 0 holds the sum,
# and thread 0 adds it to ``acc`` atomically. ``blockDim.x`` is a power of two <= THREADS.


@cuda.jit(cache=True)
def dot(a, b, acc):
    """``acc[0:2] += sum(conj(a) * b)`` (real, imaginary part)."""
    sh = cuda.shared.array((2, THREADS), float64)
    re = im = 0.0
    for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
        ar, ai, br, bi = float64(a[i].real), float64(a[i].imag), float64(b[i].real), float64(b[i].imag)
        re += ar * br + ai * bi
        im += ar * bi - ai * br
    t = cuda.threadIdx.x
    sh[0, t], sh[1, t] = re, im
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            for q in range(2):
                sh[q, t] += sh[q, t + half]
        cuda.syncthreads()
        half //= 2
    if t == 0:
        cuda.atomic.add(acc, 0, sh[0, 0])
        cuda.atomic.add(acc, 1, sh[1, 0])


@cuda.jit(cache=True)
def cg_step(x, r, z, p, q, dinv, alpha, jacobi, acc):
    """``x += alpha p; r -= alpha q; z = dinv * r`` (``z`` is ``r`` without Jacobi);
    ``acc[0] += r·r``, ``acc[2:4] += r·z``."""
    sh = cuda.shared.array((3, THREADS), float64)
    rr = rzr = rzi = 0.0
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        x[i] += alpha * p[i]
        ri = r[i] - alpha * q[i]
        r[i] = ri
        zi = ri * dinv[i] if jacobi else ri
        if jacobi:
            z[i] = zi
        ar, ai, br, bi = float64(ri.real), float64(ri.imag), float64(zi.real), float64(zi.imag)
        rr += ar * ar + ai * ai
        rzr += ar * br + ai * bi
        rzi += ar * bi - ai * br
    t = cuda.threadIdx.x
    sh[0, t], sh[1, t], sh[2, t] = rr, rzr, rzi
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            for k in range(3):
                sh[k, t] += sh[k, t + half]
        cuda.syncthreads()
        half //= 2
    if t == 0:
        cuda.atomic.add(acc, 0, sh[0, 0])
        cuda.atomic.add(acc, 2, sh[1, 0])
        cuda.atomic.add(acc, 3, sh[2, 0])


@cuda.jit(cache=True)
def xpby(x, beta, y):
    """``y = x + beta * y``."""
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = x[i] + beta * y[i]


@cuda.jit(cache=True)
def scale_into(out, d, x):
    """``out = d * x`` elementwise."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = d[i] * x[i]


@cuda.jit(cache=True)
def axpy_norm(out, x, alpha, y, acc):
    """``out = x + alpha * y``; ``acc[0] += out·out``. ``residual`` is ``alpha = -1``."""
    sh = cuda.shared.array((1, THREADS), float64)
    s = 0.0
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        v = x[i] + alpha * y[i]
        out[i] = v
        s += float64(v.real) * float64(v.real) + float64(v.imag) * float64(v.imag)
    t = cuda.threadIdx.x
    sh[0, t] = s
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            sh[0, t] += sh[0, t + half]
        cuda.syncthreads()
        half //= 2
    if t == 0:
        cuda.atomic.add(acc, 0, sh[0, 0])


@cuda.jit(cache=True)
def bicg_p(p, r, beta, omega, v):
    """``p = r + beta * (p - omega * v)``."""
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        p[i] = r[i] + beta * (p[i] - omega * v[i])


@cuda.jit(cache=True)
def bicg_x(x, alpha, ph, omega, sh):
    """``x += alpha * ph + omega * sh``."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        x[i] += alpha * ph[i] + omega * sh[i]


@cuda.jit(cache=True)
def set_row(V, k, w, d):
    """``V[k] = w / d``."""
    for i in range(cuda.grid(1), w.size, cuda.gridsize(1)):
        V[k, i] = w[i] / d


@cuda.jit(cache=True)
def mdot(V, k1, w, acc, at):
    """``acc[at + 2 j : at + 2 j + 2] += V[j]·w`` for every ``j < k1`` (classical Gram-Schmidt)."""
    sh = cuda.shared.array((2, THREADS), float64)
    t = cuda.threadIdx.x
    for j in range(k1):
        re = im = 0.0
        for i in range(cuda.grid(1), w.size, cuda.gridsize(1)):
            a, b = V[j, i], w[i]
            ar, ai, br, bi = float64(a.real), float64(a.imag), float64(b.real), float64(b.imag)
            re += ar * br + ai * bi
            im += ar * bi - ai * br
        sh[0, t], sh[1, t] = re, im
        cuda.syncthreads()
        half = cuda.blockDim.x // 2
        while half > 0:
            if t < half:
                for q in range(2):
                    sh[q, t] += sh[q, t + half]
            cuda.syncthreads()
            half //= 2
        if t == 0:
            cuda.atomic.add(acc, at + 2 * j, sh[0, 0])
            cuda.atomic.add(acc, at + 2 * j + 1, sh[1, 0])
        cuda.syncthreads()   # sh is reused for the next j


@cuda.jit(cache=True)
def msub(V, k1, h, at, iu, w, acc, slot):
    """``w -= sum_{j < k1} h_j V[j]`` with ``h_j = h[at + 2 j] + iu * h[at + 2 j + 1]``
    (``iu`` is 1j for complex vectors, 0 for real ones); ``acc[slot] += w·w``."""
    sh = cuda.shared.array((1, THREADS), float64)
    s = 0.0
    for i in range(cuda.grid(1), w.size, cuda.gridsize(1)):
        wi = w[i]
        for j in range(k1):
            wi -= (h[at + 2 * j] + iu * h[at + 2 * j + 1]) * V[j, i]
        w[i] = wi
        s += float64(wi.real) * float64(wi.real) + float64(wi.imag) * float64(wi.imag)
    t = cuda.threadIdx.x
    sh[0, t] = s
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            sh[0, t] += sh[0, t + half]
        cuda.syncthreads()
        half //= 2
    if t == 0:
        cuda.atomic.add(acc, slot, sh[0, 0])


@cuda.jit(cache=True)
def combine(out, V, k, y):
    """``out = sum_{j < k} y[j] V[j]``."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        s = out.dtype.type(0)
        for j in range(k):
            s += y[j] * V[j, i]
        out[i] = s


@cuda.jit(cache=True)
def csr_diagonal(pos, crd, vals, out):
    """``out[r] = sum of the stored (r, r) entries`` of a CSR matrix (a thread per row)."""
    for r in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        d = out.dtype.type(0)
        for p in range(pos[r], pos[r + 1]):
            if crd[p] == r:
                d += vals[p]
        out[r] = d


KERNELS = {f.__name__: f for f in (dot, cg_step, xpby, scale_into, axpy_norm, bicg_p, bicg_x, set_row,
                                    mdot, msub, combine, csr_diagonal)}


def signatures(kernel: str, value) -> list[tuple]:
    """The argument types :class:`DeviceVectors` launches ``kernel`` with for vectors of numba
    type ``value`` (C-contiguous arrays, scalars of the vectors' dtype, int64 counts, a float64
    accumulator); ``csr_diagonal`` once per index width."""
    from numba import types

    v, m, acc = types.Array(value, 1, "C"), types.Array(value, 2, "C"), types.Array(types.float64, 1, "C")
    i64, f64 = types.int64, types.float64
    by_kernel = {"dot": (v, v, acc), "cg_step": (v, v, v, v, v, v, value, types.boolean, acc),
                 "xpby": (v, value, v), "scale_into": (v, v, v),
                 "axpy_norm": (v, v, value, v, acc), "bicg_p": (v, v, value, value, v),
                 "bicg_x": (v, value, v, value, v), "set_row": (m, i64, v, f64), "mdot": (m, i64, v, acc, i64),
                 "msub": (m, i64, acc, i64, value, v, acc, i64), "combine": (v, m, i64, v)}
    if kernel == "csr_diagonal":
        return [(types.Array(index, 1, "C"), types.Array(index, 1, "C"), v, v) for index in (types.int32, types.int64)]
    return [by_kernel[kernel]]


def compile_kernels(cc=None) -> list:
    """Every kernel for float32 / float64 / complex64 / complex128 vectors, as PTX for ``cc``
    (sm_90 by default) linked to a cubin (:class:`ustc.ops.cuda_ptx.CompiledKernel` each).
    No GPU needed; not in the simulator."""
    from numba import types

    from . import cuda_ptx

    cc = cc or cuda_ptx.ARCH
    return [cuda_ptx.compile_kernel(name, kernel, sig, "Krylov vector update", cc)
            for value in (types.float32, types.float64, types.complex64, types.complex128)
            for name, kernel in KERNELS.items() for sig in signatures(name, value)]


class DeviceVectors:
    """Vectors on the device (CuPy arrays; NumPy ones in the simulator) updated by the kernels
    above, one launch per fused update on CuPy's current stream. Scalars come to the host
    when read: each reduction is one small device-to-host copy."""

    name = "device"

    def __init__(self, xp=None):
        if xp is None:
            from ..errors import require

            xp = np if cuda_host.simulator() else require("cupy", "gpu")
        cuda_host.require_device()
        self.xp, self.on_gpu = xp, xp is not np
        self.stream = cuda_host.current_stream([xp.empty(0)]) if self.on_gpu else 0
        self.threads, self.max_blocks = (THREADS, MAX_BLOCKS) if self.on_gpu else (SIM_THREADS, SIM_BLOCKS)
        self._views: dict = {}
        self._acc = xp.zeros(4, dtype=np.float64)

    # -- launching -------------------------------------------------------------------------
    def _dev(self, a):
        """The array a kernel receives, made once per array: a CuPy array viewed as a Numba
        device array (no stream synchronisation per launch); in the simulator a NumPy array
        wrapped as the simulator's device array (shared memory, so that two arguments that
        alias behave as on a GPU, where the simulator would copy each in and out)."""
        hit = self._views.get(id(a))
        if hit is None or hit[0] is not a:   # the entry holds a: its id cannot be reused meanwhile
            if self.on_gpu:
                view = cuda.as_cuda_array(a, sync=False)
            else:
                from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

                view = FakeCUDAArray(a)
            hit = self._views[id(a)] = (a, view)
        return hit[1]

    def _launch(self, kernel, n: int, *args) -> None:
        blocks = max(1, min(self.max_blocks, -(-n // self.threads)))
        args = tuple(self._dev(a) if isinstance(a, self.xp.ndarray) else a for a in args)
        kernel[blocks, self.threads, self.stream](*args)

    def _reduce(self, kernel, n: int, *args) -> np.ndarray:
        """Launch a reducing kernel into the zeroed accumulator; its values on the host."""
        self._acc.fill(0)
        self._launch(kernel, n, *args, self._acc)
        return self._host(self._acc)

    def _host(self, a) -> np.ndarray:
        return a.get() if self.on_gpu else np.array(a)

    @staticmethod
    def _value(acc, slot: int, dtype):
        re, im = acc[2 * slot], acc[2 * slot + 1]
        return dtype.type(complex(re, im)) if dtype.kind == "c" else dtype.type(re)

    # -- allocation ------------------------------------------------------------------------
    def empty(self, n: int, dtype):
        return self.xp.empty(n, dtype=dtype)

    def zeros(self, n: int, dtype):
        return self.xp.zeros(n, dtype=dtype)

    def asarray(self, v, dtype, copy: bool = True):
        """A new contiguous device vector holding ``v`` (host or device) as ``dtype``."""
        return self.xp.array(v, dtype=dtype, order="C")

    def basis(self, rows: int, n: int, dtype) -> Basis:
        data = self.xp.empty((rows, n), dtype=dtype)
        if self._acc.size < 4 * rows + 2:   # two Gram-Schmidt passes of rows values, two norms
            self._acc = self.xp.zeros(4 * rows + 2, dtype=np.float64)
        self._coef = self.xp.zeros(rows, dtype=dtype)
        return Basis(data, [data[k] for k in range(rows)])

    def diagonal(self, a, n: int, dtype) -> np.ndarray:
        """``diag(a)`` on the host, summed on the device from ``a``'s CSR rows."""
        from .trisolve import as_csr

        csr = as_csr(a)
        out = self.xp.empty(n, dtype=dtype)
        vals = self.xp.asarray(csr.raw_values).astype(dtype, copy=False)
        self._launch(csr_diagonal, n, csr.raw_buffers[(1, "pos")], csr.raw_buffers[(1, "crd")], vals, out)
        return self._host(out)

    # -- fused updates ---------------------------------------------------------------------
    def dot(self, a, b):
        return self._value(self._reduce(dot, a.size, a, b), 0, np.result_type(a.dtype, b.dtype))

    def norm2(self, a) -> float:
        return math.sqrt(max(float(self._reduce(dot, a.size, a, a)[0]), 0.0))

    def cg_step(self, x, r, z, p, q, dinv, alpha, jacobi: bool):
        t = x.dtype.type
        acc = self._reduce(cg_step, x.size, x, r, z, p, q, dinv, t(alpha), bool(jacobi))
        return float(acc[0]), self._value(acc, 1, r.dtype)

    def xpby(self, x, beta, y) -> None:
        self._launch(xpby, y.size, x, y.dtype.type(beta), y)

    def scale_into(self, out, d, x) -> None:
        self._launch(scale_into, out.size, out, d, x)

    def residual(self, r, b, ax) -> float:
        return float(self._reduce(axpy_norm, r.size, r, b, r.dtype.type(-1), ax)[0])

    def axpy_norm(self, out, x, alpha, y) -> float:
        return float(self._reduce(axpy_norm, out.size, out, x, out.dtype.type(alpha), y)[0])

    def bicg_p(self, p, r, beta, omega, v) -> None:
        t = p.dtype.type
        self._launch(bicg_p, p.size, p, r, t(beta), t(omega), v)

    def bicg_x(self, x, alpha, ph, omega, sh) -> None:
        t = x.dtype.type
        self._launch(bicg_x, x.size, x, t(alpha), ph, t(omega), sh)

    def copy(self, out, v) -> None:
        out[...] = v

    def axpy(self, y, alpha, x) -> None:
        self.bicg_x(y, alpha, x, 0.0, x)

    # -- GMRES -----------------------------------------------------------------------------
    def set_row(self, V: Basis, k: int, w, d) -> None:
        self._launch(set_row, w.size, V.data, int(k), w, float(d))

    def orthogonalize(self, V: Basis, k1: int, w):
        """Classical Gram-Schmidt, twice (as stable as modified Gram-Schmidt twice, and one
        reduction per pass instead of one per basis vector); one host read for the step."""
        m1, n = V.data.shape
        iu = w.dtype.type(1j if w.dtype.kind == "c" else 0)
        self._acc.fill(0)
        for at, slot in ((0, 4 * m1), (2 * m1, 4 * m1 + 1)):
            self._launch(mdot, n, V.data, int(k1), w, self._acc, at)
            self._launch(msub, n, V.data, int(k1), self._acc, at, iu, w, self._acc, slot)
        acc = self._host(self._acc)
        h = np.array([self._value(acc, j, w.dtype) + self._value(acc, m1 + j, w.dtype) for j in range(k1)],
                     dtype=w.dtype)
        return h, math.sqrt(max(float(acc[4 * m1 + 1]), 0.0))

    def combine(self, out, V: Basis, y) -> None:
        """``out = y @ V[:len(y)]``; ``y`` goes to the device into one buffer per basis."""
        coef = np.zeros(self._coef.size, dtype=self._coef.dtype)
        coef[:len(y)] = y
        self._coef[...] = self.xp.asarray(coef)
        self._launch(combine, out.size, out, V.data, len(y), self._coef)
