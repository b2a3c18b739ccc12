"""Fused vector kernels of the iterative solvers (Numba, parallel, cached).

Each kernel makes one pass over its vectors and returns the inner products
the next step needs, so an iteration reads every vector as few times as the
method allows (CG: the SpMV, one dot product, one fused update).
``dot(a, b)`` is ``sum(conj(a) * b)``.

Every ``@vector_kernel`` is compiled twice from one body: the module attribute
runs on all threads, ``SERIAL[name]`` on one (``prange`` is ``range`` there).
Below :data:`SERIAL_LENGTH` elements a parallel launch costs more than the
pass itself, so :class:`ustc.ops.vectors.HostVectors` takes the twin.
"""

from __future__ import annotations

import types

import numpy as np
from numba import carray, prange
from numba import types as nbtypes
from numba.extending import intrinsic

from ..cache._lean import njit_cached
from ..kernels._masked_spmv import row_sum

U = np.uintp  # unsigned subscripts: no negative-index wraparound test on each access

#: vectors shorter than this are updated by the one-thread twins: with passive OpenMP workers
#: (ustc/_threads.py) a parallel launch costs ~45 µs of wake-up; a dot product measured 77 µs
#: parallel against 63 serial at 131k elements, 169 against 250 at 524k (2 cores)
SERIAL_LENGTH = 1 << 18

#: kernel name -> its one-thread twin
SERIAL: dict = {}


