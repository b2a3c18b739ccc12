"""The vector backends of the SPMD solves (:mod:`ustc.ops.krylov` run on one block's slices).

:class:`BlockVectors`: every reduction is the local part followed by one all-reduce over the
blocks. On a :class:`~ustc.distributed.partition.Grid2D` solve a product moves ``x`` entries
out and partial rows back (two synchronisations); the grid backends send the ``x`` entries
ahead, with an all-reduce the method makes anyway, so the product only sends its partial rows
back: :class:`GridVectors` for CG, :class:`GridBiCGVectors` for BiCGSTAB, :class:`GridGMRESVectors`
for GMRES.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops.vectors import HostVectors


class BlockVectors(HostVectors):
    """:class:`ustc.ops.vectors.HostVectors` on one block's slices: every reduction is the
    local part followed by an all-reduce over the blocks (one synchronisation; ``cg_step``'s
    two sums travel together)."""

    name = "block"

    def __init__(self, worker: "BlockWorker"):
        super().__init__()
        self.worker = worker
        self.watch = None          # a checkpoint Watch, told when x changes

    def cg_step(self, x, r, z, p, q, dinv, alpha, jacobi: bool):
        self.worker.fused = None
        rr, rz = super().cg_step(x, r, z, p, q, dinv, alpha, jacobi)
        total = self._step_sum(np.array((rr, rz)), z)
        if self.watch is not None:
            self.watch.updated(x)
        return float(np.real(total[0])), r.dtype.type(total[1])

    def _step_sum(self, values, z):
        """The all-reduce of a CG step's two sums (:class:`GridVectors` sends ``z`` along)."""
        return self.worker._wait(self.worker.comm.allreduce(values))

    def bicg_x(self, x, alpha, ph, omega, sh) -> None:
        super().bicg_x(x, alpha, ph, omega, sh)
        if self.watch is not None:
            self.watch.updated(x)

    def axpy(self, y, alpha, x) -> None:
        super().axpy(y, alpha, x)
        if self.watch is not None:
            self.watch.updated(y)

    def _sum(self, *values):
        return self.worker._wait(self.worker.comm.allreduce(np.array(values)))

    def dot(self, a, b):
        """The all-reduced ``a · b``; where ``a`` and ``b`` are the operand and the output of
        the product just made (CG's ``p · A p``) its share came with the product."""
        fused, self.worker.fused = self.worker.fused, None
        local = fused[2] if fused is not None and fused[0] is a and fused[1] is b else super().dot(a, b)
        return self._sum(local)[0]

    def xpby(self, x, beta, y) -> None:
        self.worker.fused = None
        super().xpby(x, beta, y)

    def copy(self, out, src) -> None:
        self.worker.fused = None
        super().copy(out, src)

    def norm2(self, a) -> float:
        local = float(np.real(self._k(a).dot(a, a))) if a.size else 0.0
        return math.sqrt(max(float(np.real(self._sum(local)[0])), 0.0))

    def residual(self, r, b, ax) -> float:
        return float(np.real(self._sum(super().residual(r, b, ax))[0]))

    def axpy_norm(self, out, x, alpha, y) -> float:
        return float(np.real(self._sum(super().axpy_norm(out, x, alpha, y))[0]))

    def _allsum(self, a):
        """One all-reduce per Gram-Schmidt pass (:meth:`HostVectors.orthogonalize`)."""
        return self.worker._wait(self.worker.comm.allreduce(np.asarray(a)))


