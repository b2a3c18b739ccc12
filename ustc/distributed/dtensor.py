"""Distributed matrices and vectors over a runtime's block actors, and their products.

A :class:`DTensor` is a 2-D matrix split by rows (:class:`RowBlocks`); block ``b`` lives
on rank ``b``'s actor as two ustc Tensors (the columns it owns and its compressed ghost
columns) in the format the caller picks, per block if a function picks it. A
:class:`DVector` is a vector (or a dense matrix, for SpMM) split the same way. The halo
plan is made once per matrix: each rank sends exactly the entries of its slice that
other ranks' ghost columns touch, and :attr:`DTensor.plan_info` reports the count.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError, SolveError, UstcError
from .partition import RowBlocks
from .runtime import runtime as _default_runtime


def _rt(rt):
    return rt if rt is not None else _default_runtime()


class DVector:
    """A vector (``shape (n,)``) or dense matrix (``(n, k)``) split by rows over the blocks of
    ``partition``; the slices live on the block actors under ``name``."""

    def __init__(self, rt, partition: RowBlocks, name: str, shape, dtype):
        self.runtime, self.partition, self.name = rt, partition, name
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    @property
    def group(self):
        return self.runtime.group(self.partition.parts)

    @classmethod
    def from_array(cls, x, partition=None, *, runtime=None) -> "DVector":
        """Scatter ``x`` (1-D or 2-D NumPy) from the driver: one slice per block."""
        rt = _rt(runtime)
        x = np.asarray(x)
        if x.ndim not in (1, 2):
            raise ShapeError(f"DVector: need a vector or a matrix, got shape {x.shape}")
        part = RowBlocks.of(x.shape[0], partition)
        name = rt.name("vec")
        group = rt.group(part.parts)
        group.call("set_vec", [(name, x[slice(*part.range(b))]) for b in range(part.parts)])
        return cls(rt, part, name, x.shape, x.dtype)

    def gather(self) -> np.ndarray:
        """The whole vector on the driver."""
        parts = self.group.call("get_vec", [(self.name,)] * self.partition.parts)
        return np.concatenate(parts) if parts else np.zeros(self.shape, self.dtype)

    def to_numpy(self) -> np.ndarray:
        return self.gather()

    def free(self) -> None:
        self.group.call("drop", [(self.name,)] * self.partition.parts)


class DTensor:
    """A row-partitioned sparse matrix; see the module text. Build with :meth:`from_tensor`
    (scatter from the driver), :meth:`from_loader` (each block made on its worker) or
    :meth:`from_file` (a Matrix Market file each worker reads)."""

    def __init__(self, rt, rows: RowBlocks, cols: RowBlocks, name: str, shape, dtype, infos):
        self.runtime, self.rows, self.cols, self.name = rt, rows, cols, name
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.blocks = infos
        self._halo(infos)

    @property
    def group(self):
        return self.runtime.group(self.rows.parts)

    @property
    def partition(self) -> RowBlocks:
        return self.rows

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_tensor(cls, a, partition=None, *, block_format=None, ghost_format=None, col_partition=None,
                    runtime=None) -> "DTensor":
        """Scatter the 2-D matrix ``a`` (a ustc Tensor, SciPy or dense array) by rows.
        ``block_format``: a format for every block (default: ``a``'s format), or a function
        ``(rank, (rows, cols)) -> format``; ``ghost_format`` likewise for the ghost columns
        (default: the block's)."""
        import scipy.sparse as sp

        from ..tensor.tensor import Tensor

        rt = _rt(runtime)
        t = a if isinstance(a, Tensor) else (Tensor.from_dense(a, "CSR") if isinstance(a, np.ndarray)
                                             else Tensor.from_package(a))
        if t.ndim != 2:
            raise ShapeError(f"DTensor: need a matrix, got shape {t.shape}")
        m, n = t.shape
        rows = RowBlocks.of(m, partition)
        cols = RowBlocks.of(n, col_partition) if col_partition is not None else rows.like(n)
        if cols.parts != rows.parts:
            raise ShapeError("DTensor: the row and column partitions need the same number of blocks")
        fmt = block_format if block_format is not None else t.format
        (r, c), v = t.entries()
        csr = sp.csr_array((v, (r, c)), shape=(m, n))
        csr.sum_duplicates()
        name = rt.name("mat")
        group = rt.group(rows.parts)
        args = []
        for b in range(rows.parts):
            r0, r1 = rows.range(b)
            blk = csr[r0:r1].tocoo()
            args.append((name, (r0, r1), cols.range(b), (blk.row, blk.col, blk.data), fmt, ghost_format))
        infos = group.call("set_block", args)
        return cls(rt, rows, cols, name, (m, n), t.dtype, infos)

    @classmethod
    def from_loader(cls, loader, shape, partition=None, *, dtype=np.float64, block_format="CSR",
                    ghost_format=None, col_partition=None, runtime=None) -> "DTensor":
        """Each block made on its own worker: ``loader(row_start, row_stop)`` returns those rows
        (a ustc Tensor, SciPy sparse or dense matrix of shape ``(rows, n)``, or ``(rows, cols,
        values)`` with block-local rows). The driver never holds the matrix."""
        rt = _rt(runtime)
        m, n = (int(s) for s in shape)
        rows = RowBlocks.of(m, partition)
        cols = RowBlocks.of(n, col_partition) if col_partition is not None else rows.like(n)
        name = rt.name("mat")
        group = rt.group(rows.parts)
        infos = group.call("load_block", [(name, rows.range(b), cols.range(b), n, loader, block_format,
                                           ghost_format) for b in range(rows.parts)])
        return cls(rt, rows, cols, name, (m, n), dtype, infos)

    @classmethod
    def from_file(cls, path, partition=None, **options) -> "DTensor":
        """A Matrix Market file read on the workers, each keeping its rows (the driver reads
        only the size line). ``options`` as :meth:`from_loader`."""
        path = str(path)
        with open(path) as f:
            line = f.readline()
            while line.startswith("%") or not line.strip():
                line = f.readline()
        m, n = (int(t) for t in line.split()[:2])
        return cls.from_loader(_MtxRows(path), (m, n), partition, **options)

    # -- halo plan ------------------------------------------------------------------------
    def _halo(self, infos) -> None:
        """Send lists from every rank's ghost columns (``garray``): rank ``s`` sends rank ``d``
        the entries ``garray_d ∩ cols(s)``; rank ``d`` receives them contiguously."""
        P = self.rows.parts
        send = [dict() for _ in range(P)]
        recv = [dict() for _ in range(P)]
        self.halo_counts = np.zeros((P, P), dtype=np.int64)     # [src, dst] entries per product
        for d, info in enumerate(infos):
            garray = info["garray"]
            owners = self.cols.owner(garray)
            for s in np.unique(owners):
                lo, hi = np.searchsorted(owners, [s, s + 1])
                send[s][d] = garray[lo:hi] - self.cols.bounds[s]
                recv[d][int(s)] = (int(lo), int(hi))
                self.halo_counts[s, d] = hi - lo
        self.group.call("set_halo", [(self.name, send[b], recv[b]) for b in range(P)])

    def plan_info(self, k: int = 1, dtype=None) -> dict:
        """What one product with a ``k``-column operand sends: ``messages``, ``entries`` and
        ``bytes`` (per execute), per-block ghost counts and nonzeros."""
        dtype = np.dtype(dtype if dtype is not None else self.dtype)
        entries = int(self.halo_counts.sum())
        return {"blocks": self.rows.parts, "messages": int(np.count_nonzero(self.halo_counts)),
                "entries": entries, "bytes": entries * k * dtype.itemsize,
                "ghosts": [len(i["garray"]) for i in self.blocks],
                "nse_local": [i["nse_local"] for i in self.blocks],
                "nse_ghost": [i["nse_ghost"] for i in self.blocks],
                "formats": [i["format"] for i in self.blocks]}

    # -- use ------------------------------------------------------------------------------
    def gather(self, tensor_format="CSR"):
        """The whole matrix on the driver, as a ustc Tensor."""
        from ..tensor.tensor import Tensor

        parts = self.group.call("gather_block", [(self.name,)] * self.rows.parts)
        r = np.concatenate([p[0] + self.rows.bounds[b] for b, p in enumerate(parts)])
        c = np.concatenate([p[1] for p in parts])
        v = np.concatenate([p[2] for p in parts]).astype(self.dtype, copy=False)
        return Tensor.from_coo((r, c), v, self.shape, tensor_format)

    def __matmul__(self, x):
        if isinstance(x, DTensor):
            from .spgemm import SpGEMM
            return SpGEMM(self, x).execute()
        if isinstance(x, DVector):
            return Matmul(self, x).execute()
        x = np.asarray(x)
        return Matmul(self, DVector.from_array(x, self.cols, runtime=self.runtime)).execute(gather=True)

    def free(self) -> None:
        self.group.call("drop", [(self.name,)] * self.rows.parts)


class _MtxRows:
    """A loader reading a ``.mtx`` file once per worker process and returning row ranges."""

    _cache: dict = {}

    def __init__(self, path):
        self.path = path

    def __call__(self, r0, r1):
        import scipy.sparse as sp

        from ..tensor.io import from_file

        csr = self._cache.get(self.path)
        if csr is None:
            t = from_file(self.path)
            (r, c), v = t.entries()
            csr = self._cache[self.path] = sp.csr_array((v, (r, c)), shape=t.shape)
        return csr[r0:r1]


class Matmul:
    """``y = alpha * A @ x (+ beta * c)`` for a DTensor ``A`` and a DVector ``x`` (a vector:
    SpMV; a dense matrix: SpMM). :meth:`plan` plans a ustc.Matmul per block (local and ghost
    parts); :meth:`execute` does one halo exchange and the block products, with no
    scheduler task, and returns the DVector ``y`` (the same one at every execute).
    ``Matmul(A, B)`` with a DTensor ``B`` is an :class:`~ustc.distributed.spgemm.SpGEMM`."""

    def __new__(cls, a=None, x=None, *args, **kwargs):
        if isinstance(x, DTensor):
            from .spgemm import SpGEMM
            return SpGEMM(a, x, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, a: DTensor, x, c=None, alpha=1, beta=None):
        if not isinstance(a, DTensor):
            raise UstcError("ustc.distributed.Matmul: a must be a DTensor")
        if not isinstance(x, DVector):
            x = DVector.from_array(np.asarray(x), a.cols, runtime=a.runtime)
        if x.shape[0] != a.shape[1]:
            raise ShapeError(f"matmul: a has {a.shape[1]} columns but b has {x.shape[0]} rows")
        if x.partition != a.cols:
            raise ShapeError(f"matmul: x is split as {x.partition}, a's columns as {a.cols}")
        self.a, self.x, self.c = a, x, c
        self.alpha = alpha
        self.beta = (1 if c is not None else 0) if beta is None else beta
        self.dtype = np.result_type(a.dtype, x.dtype, *( [c.dtype] if c is not None else []),
                                    np.asarray(alpha).dtype if alpha != 1 else a.dtype)
        self.y = DVector(a.runtime, a.rows, a.runtime.name("vec"), (a.shape[0],) + x.shape[1:], self.dtype)
        self.plan_info = None

    def plan(self) -> dict:
        infos = self.a.group.call("plan", [(self.a.name, self.dtype.str, self.x.shape[1:])] * self.a.rows.parts)
        k = self.x.shape[1] if len(self.x.shape) > 1 else 1
        self.plan_info = {**self.a.plan_info(k, self.dtype), "blocks_plans": infos}
        return self.plan_info

    def execute(self, *, gather: bool = False):
        if self.plan_info is None:
            self.plan()
        cname = self.c.name if self.c is not None else None
        self.a.group.call("matmul", [(self.a.name, self.x.name, self.y.name, self.dtype.str, self.alpha,
                                      self.beta, cname)] * self.a.rows.parts)
        return self.y.gather() if gather else self.y

    def counters(self) -> list:
        """Per block: messages, bytes and synchronisations its communicator counted so far."""
        return self.a.group.call("counters")


class SolveResult:
    """What a distributed solve did (as :class:`ustc.SolveInfo`, plus communication counts)."""

    def __init__(self, method, stats, rtol, atol, transitions):
        first = stats[0]
        self.method = method
        self.iterations = first["iterations"]
        self.residual_norm = first["residual"]
        self.relative_residual = first["residual"] / (first["bnorm"] or 1.0)
        self.converged = first["residual"] <= max(rtol * first["bnorm"], atol)
        self.plan_info = first["plan_info"]
        self.messages = sum(s["messages"] for s in stats)
        self.bytes = sum(s["bytes"] for s in stats)
        self.syncs = first["syncs"]
        self.applications = first["applications"]
        self.scheduler_transitions = transitions

    def syncs_per_iteration(self) -> float:
        return self.syncs / max(self.iterations, 1)

    def __repr__(self):
        return (f"SolveResult(method={self.method!r}, converged={self.converged}, iterations={self.iterations}, "
                f"relative_residual={self.relative_residual:.3g}, syncs={self.syncs}, messages={self.messages}, "
                f"bytes={self.bytes}, scheduler_transitions={self.scheduler_transitions})")


def matmul(a, b, **options):
    """``a @ b`` for a DTensor ``a``: SpGEMM (a new DTensor) when ``b`` is a DTensor (``options``:
    ``alpha``, ``block_format``, ``ghost_format``), else the SpMV / SpMM ``Matmul`` gathered
    to NumPy (a DVector ``b``: the DVector result; ``options``: ``c``, ``alpha``, ``beta``)."""
    if isinstance(b, DTensor):
        from .spgemm import SpGEMM
        return SpGEMM(a, b, **options).execute()
    if isinstance(b, DVector):
        return Matmul(a, b, **options).execute()
    return Matmul(a, np.asarray(b), **options).execute(gather=True)


def solve(a: DTensor, b, method: str = "cg", *, x0=None, rtol: float = 1e-8, atol: float = 0.0, maxiter=None,
          restart: int = 30, preconditioner=None, check: bool = True, return_info: bool = False,
          gather: bool = True):
    """Solve ``A x = b`` with CG, BiCGSTAB or GMRES(restart), SPMD on the block actors: one call
    per block, halo exchanges and all-reduces peer to peer, no scheduler work per iteration.
    ``preconditioner``: None or ``"jacobi"``. Convergence as :func:`ustc.solve` (the true
    residual, recomputed at the end); ``SolveError`` unless ``check=False``. Returns ``x``
    (NumPy, or the DVector with ``gather=False``) and with ``return_info`` a :class:`SolveResult`."""
    if method not in ("cg", "bicgstab", "gmres"):
        raise UstcError(f"ustc.distributed.solve: method must be cg, bicgstab or gmres, got {method!r}")
    if preconditioner not in (None, "jacobi"):
        raise UstcError("ustc.distributed.solve: preconditioner must be None or 'jacobi'")
    if a.shape[0] != a.shape[1] or a.rows != a.cols:
        raise ShapeError(f"solve: a must be square with aligned row and column blocks, got {a.shape}")
    rt = a.runtime
    n = a.shape[0]
    if not isinstance(b, DVector):
        b = DVector.from_array(np.asarray(b), a.rows, runtime=rt)
    if b.shape != (n,):
        raise ShapeError(f"solve: b has shape {b.shape}, expected ({n},)")
    x0name = None
    if x0 is not None:
        x0 = x0 if isinstance(x0, DVector) else DVector.from_array(np.asarray(x0), a.rows, runtime=rt)
        x0name = x0.name
    dtype = np.result_type(a.dtype, b.dtype, np.float32)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    maxiter = 10 * n if maxiter is None else int(maxiter)
    x = DVector(rt, a.rows, rt.name("vec"), (n,), dtype)
    before = rt.scheduler_transitions()
    stats = a.group.call("solve", [(a.name, b.name, x.name, x0name, method, dtype.str, rtol, atol, maxiter,
                                    restart, preconditioner == "jacobi", n)] * a.rows.parts)
    transitions = rt.scheduler_transitions() - before
    info = SolveResult(method, stats, rtol, atol, transitions)
    if check and not info.converged:
        raise SolveError(f"ustc.distributed.solve: {method} did not converge in {info.iterations} iterations "
                         f"(relative residual {info.relative_residual:.3g} > rtol {rtol:.1e})")
    out = x.gather() if gather else x
    return (out, info) if return_info else out