def vector_kernel(fn):
    """``fn`` compiled parallel; its one-thread twin goes to ``SERIAL[fn.__name__]`` (own qualname,
    so Numba's on-disk cache keeps the two apart)."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    twin.__doc__ = fn.__doc__
    SERIAL[fn.__name__] = njit_cached(nogil=True)(twin)
    return njit_cached(nogil=True, parallel=True)(fn)


@vector_kernel
def dot(a, b):
    s = a.dtype.type(0) * b.dtype.type(0)
    for i in prange(a.size):
        s += np.conj(a[i]) * b[i]
    return s


@vector_kernel
def cg_step(x, r, z, p, q, dinv, alpha, jacobi):
    """``x += alpha p; r -= alpha q; z = dinv * r`` (``z`` is ``r`` without Jacobi);
    returns ``(r·r, r·z)``."""
    rr = 0.0
    rz = r.dtype.type(0)
    for i in prange(x.size):
        x[i] += alpha * p[i]
        ri = r[i] - alpha * q[i]
        r[i] = ri
        zi = ri * dinv[i] if jacobi else ri
        if jacobi:
            z[i] = zi
        rr += (np.conj(ri) * ri).real
        rz += np.conj(ri) * zi
    return rr, rz


@vector_kernel
def xpby(x, beta, y):
    """``y = x + beta * y``."""
    for i in prange(y.size):
        y[i] = x[i] + beta * y[i]


@vector_kernel
def scale_into(out, d, x):
    """``out = d * x`` elementwise."""
    for i in prange(out.size):
        out[i] = d[i] * x[i]


@vector_kernel
def residual(r, b, ax):
    """``r = b - ax``; returns ``r·r``."""
    rr = 0.0
    for i in prange(r.size):
        ri = b[i] - ax[i]
        r[i] = ri
        rr += (np.conj(ri) * ri).real
    return rr


@vector_kernel
def axpy_norm(out, x, alpha, y):
    """``out = x + alpha * y``; returns ``out·out``."""
    s = 0.0
    for i in prange(out.size):
        v = x[i] + alpha * y[i]
        out[i] = v
        s += (np.conj(v) * v).real
    return s


@vector_kernel
def bicg_p(p, r, beta, omega, v):
    """``p = r + beta * (p - omega * v)``."""
    for i in prange(p.size):
        p[i] = r[i] + beta * (p[i] - omega * v[i])


@vector_kernel
def bicg_x(x, alpha, ph, omega, sh):
    """``x += alpha * ph + omega * sh``."""
    for i in prange(x.size):
        x[i] += alpha * ph[i] + omega * sh[i]


#: entries of ``w`` per chunk of the Gram-Schmidt kernels: a chunk of ``w`` stays in L1 while the
#: basis rows stream past it, and the chunk of 30 basis rows (GMRES' default restart) in L2
GS_CHUNK = 1024


#: LLVM flags of the dense Gram-Schmidt loops: reassociation lets it vectorise their sums (one
#: chain per row would wait on the add latency), contraction fuses multiply-adds. No gathers run
#: under these flags (those were slower vectorised) and NaN / Inf keep their meaning
FAST = {"reassoc", "contract"}


@njit_cached(nogil=True, fastmath=FAST)
def _chunk_coefficients(V, k1, w, lo, hi, partial, ch):
    """``partial[ch, j] = sum(conj(V[j, i]) * w[i])`` over ``lo <= i < hi``, ``j < k1``, four rows
    per pass over the chunk of ``w``; returns the chunk's ``||w||^2``. With :data:`FAST` the
    sums vectorise: 25 us for 16 rows of 10^4 entries against 64-74 us for eight scalar chains
    without it (one thread)."""
    quads = k1 - k1 % 4
    for j in range(0, quads, 4):
        r0, r1, r2, r3 = U(j), U(j + 1), U(j + 2), U(j + 3)
        a0 = a1 = a2 = a3 = partial.dtype.type(0)
        for i in range(lo, hi):
            p = U(i)
            wp = w[p]
            a0 += np.conj(V[r0, p]) * wp
            a1 += np.conj(V[r1, p]) * wp
            a2 += np.conj(V[r2, p]) * wp
            a3 += np.conj(V[r3, p]) * wp
        partial[ch, j], partial[ch, j + 1], partial[ch, j + 2], partial[ch, j + 3] = a0, a1, a2, a3
    for j in range(quads, k1):
        r = U(j)
        s = partial.dtype.type(0)
        for i in range(lo, hi):
            s += np.conj(V[r, U(i)]) * w[U(i)]
        partial[ch, j] = s
    return _chunk_norm(w, lo, hi)


@njit_cached(nogil=True, fastmath=FAST)
def _chunk_norm(w, lo, hi):
    """``sum(|w[i]|^2)`` over ``lo <= i < hi``."""
    s = 0.0
    for i in range(lo, hi):
        s += (np.conj(w[U(i)]) * w[U(i)]).real
    return s


@njit_cached(nogil=True, fastmath=FAST)
def _chunk_subtract(V, k1, c, w, lo, hi):
    """``w[lo:hi] -= sum_j c[j] V[j, lo:hi]`` over ``j < k1`` (four rows per pass); returns the
    chunk's new ``||w||^2``."""
    quads = k1 - k1 % 4
    for j in range(0, quads, 4):
        c0, c1, c2, c3 = c[j], c[j + 1], c[j + 2], c[j + 3]
        r0, r1, r2, r3 = U(j), U(j + 1), U(j + 2), U(j + 3)
        for i in range(lo, hi):
            p = U(i)
            w[p] -= (c0 * V[r0, p] + c1 * V[r1, p]) + (c2 * V[r2, p] + c3 * V[r3, p])
    for j in range(quads, k1):
        cj = c[j]
        for i in range(lo, hi):
            w[U(i)] -= cj * V[U(j), U(i)]
    return _chunk_norm(w, lo, hi)


@vector_kernel
def gs_coefficients(V, k1, w, partial, norms):
    """``partial[ch, j]``: chunk ``ch``'s share of ``(V[:k1]^H w)_j`` (sum over ``ch`` for it);
    ``norms[ch]``: its share of ``||w||^2``."""
    n = w.size
    for ch in prange(partial.shape[0]):
        lo = ch * GS_CHUNK
        norms[ch] = _chunk_coefficients(V, k1, w, lo, min(lo + GS_CHUNK, n), partial, ch)


@vector_kernel
def gs_subtract(V, k1, c, w, partial, norms, again):
    """``w -= sum_j c[j] V[j]``; then, with the chunk still in cache, ``norms[ch]`` = its
    ``||w||^2`` and, if ``again``, ``partial`` = the next pass's coefficient shares (as
    :func:`gs_coefficients`)."""
    n = w.size
    for ch in prange(norms.size):
        lo = ch * GS_CHUNK
        hi = min(lo + GS_CHUNK, n)
        norms[ch] = _chunk_subtract(V, k1, c, w, lo, hi)
        if again:
            _chunk_coefficients(V, k1, w, lo, hi, partial, ch)