class GridVectors(BlockVectors):
    """:class:`BlockVectors` of a solve on a grid block: a CG step's all-reduce carries, in the
    same synchronisation, the sparse exchange of the new ``z`` (the ``x`` entries each block's
    columns touch). When the solver then forms the next direction ``p = z + beta p`` (``xpby``
    on the operator's operand), every block forms the ``p`` entries it needs the same way from
    the ``z`` entries it received and the ``p`` entries of the previous product (the owners'
    kernel, so the bits are the owners'), and the product of ``p`` only sends its partial rows
    back: 3 synchronisations per CG iteration instead of 4. Any other use falls back to the
    full exchange (:meth:`ahead_for` answers None)."""

    def __init__(self, worker, block):
        super().__init__(worker)
        self.block = block
        self.operand = None     # the operator's planned operand (CG's search direction p)
        self._sent = None       # (z, its entries received) of the last CG step
        self._ahead = None      # (entries received, beta) for the next product of the operand
        self._primed = False    # the operand was multiplied once: dot no longer sends its b

    def _step_sum(self, values, z):
        worker = self.worker
        tag = worker.comm.next_tag("grid-x")

        async def both():
            return await worker.comm.gather(worker._x_exchange(self.block, z, tag), worker.comm.allreduce(values))
        got, total = worker._wait(both())
        self._sent = (z, got)
        return total

    def dot(self, a, b):
        """Before the first product of the operand (CG's ``r . z`` ahead of ``p = z``) ``b``'s
        entries travel with the all-reduce, for :meth:`copy`; later a plain all-reduce."""
        if self._primed:
            return super().dot(a, b)
        return self._step_sum(np.array((HostVectors.dot(self, a, b),)), b)[0]

    def _sum(self, *values):
        self._sent = None               # anything between the exchange and p's update voids it
        return super()._sum(*values)

    def _allsum(self, a):
        self._sent = None
        return super()._allsum(a)

    def _take_sent(self, src, out):
        sent, self._sent = self._sent, None
        return sent[1] if sent is not None and sent[0] is src and out is self.operand else None

    def xpby(self, x, beta, y) -> None:
        super().xpby(x, beta, y)
        got = self._take_sent(x, y)
        self._ahead = (got, beta) if got is not None else None

    def copy(self, out, src) -> None:
        super().copy(out, src)
        got = self._take_sent(src, out)
        self._ahead = (got, None) if got is not None else None

    def ahead_for(self, v, out=None):
        """``(z entries, beta)`` when ``v`` is the direction just formed from the exchanged ``z``
        (``beta`` None: ``p = z``); ``out``, the product's output, plays no part."""
        ahead, self._ahead = self._ahead, None
        if v is not self.operand:
            return None
        self._primed = True
        return ahead


class GridBiCGVectors(BlockVectors):
    """:class:`BlockVectors` of a BiCGSTAB solve on a grid block, keeping *mirrors*: the entries
    of some vectors at the columns this block's entries touch (``cols_used``), bit for bit the
    owners' entries. The output of a product (``v = A ph``, ``t = A sh``) and a vector set from
    outside (a restored state, the starting residual, Jacobi's ``dinv``) send their entries with
    the next all-reduce the method makes; every update BiCGSTAB makes of its vectors (``p``,
    ``M p``, ``s = r - alpha v``, ``M s``, ``r = s - omega t``) is repeated on the mirrors with the
    owners' kernels. The operands ``M p`` and ``M s`` are therefore known before their products,
    which only send their partial rows back: one synchronisation per product instead of two,
    the same entries moved (``v`` and ``t`` instead of ``M p`` and ``M s``). A product of a vector
    without a mirror falls back to the full exchange (:meth:`ahead_for` answers None)."""

    def __init__(self, worker, block):
        super().__init__(worker)
        self.block = block
        self.known: dict = {}      # id(vector) -> (vector, its entries at block.cols_used)
        self.wanted: dict = {}     # id(vector) -> vector whose entries travel with the next all-reduce

    # -- bookkeeping -------------------------------------------------------------------------
    def want(self, v) -> None:
        """``v``'s entries travel with the next all-reduce (and ``v`` has a mirror after it)."""
        self.known.pop(id(v), None)
        self.wanted[id(v)] = v

    def _mirror(self, v):
        got = self.known.get(id(v))
        return got[1] if got is not None and got[0] is v else None

    def _set(self, out, update, *inputs) -> None:
        """``out``'s mirror becomes ``update(its mirror buffer, *the inputs' mirrors)`` when every
        input has a mirror (``out`` is listed among the inputs where the update reads it), else
        ``out`` has none (its next product takes the full exchange)."""
        mirrors = [self._mirror(v) for v in inputs]
        self.wanted.pop(id(out), None)
        if any(m is None for m in mirrors):
            self.known.pop(id(out), None)
            return
        mine = self._mirror(out)
        if mine is None:
            mine = np.empty(len(self.block.cols_used), dtype=out.dtype)
        update(mine, *mirrors)
        self.known[id(out)] = (out, mine)

    def _forget(self, v) -> None:
        self.known.pop(id(v), None)
        self.wanted.pop(id(v), None)

    def _sum(self, *values):
        if not self.wanted:
            return super()._sum(*values)
        vectors, self.wanted = list(self.wanted.values()), {}
        worker, block = self.worker, self.block
        tag = worker.comm.next_tag("grid-x")
        stacked = np.stack(vectors, axis=1)

        async def both():
            return await worker.comm.gather(worker._x_exchange(block, stacked, tag),
                                            worker.comm.allreduce(np.array(values)))
        got, total = worker._wait(both())
        entries = np.empty((len(block.cols_used), len(vectors)), dtype=stacked.dtype)
        for src, (lo, hi) in block.halo.xrecv.items():
            entries[lo:hi] = got[src]
        for k, v in enumerate(vectors):
            self.known[id(v)] = (v, np.ascontiguousarray(entries[:, k]))
        return total

    # -- the backend's operations ----------------------------------------------------------------
    def zeros(self, n, dtype):
        z = super().zeros(n, dtype)
        self.known[id(z)] = (z, np.zeros(len(self.block.cols_used), dtype=dtype))
        return z

    def residual(self, r, b, ax) -> float:
        self.want(r)
        return super().residual(r, b, ax)

    def bicg_p(self, p, r, beta, omega, v) -> None:
        super().bicg_p(p, r, beta, omega, v)
        self._set(p, lambda mp, mp_, mr, mv: HostVectors.bicg_p(self, mp, mr, beta, omega, mv), p, r, v)

    def scale_into(self, out, d, x) -> None:
        super().scale_into(out, d, x)
        self._set(out, lambda mo, md, mx: HostVectors.scale_into(self, mo, md, mx), d, x)

    def copy(self, out, src) -> None:
        super().copy(out, src)
        if self._mirror(src) is None:
            self.want(out)          # a vector set from outside (a restored state)
        else:
            self._set(out, lambda mo, ms: np.copyto(mo, ms), src)

    def axpy_norm(self, out, x, alpha, y) -> float:
        self._set(out, lambda mo, mx, my: HostVectors.axpy_norm(self, mo, mx, alpha, my), x, y)
        return super().axpy_norm(out, x, alpha, y)

    def bicg_x(self, x, alpha, ph, omega, sh) -> None:
        self._forget(x)
        super().bicg_x(x, alpha, ph, omega, sh)

    def axpy(self, y, alpha, x) -> None:
        self._forget(y)
        super().axpy(y, alpha, x)

    def xpby(self, x, beta, y) -> None:
        self._forget(y)
        super().xpby(x, beta, y)

    def ahead_for(self, v, out=None):
        """The entries of the operand ``v`` at this block's columns when ``v`` has a mirror (the
        product then sends only its partial rows back), else None; the output ``out`` sends its
        entries with the next all-reduce."""
        mine = self._mirror(v)
        if out is not None:
            self.want(out)
        return mine


