"""The block worker: a Dask actor holding the blocks of one partition's rank.

One :class:`BlockWorker` per block index lives on a Dask worker. It keeps that
rank's matrix blocks (local part and compressed ghost columns, each a ustc
Tensor with planned :class:`ustc.Matmul` objects), its slices of distributed
vectors, and an :class:`~ustc.distributed.comm.ActorCommunicator` to its peers.
Every public method is a coroutine: it runs on the worker's event loop, so many
blocks on one worker interleave, and heavy work (products, solves) runs in the
block's own thread, which reaches the communicator through the loop. A Krylov
solve is one call per block: the iteration is SPMD, the blocks exchange halo
values and all-reduce their inner products among themselves, and the scheduler
sees nothing until the solve returns.

The Krylov methods run over a vector backend whose reductions are all-reduces
(:class:`BlockVectors`): :mod:`ustc.ops.krylov`'s CG and BiCGSTAB (their ``state=`` /
``keep=`` hooks keep and restore the whole state) and GMRES (the restart length taken from
the global size). With
checkpoints a :class:`~ustc.distributed.checkpoint.Watch` keeps copies of the state
(GMRES: the backend tells it when ``x`` changes) and the driver pulls them through
:meth:`BlockWorker.checkpoints`.
"""

from __future__ import annotations

import asyncio
import math
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np

from ..errors import DistributedError, SolveError
from ..kernels._race import KernelRace
from ..ops import krylov
from .blockvectors import BlockVectors, GridBiCGVectors, GridGMRESVectors, GridVectors
from .checkpoint import Watch
from .comm import ActorCommunicator, run_inline
from .fetch import SpGEMMBlocks
from .gridblock import GridBlock, GridBlocks
from .kernels import ghost_product, local_product
from .petsclayout import mpiaij_part, rows_csr
from .quiet import WORKER_PAUSED, paused
from .shm import listening
from .sockets import SocketCommunicator


def _as_coo(block, nrows: int, ncols: int):
    """``(rows, cols, values)`` of a loader's block: a ustc Tensor, a SciPy sparse matrix,
    a dense array or a ``(rows, cols, values)`` triple, rows local to the block."""
    from ..tensor.tensor import Tensor

    if isinstance(block, tuple) and len(block) == 3:
        r, c, v = (np.asarray(b) for b in block)
        return r.astype(np.int64), c.astype(np.int64), v
    if not isinstance(block, Tensor):
        if isinstance(block, np.ndarray):
            block = Tensor.from_dense(block, "CSR")
        else:
            block = Tensor.from_package(block)
    if tuple(block.shape) != (nrows, ncols):
        raise DistributedError(f"a loader returned a block of shape {tuple(block.shape)}, expected "
                               f"({nrows}, {ncols})")
    (r, c), v = block.entries()
    return np.asarray(r, np.int64), np.asarray(c, np.int64), np.asarray(v)


def _format_for(fmt, rank, shape):
    return fmt(rank, shape) if callable(fmt) else fmt


def _csr_arrays(tensor, dtype):
    """``(pos, crd, values)`` of a 2-D CSR ``tensor`` on the CPU with values of ``dtype``, else None."""
    from ..formats import CSR
    from ..tensor.interop import plain_format

    if getattr(tensor, "device", "cpu") != "cpu" or plain_format(tensor.format) != CSR:
        return None
    rows = tensor.pos(1), tensor.crd(1), tensor.values
    if not all(isinstance(a, np.ndarray) for a in rows) or rows[2].dtype != dtype:
        return None
    return rows


def _csr_parts(block, dtype):
    """The arrays of :mod:`ustc.distributed.kernels`' product when both parts of ``block`` are CSR
    with values of ``dtype`` (``local``: ``(pos, crd, values)`` or None; ``ghost``: ``(rows with
    entries, pos, crd, values)`` or None; ``square``: the block's rows are its own columns), else
    None (the planned ``ustc.Matmul`` objects run)."""
    local = ghost = None
    if block.local is None and block.ghost is None:
        return None
    if block.local is not None:
        local = _csr_arrays(block.local, dtype)
        if local is None:
            return None
    if block.ghost is not None:
        parts = _csr_arrays(block.ghost, dtype)
        if parts is None:
            return None
        ghost = (np.flatnonzero(np.diff(parts[0])).astype(np.int64),) + parts
    return SimpleNamespace(local=local, ghost=ghost, square=tuple(block.rows) == tuple(block.cols),
                           race=KernelRace())