@njit_cached(nogil=True)
def givens_column(H, cs, sn, g, k):
    """GMRES's step on the host: rotate column ``k`` of ``H`` by the earlier rotations, make
    rotation ``k`` (``cs`` real, ``sn`` carrying the phase) that zeroes ``H[k + 1, k]``, apply it
    to ``g`` (whose entry ``k + 1`` is then the residual norm's estimate)."""
    for j in range(k):
        t = cs[j] * H[j, k] + sn[j] * H[j + 1, k]
        H[j + 1, k] = -np.conj(sn[j]) * H[j, k] + cs[j] * H[j + 1, k]
        H[j, k] = t
    a, c = H[k, k], H[k + 1, k]
    d = np.hypot(abs(a), abs(c))
    if d == 0:
        cs[k], sn[k] = 1, 0
    else:
        cs[k] = abs(a) / d
        phase = a / abs(a) if a != 0 else H.dtype.type(1)
        sn[k] = phase * np.conj(c) / d
    H[k, k] = cs[k] * a + sn[k] * c
    H[k + 1, k] = 0
    g[k + 1] = -np.conj(sn[k]) * g[k]
    g[k] = cs[k] * g[k]


@njit_cached(nogil=True)
def gmres_cycle(pos, crd, vals, dinv, jacobi, V, H, cs, sn, g, z, w, partial, norms, m, budget, stop, keep,
                pairs=False):
    """One restart cycle of GMRES(m) on CSR rows, on one thread, in one call: for each inner step
    ``z = M V[k]`` (Jacobi's scaling, or ``V[k]`` itself), ``w = A z`` chunk by chunk with each
    chunk's Gram-Schmidt coefficients and ``||w||^2`` taken while it is in cache, the
    subtraction (a second pass where the first cancelled below ``keep`` of ``||w||^2``, as
    :meth:`ustc.ops.vectors.HostVectors.orthogonalize`), ``V[k + 1] = w / ||w||`` and the Givens
    step. ``V[0]`` and ``g[0]`` are set by the caller. Stops after ``m`` steps, ``budget`` steps,
    when ``|g[k]| <= stop`` or when the Krylov space is exhausted. Returns ``(steps, ok)``:
    ``ok`` False when ``||w||`` or the residual estimate is NaN or Inf (the caller raises).
    ``pairs``: the products' row sums as :func:`csr_rows`' two interleaved sums."""
    n = w.size
    chunks = norms.size
    zero = w.dtype.type(0)
    k = 0
    while k < m and k < budget:
        k1 = k + 1
        src = V[k]
        if jacobi:
            for i in range(n):
                z[U(i)] = dinv[U(i)] * src[U(i)]
            src = z
        for ch in range(chunks):
            lo = ch * GS_CHUNK
            hi = min(lo + GS_CHUNK, n)
            csr_rows(pos, crd, vals, src, w, lo, hi, None, zero, pairs)
            norms[ch] = _chunk_coefficients(V, k1, w, lo, hi, partial, ch)
        before = 0.0
        for ch in range(chunks):
            before += norms[ch]
        h = np.zeros(k1, dtype=w.dtype)
        hh = 0.0
        for j in range(k1):
            t = w.dtype.type(0)
            for ch in range(chunks):
                t += partial[ch, j]
            h[j] = t
            hh += (np.conj(t) * t).real
        twice = before - hh <= keep * before
        for ch in range(chunks):
            lo = ch * GS_CHUNK
            hi = min(lo + GS_CHUNK, n)
            norms[ch] = _chunk_subtract(V, k1, h, w, lo, hi)
            if twice:
                _chunk_coefficients(V, k1, w, lo, hi, partial, ch)
        if twice:
            again = np.zeros(k1, dtype=w.dtype)
            for j in range(k1):
                t = w.dtype.type(0)
                for ch in range(chunks):
                    t += partial[ch, j]
                again[j] = t
                h[j] += t
            for ch in range(chunks):
                lo = ch * GS_CHUNK
                norms[ch] = _chunk_subtract(V, k1, again, w, lo, min(lo + GS_CHUNK, n))
        total = 0.0
        for ch in range(chunks):
            total += norms[ch]
        h_next = np.sqrt(max(total, 0.0))
        for j in range(k1):
            H[j, k] = h[j]
        H[k1, k] = h_next
        if h_next != 0:
            inv = 1.0 / h_next
            for i in range(n):
                V[U(k1), U(i)] = w[U(i)] * inv
        givens_column(H, cs, sn, g, k)
        k = k1
        if not (np.isfinite(h_next) and np.isfinite(g[k])):
            return k, False
        if abs(g[k]) <= stop or h_next == 0:
            break
    return k, True