class GridGMRESVectors(GridBiCGVectors):
    """:class:`GridBiCGVectors`' mirrors for a GMRES solve on a grid block: the Gram-Schmidt
    step's last all-reduce (the new ``||w||``) carries, in the same synchronisation, the entries of
    ``w`` (the product's output after its projections were subtracted) at the columns each block
    touches; the next basis row ``V[k+1] = w / ||w||`` and the next operand ``z = M V[k+1]`` are
    formed on the mirrors with the owners' kernels, so the product of ``z`` only sends its partial
    rows back: 3 synchronisations per inner step instead of 4 (4 instead of 5 where a second
    Gram-Schmidt pass runs). The restart residual ``r`` travels with its all-reduce and gives
    ``V[0]``; the product of ``x`` at a restart, which has no mirror, takes the full exchange."""

    def __init__(self, worker, block):
        super().__init__(worker, block)
        self._gs = None            # the vector being orthogonalised

    def ahead_for(self, v, out=None):
        """``v``'s mirror (None: the full exchange); the output's entries do not travel: GMRES
        sends ``w`` after its projections are subtracted (:meth:`_norm_from`)."""
        if out is not None:
            self._forget(out)
        return self._mirror(v)

    def orthogonalize(self, V, k1, w):
        self._forget(w)
        self._gs = w
        try:
            return super().orthogonalize(V, k1, w)
        finally:
            self._gs = None

    def _norm_from(self, norms) -> float:
        """The new ``||w||``: one all-reduce, ``w``'s entries exchanged with it."""
        if self._gs is not None:
            self.want(self._gs)
        total = self._sum(norms.sum())[0]
        return math.sqrt(max(float(np.real(total)), 0.0))

    def set_row(self, V, k, w, d) -> None:
        super().set_row(V, k, w, d)
        self._set(V.rows[k], lambda mo, mw: np.divide(mw, d, out=mo), w)

    def combine(self, out, V, y) -> None:
        self._forget(out)
        super().combine(out, V, y)