def _local_product(fast, x, out, zero):
    """The local pass of :meth:`BlockWorker._apply` (``out = A_local x``, returning ``left · out``), its
    row sums raced over the first six products (``fast.race``: the masked 8-lane steps against two
    interleaved sums, as ``ustc.ops.krylov.two_sums`` races them for a single-process solve) and the
    faster kept: on an AMD EPYC the two sums took half the masked steps' time on a Poisson matrix."""
    left = x if fast.square else out
    race = fast.race
    if race.winner is not None:
        return local_product(*fast.local, x, out, left, zero, race.winner == 1)
    dot = []
    race.timed(_raced_local, fast.local, x, out, left, zero, dot)
    return dot[0]


def _raced_local(choice: int, local, x, out, left, zero, dot: list) -> None:
    dot.append(local_product(*local, x, out, left, zero, choice == 1))


def _block_entries(block) -> tuple:
    """``(rows, cols, values)`` of ``block``'s rows (local row numbers, global column indices)."""
    parts = []
    if block.local is not None:
        (r, c), v = block.local.entries()
        parts.append((r, c + block.cols[0], v))
    if block.ghost is not None:
        (r, c), v = block.ghost.entries()
        parts.append((r, block.garray[c], v))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, block.dtype)
    return tuple(np.concatenate(p) for p in zip(*parts))


class _Block:
    """One rank's part of a distributed matrix (PETSc MPIAIJ layout): ``local`` holds the
    columns this rank owns, ``ghost`` the other columns it touches, compressed to
    ``garray`` (their global indices, ascending); ``send[dst]`` are the owned column offsets
    rank ``dst`` needs, ``recv[src] = (lo, hi)`` where ``src``'s values land in the ghost
    buffer."""

    def __init__(self, rows, cols, local, ghost, garray, dtype, diag):
        self.rows, self.cols = rows, cols
        self.local, self.ghost, self.garray = local, ghost, garray
        self.dtype = dtype
        self.diag = diag
        self.send: dict = {}
        self.recv: dict = {}
        self.products: dict = {}
        self.formats = (None, None)       # (block format, ghost format) as resolved for this block

    @property
    def nrows(self):
        return self.rows[1] - self.rows[0]

    @property
    def ncols(self):
        return self.cols[1] - self.cols[0]

    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.local, self.ghost) if t is not None) + self.garray.nbytes


#: the grid backends that send a product's ``x`` entries ahead with an all-reduce, by method
GRID_VECTORS = {"cg": GridVectors, "bicgstab": GridBiCGVectors, "gmres": GridGMRESVectors}


class _Operator:
    """The solvers' ``op``: ``apply(v, out)`` is the distributed product of this rank's part
    (``product(v, out)``: a row block's halo SpMV or a grid block's sparse exchange); ``vec``:
    the vector backend (default :class:`BlockVectors`)."""

    def __init__(self, worker, product, n, dtype, info, vec=None):
        self.worker, self.product = worker, product
        self.vec = vec if vec is not None else BlockVectors(worker)
        self.v = np.zeros(n, dtype=dtype)
        self.applications = 0
        self.matmul = SimpleNamespace(plan_info=info)

    def apply(self, v, out):
        self.applications += 1
        if self.vec.watch is not None:
            self.vec.watch.product(v)
        self.product(v, out)
        return out