@njit_cached(nogil=True)
def triangular_csr(pos, crd, vals, b, x, unit, lower):
    """Substitution on canonical CSR rows: forward (``lower``: ``L x = b``) from the first row,
    else backward (``U x = b``) from the last; ``b``, ``x`` are (n, k). Entries on the other
    side of the diagonal are ignored. Returns -1, or the first row whose diagonal is missing
    or zero."""
    n, k = b.shape
    acc = np.empty(k, dtype=x.dtype)
    for step in range(n):
        i = step if lower else n - 1 - step
        for c in range(k):
            acc[c] = b[i, c]
        diag = x.dtype.type(1) if unit else x.dtype.type(0)
        for p in range(pos[i], pos[i + 1]):
            j = crd[p]
            if (j < i) if lower else (j > i):
                for c in range(k):
                    acc[c] -= vals[p] * x[j, c]
            elif j == i and not unit:
                diag = vals[p]
        if diag == 0:
            return i
        for c in range(k):
            x[i, c] = acc[c] / diag
    return -1


@njit_cached(nogil=True)
def triangular_levels(pos, crd, lower):
    """Level schedule of the CSR pattern ``pos`` / ``crd`` (:mod:`ustc.ops.trisolve`): returns
    ``(level_ptr, level_rows, diag)``. One pass in dependency order (``level[r] = 1 + max
    level[c]`` over stored ``c < r``, or ``c > r`` when not ``lower``), then a counting sort of
    the rows by level, stable, so each level stays ascending. ``diag[r]``: the position of
    ``(r, r)``, -1 if none."""
    n = pos.size - 1
    level = np.zeros(n, dtype=np.int64)
    diag = np.full(n, -1, dtype=np.int64)
    depth = 0
    for step in range(n):
        r = step if lower else n - 1 - step
        lev = 0
        for p in range(pos[r], pos[r + 1]):
            c = crd[p]
            if (c < r) if lower else (c > r):
                lev = max(lev, level[c] + 1)
            elif c == r:
                diag[r] = p
        level[r] = lev
        depth = max(depth, lev + 1)
    ptr = np.zeros(depth + 1, dtype=np.int64)
    for r in range(n):
        ptr[level[r] + 1] += 1
    for lev in range(depth):
        ptr[lev + 1] += ptr[lev]
    fill = ptr[:-1].copy()
    rows = np.empty(n, dtype=np.int64)
    for r in range(n):
        rows[fill[level[r]]] = r
        fill[level[r]] += 1
    return ptr, rows, diag


@njit_cached(nogil=True)
def csr_rows_canonical(pos, crd):
    """Whether every CSR row's coordinates strictly increase (sorted, no duplicates): one pass."""
    for i in range(pos.size - 1):
        for p in range(pos[i] + 1, pos[i + 1]):
            if crd[p] <= crd[p - 1]:
                return False
    return True


@njit_cached(nogil=True)
def coo_residual(rows, cols, vals, x, r):
    """``r -= A x`` for the entries ``A[rows[e], cols[e]] = vals[e]`` (``x``, ``r``: (n, k); repeated
    entries add up), each product formed in ``r``'s dtype (float64 for a float32 ``A``); returns
    ``||r||^2`` (Frobenius), summed in float64. One thread: it runs once per solve."""
    wide = r.dtype.type
    for e in range(rows.size):
        i, j, v = rows[e], cols[e], wide(vals[e])
        for c in range(r.shape[1]):
            r[i, c] -= v * wide(x[j, c])
    s = 0.0
    for i in range(r.shape[0]):
        for c in range(r.shape[1]):
            s += (np.conj(r[i, c]) * r[i, c]).real
    return s


@njit_cached(nogil=True)
def cg_loop(pos, crd, vals, x, r, z, p, q, dinv, jacobi, rr, rz, stop, maxiter, pairs=False):
    """The iterations of :func:`ustc.ops.krylov.cg` on CSR rows, on one thread, in one call:
    per iteration ``q = A p`` with ``p·q`` in the same pass over the rows, the fused update of
    :func:`cg_step` and ``p = z + beta p``; ``r`` / ``z`` / ``p`` / ``rr`` / ``rz`` enter as
    the Python loop has them before its first iteration. Returns ``(it, rr, state)``: state 0
    the loop ran out (``maxiter``, or ``p·q = 0``), 1 converged before iteration ``it + 1``
    began, 2 a NaN or Inf in ``p·q`` (then ``rr`` holds it), 3 in ``r·r`` or ``r·z``. ``pairs``:
    the products' row sums as :func:`csr_rows`' two interleaved sums."""
    n = x.size
    it = 0
    for it in range(1, maxiter + 1):
        if np.sqrt(rr) <= stop:
            return it - 1, rr, 1
        pq = _csr_product(pos, crd, vals, p, q, p, q.dtype.type(0), pairs)
        if not np.isfinite(pq):
            return it, abs(pq), 2
        if pq == 0:
            break
        alpha = rz / pq
        rr = 0.0
        rz_new = r.dtype.type(0)
        for i in range(n):
            x[U(i)] += alpha * p[U(i)]
            ri = r[U(i)] - alpha * q[U(i)]
            r[U(i)] = ri
            zi = ri * dinv[U(i)] if jacobi else ri
            if jacobi:
                z[U(i)] = zi
            rr += (np.conj(ri) * ri).real
            rz_new += np.conj(ri) * zi
        if not (np.isfinite(rr) and np.isfinite(rz_new)):
            return it, rr, 3
        beta = rz_new / rz
        for i in range(n):
            p[U(i)] = z[U(i)] + beta * p[U(i)]
        rz = rz_new
    return it, rr, 0


@njit_cached(nogil=True)
def csr_rows(pos, crd, vals, x, out, lo, hi, left, zero, pairs=False, add=None):
    """``out[i] = (A x)[i]`` for the CSR rows ``lo <= i < hi`` (``add[i] + (A x)[i]`` where ``add``, an
    array of ``out``'s length, is given: a bias in the row write); returns ``sum conj(left[i]) *
    out[i]`` over them, or ``zero`` where ``left`` is None (then no inner product is compiled in).
    ``pairs``: each row in two interleaved sums whatever the host, written out here. Every caller
    races both (``kernels._race.KernelRace``): the one-shot small SpMV (``ops.matmul.SerialCsrCall``),
    the small CSR route (``ops.routes.SerialCsrRoute``), the fused solvers (``ops.krylov.two_sums``)
    and the distributed blocks' local product (``distributed.worker``); on AMD Zen 4 the masked steps
    took 20.2 us on the 4,096-row stencil against 11.7 (through a njit helper per row the same sums
    took 68). The project's one CSR row loop of the fused solvers and the one-shot small SpMV (and
    of the distributed blocks' local product, through :func:`_csr_product`). Each row is one
    ``kernels._masked_spmv.row_sum`` (inlined, chosen by the dtypes when this compiles): masked
    8-lane steps for one float dtype on AVX-512 hosts (4,096-row stencil, thread CPU time, min
    17.9 vs 20.7 us at load 11), else two interleaved sums (one chain waits on the add latency:
    44 -> 37 us for the 10^4-row Poisson matrix). Called once per product or chunk of rows: a
    njit helper called per row cost 650 us a product (array arguments per call)."""
    d = zero
    end = np.int64(pos[U(lo)])
    for i in range(lo, hi):
        e, end = end, np.int64(pos[U(i + 1)])   # each row pointer loaded once
        if pairs:
            s, t, p = zero, zero, e
            while p + 1 < end:
                s += vals[U(p)] * x[U(crd[U(p)])]
                t += vals[U(p + 1)] * x[U(crd[U(p + 1)])]
                p += 2
            if p < end:
                s += vals[U(p)] * x[U(crd[U(p)])]
            s += t
        else:
            s = row_sum(vals, crd, x, e, end, zero)
        if add is not None:
            s += add[U(i)]
        out[U(i)] = s
        if left is not None:
            d += np.conj(left[U(i)]) * s
    return d


@intrinsic
def _pointer_at(typingctx, address, like):
    """The integer ``address`` as a pointer to elements of ``like``'s dtype."""
    pointer = nbtypes.CPointer(like.dtype)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(pointer))

    return pointer(address, like), codegen