class BlockWorker(SpGEMMBlocks, GridBlocks):
    """The Dask actor of one block index (rank) of a partition."""

    def __init__(self, rank: int, size: int, timeout: float = 120.0, quiet: bool = False):
        self.rank, self.size, self.timeout = int(rank), int(size), float(timeout)
        self.quiet = bool(quiet)   # pause the Dask worker's sampling while a solve runs (ustc.distributed.quiet)
        self.blocks: dict = {}
        self.vecs: dict = {}
        self.spgemms: dict = {}
        self.watches: dict = {}
        self._needs: dict = {}
        self.comm = None
        self.loop = None
        self.fused = None          # (operand, output, local share of operand . output) of the last product
        self._listening = None     # the SocketCommunicator of a connect in progress
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"ustc-block-{rank}")

    # -- plumbing -------------------------------------------------------------------------
    async def listen(self, shared: bool = False):
        """First step of a socket connect: a listening :class:`SocketCommunicator` on this
        worker's host (with ``shared``, on x86-64, a :class:`ShmCommunicator`: shared-memory
        rings to the ranks of the same host); returns its endpoint."""
        from distributed import get_worker
        from distributed.comm import get_address_host

        if self._listening is not None:
            self._listening.close()
        try:
            host = get_address_host(get_worker().address)
        except Exception:  # noqa: BLE001 - a transport without a host (inproc): this machine
            host = "127.0.0.1"
        self._listening = listening(shared, self.rank, self.size, host, self.timeout)
        return self._listening.endpoint

    async def connect(self, peers, addresses=None) -> int:
        """A fresh communicator to the peers (one actor per rank, this one included): with
        ``addresses`` (every rank's :meth:`listen` answer) direct TCP connections, else calls
        between the actors. Returns the process id. Waits first for this block's thread to finish
        what it runs (after a repair: an aborted call); the old communicator is then closed."""
        from distributed import get_worker

        self.loop = asyncio.get_running_loop()
        await self._run(lambda: None)
        self._close_comm()
        if addresses is not None:
            comm, self._listening = self._listening, None
            await self._run(comm.connect, addresses, self.timeout)
        else:
            worker = get_worker()
            for peer in peers:      # bound here: the block thread's calls run outside the worker's context
                peer._worker = worker
            comm = ActorCommunicator(self.rank, peers, self.timeout)
        self.comm = comm
        return os.getpid()

    def _close_comm(self) -> None:
        if self.comm is not None and hasattr(self.comm, "close"):
            self.comm.close()

    async def close(self) -> None:
        """Close the communicator (its connections and reader threads) and the block's thread."""
        if self._listening is not None:
            self._listening.close()
            self._listening = None
        self._close_comm()
        self._pool.shutdown(wait=False)

    async def transport(self) -> tuple:
        """``(communicator class name, ranks reached through shared memory)``."""
        return type(self.comm).__name__, tuple(getattr(self.comm, "shared_peers", ()))

    async def put(self, tag, src, data) -> None:
        self.comm.deliver(tag, src, data)

    async def abort(self, reason: str) -> None:
        self.comm.abort(reason)

    async def ping(self) -> int:
        return self.rank

    async def _run(self, fn, *args):
        return await self.loop.run_in_executor(self._pool, fn, *args)

    def _wait(self, coro):
        """Run ``coro`` (communication) from the block's thread and wait for it: in this thread on
        a synchronous communicator, else on the event loop."""
        if self.comm.synchronous:
            return run_inline(coro)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _post(self, coro):
        """Start ``coro`` (sends); :meth:`_wait`'s counterpart that does not wait on the event
        loop: ``.result()`` of what it returns waits (None: already done, inline)."""
        if self.comm.synchronous:
            run_inline(coro)
            return None
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def memory(self) -> dict:
        return {"blocks": sum(b.nbytes() for b in self.blocks.values()),
                "vectors": sum(v.nbytes for v in self.vecs.values()),
                "pid": os.getpid()}

    async def counters(self) -> dict:
        c = self.comm
        return {"messages": c.messages, "bytes": c.bytes, "syncs": c.syncs}

    # -- matrices -------------------------------------------------------------------------
    async def set_block(self, key, rows, cols, coo, fmt, ghost_fmt):
        return await self._run(self._set_block, key, rows, cols, coo, fmt, ghost_fmt)

    async def load_block(self, key, rows, cols, ncols, loader, fmt, ghost_fmt, index=None, col_position=None):
        """The block of positions ``rows`` from ``loader(row_start, row_stop)``, or ``loader(index)``
        (its global rows) for labelled rows; ``col_position``: global column -> position (labelled
        columns), else None."""
        def load():
            made = loader(rows[0], rows[1]) if index is None else loader(index)
            r, c, v = _as_coo(made, rows[1] - rows[0], ncols)
            if col_position is not None:
                c = col_position[c]
            return self._set_block(key, rows, cols, (r, c, v), fmt, ghost_fmt)
        return await self._run(load)

    def _set_block(self, key, rows, cols, coo, fmt, ghost_fmt):
        from ..tensor.tensor import Tensor

        r, c, v = coo
        r, c, v = np.asarray(r, np.int64), np.asarray(c, np.int64), np.asarray(v)
        nrows, c0, c1 = rows[1] - rows[0], cols[0], cols[1]
        own = (c >= c0) & (c < c1)
        garray = np.unique(c[~own])
        fmt = _format_for(fmt, self.rank, (nrows, c1 - c0))
        ghost_fmt = _format_for(ghost_fmt, self.rank, (nrows, len(garray))) if ghost_fmt is not None else fmt
        local = ghost = None
        if own.any():
            local = Tensor.from_coo((r[own], c[own] - c0), v[own], (nrows, c1 - c0), fmt)
        if len(garray):
            ghost = Tensor.from_coo((r[~own], np.searchsorted(garray, c[~own])), v[~own],
                                    (nrows, len(garray)), ghost_fmt)
        diag = np.zeros(nrows, dtype=v.dtype)
        on = own & (r + rows[0] == c)
        np.add.at(diag, r[on], v[on])
        block = self.blocks[key] = _Block(tuple(rows), tuple(cols), local, ghost, garray, v.dtype, diag)
        block.formats = (fmt, ghost_fmt)
        return {"garray": garray, "nse_local": int(own.sum()), "nse_ghost": int((~own).sum()),
                "format": str(local.format) if local is not None else str(fmt)}

    async def set_halo(self, key, send, recv) -> None:
        block = self.blocks[key]
        block.send = {int(d): np.asarray(i, np.int64) for d, i in send.items()}
        block.recv = {int(s): (int(lo), int(hi)) for s, (lo, hi) in recv.items()}

    async def drop(self, *keys) -> None:
        for key in keys:
            self.blocks.pop(key, None)
            self.vecs.pop(key, None)
            self.spgemms.pop(key, None)

    async def gather_block(self, key):
        """``(rows, cols, values)`` of this rank's rows, global column indices."""
        return _block_entries(self.blocks[key])

    async def petsc_part(self, key, shape):
        """This rank's rows as PETSc's MPIAIJ part in positions (:func:`~ustc.distributed.
        petsclayout.mpiaij_part` of ``rows x cols`` in a matrix of ``shape``)."""
        def part():
            block = self.blocks[key]
            rows = rows_csr(*_block_entries(block), block.nrows, shape[1], block.dtype)
            return mpiaij_part(rows, block.rows, block.cols, shape)
        return await self._run(part)

    # -- products -------------------------------------------------------------------------
    def _product(self, block, dtype, tail):
        """The planned products of ``block`` for operands of dtype ``dtype`` and trailing shape
        ``tail`` (() for SpMV, (k,) for SpMM): buffers and ustc.Matmul objects, made once."""
        from ..ops.plan import Matmul

        key = (np.dtype(dtype).str, tuple(tail))
        prod = block.products.get(key)
        if prod is not None:
            return prod
        xbuf = np.zeros((block.ncols,) + tuple(tail), dtype=dtype)
        gbuf = np.zeros((len(block.garray),) + tuple(tail), dtype=dtype)
        ybuf = np.zeros((block.nrows,) + tuple(tail), dtype=dtype)
        mm_local = mm_ghost = None
        info = []
        if block.local is not None and block.nrows:
            mm_local = Matmul(block.local, xbuf)
            mm_local.plan()
            info.append(f"local: {mm_local.plan_info}")
        if block.ghost is not None and block.nrows:
            mm_ghost = Matmul(block.ghost, gbuf, ybuf, beta=1)
            mm_ghost.plan()
            info.append(f"ghost: {mm_ghost.plan_info}")
        fast = _csr_parts(block, dtype) if not tail else None
        if fast is not None:
            info = ["CSR local and ghost parts: one compiled pass each, the operand's dot product "
                    "taken on the way"]
        prod = SimpleNamespace(xbuf=xbuf, gbuf=gbuf, ybuf=ybuf, local=mm_local, ghost=mm_ghost, fast=fast,
                               info="; ".join(info) or "empty block")
        block.products[key] = prod
        return prod

    def _plan_info(self, block, dtype, tail):
        return self._product(block, dtype, tail).info

    async def plan(self, key, dtype, tail) -> str:
        block = self.blocks[key]
        return await self._run(self._plan_info, block, np.dtype(dtype), tuple(tail))

    async def _send_all(self, sends, tag) -> None:
        comm = self.comm
        await comm.gather(*(comm.send(dst, tag, data) for dst, data in sends))

    async def _take_all(self, recv, tag, gbuf) -> None:
        comm = self.comm
        got = await comm.gather(*(comm.recv(src, tag) for src in recv))
        for (lo, hi), data in zip(recv.values(), got):
            gbuf[lo:hi] = data

    async def _exchange(self, sends, srcs, tag) -> dict:
        """Send ``(dst, data)`` pairs and receive from ``srcs`` under ``tag``: ``{src: data}``."""
        comm = self.comm
        got = await comm.gather(*(comm.send(dst, tag, data) for dst, data in sends),
                                *(comm.recv(src, tag) for src in srcs))
        return dict(zip(srcs, got[len(sends):]))

    def _apply(self, block, x, out) -> None:
        """``out = (A x)[this rank's rows]`` from this rank's slice ``x``: the halo values go out
        first, the local product runs while they travel, the ghost product adds the received.
        CSR parts run :mod:`ustc.distributed.kernels` on ``x`` and ``out`` themselves and leave
        ``x · out`` in :attr:`fused` (a square block) for the solver's next dot product."""
        self.fused = None
        prod = self._product(block, out.dtype, x.shape[1:])
        comm = self.comm
        tag = comm.next_tag("halo")
        comm.syncs += 1
        sends = [(dst, np.ascontiguousarray(x[idx])) for dst, idx in block.send.items()]
        pending = self._post(self._send_all(sends, tag))
        fast = prod.fast
        if fast is not None and x.dtype == out.dtype and x.flags.c_contiguous and out.flags.c_contiguous:
            zero = out.dtype.type(0)
            if fast.local is not None:
                dot = _local_product(fast, x, out, zero)
            else:
                out.fill(0)
                dot = zero
            if pending is not None:
                pending.result()
            self._wait(self._take_all(block.recv, tag, prod.gbuf))
            if fast.ghost is not None:
                dot += ghost_product(*fast.ghost, prod.gbuf, out, x, fast.square, zero)
            if fast.square:
                self.fused = (x, out, dot)
            return
        if prod.local is not None:
            if x is not prod.xbuf:
                prod.xbuf[...] = x
            prod.local.execute(out=prod.ybuf)
        else:
            prod.ybuf.fill(0)
        if pending is not None:
            pending.result()
        self._wait(self._take_all(block.recv, tag, prod.gbuf))
        if prod.ghost is not None:
            prod.ghost.execute()
        if out is not prod.ybuf:
            out[...] = prod.ybuf

    async def set_vec(self, name, data) -> None:
        self.vecs[name] = np.ascontiguousarray(data)

    async def get_vec(self, name):
        return self.vecs[name]

    async def fill_vec(self, name, shape, dtype, value) -> None:
        self.vecs[name] = np.full(shape, value, dtype=dtype)

    async def matmul(self, key, xname, yname, dtype, alpha=1, beta=0, cname=None) -> None:
        """``vecs[yname] = alpha * A[key] @ vecs[xname] + beta * vecs[cname]`` (SPMD: every rank
        calls it together)."""
        def run():
            block = self.blocks[key]
            x = self.vecs[xname].astype(dtype, copy=False)
            y = np.empty((block.nrows,) + x.shape[1:], dtype=dtype)
            self._apply(block, x, y)
            if alpha != 1:
                y *= alpha
            if cname is not None and beta != 0:
                y += beta * self.vecs[cname]
            self.vecs[yname] = y
        await self._run(run)

    # -- solves ---------------------------------------------------------------------------
    async def solve(self, key, bname, xname, x0name, method, dtype, rtol, atol, maxiter, restart,
                    jacobi, nglobal, checkpoint_every=None, offset=0, state=None):
        """The SPMD solve of this block (every rank calls it together); with ``checkpoint_every``
        a :class:`~ustc.distributed.checkpoint.Watch` keeps copies of the solver's state for
        :meth:`checkpoints` (``offset``: iterations done before, for a resumed solve; ``state``:
        CG's or BiCGSTAB's state to continue from, ``{name: vector name in vecs, or scalar}``,
        vector names given as ``("vec", name)``)."""
        with paused(self._server() if self.quiet else None, WORKER_PAUSED):
            return await self._run(self._solve, key, bname, xname, x0name, method, np.dtype(dtype), rtol,
                                   atol, maxiter, restart, jacobi, nglobal, checkpoint_every, offset, state)

    @staticmethod
    def _server():
        """The Dask worker this actor lives on (None outside one)."""
        from distributed import get_worker

        try:
            return get_worker()
        except ValueError:
            return None

    async def checkpoints(self, xname, since) -> list:
        """The copies of the running solve's ``x`` slice taken after iteration ``since``."""
        watch = self.watches.get(xname)
        return watch.since(since) if watch is not None else []

    def _operator(self, block, dtype, method):
        """``(op, diagonal)`` of a solve on ``block``: the solvers' operator and a function giving
        this rank's part of ``diag(A)`` (collective on a grid: every rank calls it)."""
        if isinstance(block, GridBlock):
            if block.halo is None:
                raise DistributedError(f"block {self.rank}: the grid's sparse exchange was not planned "
                                       f"(GridTensor.sparse_plan)")
            info = (f"grid {block.grid[0]}x{block.grid[1]} block {block.coords}: sparse exchange, "
                    f"{len(block.cols_used)} columns and {len(block.rows_used)} rows in use")
            vec = GRID_VECTORS[method](self, block) if method in GRID_VECTORS else BlockVectors(self)
            ahead = getattr(vec, "ahead_for", lambda v, out: None)
            op = _Operator(self, lambda v, out: self._grid_apply(block, v, out, ahead(v, out)), block.halo.n,
                           dtype, info, vec)
            if isinstance(vec, GridVectors):
                vec.operand = op.v
            return op, lambda: self._grid_diag(block, dtype)
        op = _Operator(self, lambda v, out: self._apply(block, v, out), block.nrows, dtype,
                       self._plan_info(block, dtype, ()))
        return op, lambda: block.diag

    def _solve(self, key, bname, xname, x0name, method, dtype, rtol, atol, maxiter, restart, jacobi, nglobal,
               checkpoint_every=None, offset=0, state=None):
        try:
            return self._solve_block(key, bname, xname, x0name, method, dtype, rtol, atol, maxiter, restart,
                                     jacobi, nglobal, checkpoint_every, offset, state)
        finally:
            self.watches.pop(xname, None)

    def _solve_block(self, key, bname, xname, x0name, method, dtype, rtol, atol, maxiter, restart, jacobi,
                     nglobal, checkpoint_every, offset, state):
        comm = self.comm
        op, diagonal = self._operator(self.blocks[key], dtype, method)
        vec = op.vec
        b = np.ascontiguousarray(self.vecs[bname], dtype=dtype)
        x = (np.array(self.vecs[x0name], dtype=dtype) if x0name is not None
             else np.zeros(len(op.v), dtype=dtype))
        dinv = None
        if jacobi:
            diag = diagonal()
            zero = float(np.count_nonzero(diag == 0))
            if self._wait(comm.allreduce(np.array([zero])))[0]:
                raise SolveError("solve: the Jacobi preconditioner needs a nonzero diagonal; "
                                 "some block has a zero or missing diagonal entry")
            dinv = (1 / diag).astype(dtype)
            if isinstance(vec, GridBiCGVectors):
                vec.want(dinv)          # its entries travel with the first all-reduce
        if state is not None:
            state = {k: (self.vecs[v[1]] if isinstance(v, tuple) else v) for k, v in state.items()}
        comm.reset_counters()
        watch = self.watches[xname] = Watch(x, method, checkpoint_every, offset) if checkpoint_every else None
        if method == "gmres":
            vec.watch = watch
            x, it, _, _ = krylov.gmres(op, b, x, dinv, rtol, atol, maxiter, restart, size=nglobal)
            vec.watch = None
        else:
            x, it, _, _ = krylov.SOLVERS[method](op, b, x, dinv, rtol, atol, maxiter, state=state,
                                                    keep=watch.keep if watch is not None else None)
        loop_counters = {"messages": comm.messages, "bytes": comm.bytes, "syncs": comm.syncs,
                         "applications": op.applications}
        r = np.empty_like(b)
        op.apply(x, r)
        np.subtract(b, r, out=r)
        wide = krylov.wide_dtype(dtype)
        sums = self._wait(comm.allreduce(np.array([
            float(np.vdot(r.astype(wide), r.astype(wide)).real),
            float(np.vdot(b.astype(wide), b.astype(wide)).real)])))
        res, bn = math.sqrt(max(sums[0], 0)), math.sqrt(max(sums[1], 0))
        krylov.check_finite(method, it, res)
        self.vecs[xname] = x
        return {"iterations": int(it), "residual": res, "bnorm": bn, "plan_info": op.matmul.plan_info,
                "kept": watch.since(-1) if watch is not None else [], **loop_counters}