@njit_cached(nogil=True)
def csr_rows_at(pos, crd, vals, columns, pairs, address, out, add):
    """:func:`csr_rows` over all rows of ``out`` with ``x`` the ``columns`` contiguous elements of
    ``vals``' dtype at the host ``address`` (a torch tensor's ``data_ptr()``: no NumPy view made, ~0.7 µs
    a call less). The caller guarantees that memory: its size, dtype, and that it outlives the call.
    The arguments that stay fixed come first (a ``functools.partial`` binds them); each one costs the
    call ~45 ns of Numba's dispatch."""
    x = carray(_pointer_at(address, vals), columns)
    csr_rows(pos, crd, vals, x, out, 0, out.size, None, vals.dtype.type(0), pairs, add)


@njit_cached(nogil=True)
def _csr_product(pos, crd, vals, x, out, left, zero, pairs=False):
    """``out = A x`` for all CSR rows; returns ``left · out`` (``zero`` where ``left`` is None):
    :func:`csr_rows` over ``[0, out.size)``."""
    return csr_rows(pos, crd, vals, x, out, 0, out.size, left, zero, pairs)


@njit_cached(nogil=True)
def bicgstab_loop(pos, crd, vals, x, r, r0, p, v, s, t, ph, sh, dinv, jacobi, rr, stop, maxiter, pairs=False):
    """The iterations of :func:`ustc.ops.krylov.bicgstab` on CSR rows, on one thread, in one call,
    right-preconditioned by Jacobi's ``dinv`` (or none): each product takes the inner product
    that follows it in the same pass (``r0 · v``, ``t · s``), ``s = r - alpha v`` its norm and
    ``sh = M s``, the update of ``x`` and ``r`` the next ``r0 · r``. ``r``, ``r0``, ``rr`` enter
    as the Python loop has them before its first iteration. Returns ``(it, value, state)``:
    state 0 the loop ran out (``maxiter`` or a zero ``rho`` / ``omega`` / denominator; value
    ``r·r``), 1 converged before iteration ``it + 1`` began (``r·r``), 4 converged on ``s``
    within iteration ``it`` (``s·s``), 2 a NaN or Inf in iteration ``it``. ``pairs``: the products'
    row sums as :func:`csr_rows`' two interleaved sums."""
    n = x.size
    zero = x.dtype.type(0)
    one = x.dtype.type(1)
    rho = alpha = omega = one
    rho_new = zero
    for i in range(n):
        rho_new += np.conj(r0[U(i)]) * r[U(i)]
    it = 0
    for it in range(1, maxiter + 1):
        if np.sqrt(rr) <= stop:
            return it - 1, rr, 1
        if not np.isfinite(rho_new):
            return it, rr, 2
        if rho_new == 0 or omega == 0:
            break
        beta = (rho_new / rho) * (alpha / omega)
        for i in range(n):
            pi = r[U(i)] + beta * (p[U(i)] - omega * v[U(i)])
            p[U(i)] = pi
            ph[U(i)] = pi * dinv[U(i)] if jacobi else pi
        rho = rho_new
        denom = _csr_product(pos, crd, vals, ph, v, r0, zero, pairs)
        if not np.isfinite(denom):
            return it, rr, 2
        if denom == 0:
            break
        alpha = rho / denom
        ss = 0.0
        for i in range(n):
            si = r[U(i)] - alpha * v[U(i)]
            s[U(i)] = si
            sh[U(i)] = si * dinv[U(i)] if jacobi else si
            ss += (np.conj(si) * si).real
        if not (np.isfinite(alpha) and np.isfinite(ss)):
            return it, rr, 2
        if np.sqrt(ss) <= stop:
            for i in range(n):
                x[U(i)] += alpha * ph[U(i)]
            return it, ss, 4
        ts = _csr_product(pos, crd, vals, sh, t, t, zero, pairs)      # t = A sh; returns t · t
        tt = ts.real
        ts = zero
        for i in range(n):
            ts += np.conj(t[U(i)]) * s[U(i)]
        omega = ts / tt if tt != 0 else zero
        if not (np.isfinite(tt) and np.isfinite(omega)):
            return it, rr, 2
        rr = 0.0
        rho_new = zero
        for i in range(n):
            x[U(i)] += alpha * ph[U(i)] + omega * sh[U(i)]
            ri = s[U(i)] - omega * t[U(i)]
            r[U(i)] = ri
            rr += (np.conj(ri) * ri).real
            rho_new += np.conj(r0[U(i)]) * ri
    return it, rr, 0
