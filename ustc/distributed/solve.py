"""The distributed Krylov solve: one SPMD call per block, with checkpoints and resume.

:func:`solve` runs :mod:`ustc.ops.krylov`'s CG, BiCGSTAB or GMRES on every block at once (:meth:`ustc.distributed.worker.BlockWorker.solve`),
on row-partitioned :class:`DTensor` or 2-D :class:`GridTensor` matrices. With ``checkpoint_every=k`` the driver
holds the newest complete :class:`~ustc.distributed.checkpoint.Checkpoint` while the solve
runs; when a worker is lost the :class:`ustc.DistributedError` carries it
(``err.checkpoint``), and ``solve(..., resume=err.checkpoint)`` (or ``retries=n``, which
does so itself) repairs the group (:mod:`ustc.distributed.recipe`: the lost blocks rebuilt
from their recipes on the workers alive) and continues from it.
"""

from __future__ import annotations

import numpy as np

from ..errors import DistributedError, ShapeError, SolveError, UstcError
from ..ops.krylov import KEPT_STATE
from .checkpoint import Checkpoint, Collector
from .dtensor import DTensor, DVector
from .grid import GridTensor
from .gridhalo import square
from .partition import RowBlocks


class SolveResult:
    """What a distributed solve did (as :class:`ustc.SolveInfo`, plus communication counts)."""

    def __init__(self, method, stats, rtol, atol, transitions, offset=0):
        first = stats[0]
        self.method = method
        self.iterations = offset + first["iterations"]
        self.resumed_from = offset          # iterations done before a resume (0: none)
        self.checkpoints = 0                # complete checkpoints the driver received
        self.restarts = 0                   # automatic resumes after a worker loss
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
                f"bytes={self.bytes}, scheduler_transitions={self.scheduler_transitions}, "
                f"checkpoints={self.checkpoints}, restarts={self.restarts})")


def _validate(a, method, preconditioner, checkpoint_every, resume) -> None:
    if method not in ("cg", "bicgstab", "gmres"):
        raise UstcError(f"ustc.distributed.solve: method must be cg, bicgstab or gmres, got {method!r}")
    if preconditioner not in (None, "jacobi"):
        raise UstcError("ustc.distributed.solve: preconditioner must be None or 'jacobi'")
    if not isinstance(a, (DTensor, GridTensor)):
        raise UstcError(f"ustc.distributed.solve: a must be a DTensor or a GridTensor, got {type(a).__name__}")
    if a.shape[0] != a.shape[1] or (isinstance(a, DTensor) and a.rows != a.cols):
        raise ShapeError(f"solve: a must be square with aligned row and column blocks, got {a.shape}")
    if isinstance(a, GridTensor) and not square(a.grid):
        raise ShapeError("solve: a grid's rows and columns must carry the same labels (or none) for a solve")
    if checkpoint_every is not None and int(checkpoint_every) < 1:
        raise UstcError(f"ustc.distributed.solve: checkpoint_every must be a positive count, got {checkpoint_every}")
    if resume is not None:
        n = a.shape[0]
        if (not isinstance(resume, Checkpoint) or resume.method != method or resume.x.shape != (n,)
                or any(isinstance(v, np.ndarray) and v.shape != (n,) for v in resume.state.values())):
            raise UstcError(f"ustc.distributed.solve: resume= needs a Checkpoint of {method} for {n} "
                            f"unknowns, got {resume!r}")
        if resume.state:
            _check_state(method, preconditioner, resume.state)


def _check_state(method, preconditioner, state) -> None:
    """UstcError unless ``state`` is what ``method`` keeps with ``preconditioner``."""
    want = set(KEPT_STATE.get(method, ())) | ({"z"} if method == "cg" and preconditioner == "jacobi" else set())
    if set(state) != want:
        raise UstcError(f"ustc.distributed.solve: the {method} checkpoint keeps {sorted(state)}, a {method} "
                        f"solve with preconditioner={preconditioner!r} needs {sorted(want)} (was it taken "
                        f"with another preconditioner?)")


def solve(a: DTensor, b, method: str = "cg", *, x0=None, rtol: float = 1e-8, atol: float = 0.0, maxiter=None,
          restart: int = 30, preconditioner=None, check: bool = True, return_info: bool = False,
          gather: bool = True, checkpoint_every=None, resume: Checkpoint | None = None, retries: int = 0,
          on_checkpoint=None):
    """Solve ``A x = b`` with CG, BiCGSTAB or GMRES(restart), SPMD on the block actors: one call
    per block, halo exchanges and all-reduces peer to peer, no scheduler work per iteration.
    ``preconditioner``: None or ``"jacobi"``. Convergence as :func:`ustc.solve` (the true
    residual, recomputed at the end); ``SolveError`` unless ``check=False``. Returns ``x``
    (NumPy, or the DVector with ``gather=False``) and with ``return_info`` a :class:`SolveResult`.

    ``checkpoint_every=k``: the driver keeps the iterate every ``k`` iterations (pulled every
    0.25 s; ``on_checkpoint(checkpoint)`` is called on the client's event loop with each new
    one: keep it short; the last copies, which travel with the result, are delivered once more
    from the calling thread after the solve). A lost worker raises :class:`ustc.DistributedError` with
    ``err.checkpoint`` (the newest complete checkpoint, else ``resume``, else None).
    ``resume=checkpoint``: continue from it (``x0`` ignored) with ``maxiter`` counting the
    iterations done before: from the solver's whole state for CG and BiCGSTAB, from ``x`` at a
    restart for GMRES, so the iterations that follow are those of the uninterrupted solve (bit
    for bit, with the same matrix partition and ``rtol``; a hand-made Checkpoint without
    ``state`` restarts CG or BiCGSTAB from its ``x``); the group is repaired first if a worker was lost. ``retries=n``:
    resume so by itself after up to ``n`` losses (from the start when no checkpoint was taken).
    ``b`` as a NumPy array is scattered at every attempt; a DVector ``b`` is rebuilt from its
    recipe."""
    _validate(a, method, preconditioner, checkpoint_every, resume)
    n = a.shape[0]
    maxiter = 10 * n if maxiter is None else int(maxiter)
    options = dict(rtol=rtol, atol=atol, maxiter=maxiter, restart=restart, jacobi=preconditioner == "jacobi",
                   checkpoint_every=checkpoint_every, on_checkpoint=on_checkpoint)
    restarts = 0
    while True:
        try:
            x, info = _attempt(a, b, method, x0, resume, **options)
            break
        except DistributedError as err:
            if restarts >= int(retries):
                raise
            restarts += 1
            resume = getattr(err, "checkpoint", None) or resume
    info.restarts = restarts
    if check and not info.converged:
        raise SolveError(f"ustc.distributed.solve: {method} did not converge in {info.iterations} iterations "
                         f"(relative residual {info.relative_residual:.3g} > rtol {rtol:.1e})")
    out = x.gather() if gather else x
    return (out, info) if return_info else out


def _layout(a) -> RowBlocks:
    """How the solve's vectors are split: a DTensor's row blocks, a grid's vector layout (its
    sparse exchange planned first)."""
    if isinstance(a, GridTensor):
        a.sparse_plan()
        return a.layout
    return a.rows


def _attempt(a, b, method, x0, resume, *, rtol, atol, maxiter, restart, jacobi, checkpoint_every, on_checkpoint):
    """One SPMD solve on the (repaired) group; DistributedError with ``.checkpoint`` on a loss."""
    rt, n = a.runtime, a.shape[0]
    group = a.group                                 # repairs the group and rebuilds a after a loss
    rows = _layout(a)
    made = []
    if not isinstance(b, DVector):
        b = DVector.from_array(np.asarray(b), rows, runtime=rt)
        made.append(b)
    if b.shape != (n,):
        raise ShapeError(f"solve: b has shape {b.shape}, expected ({n},)")
    if b.partition != rows:
        raise ShapeError(f"solve: b is split as {b.partition}, the solve's vectors as {rows}")
    if resume is not None:
        x0 = resume.x
    if x0 is not None and not isinstance(x0, DVector):
        x0 = DVector.from_array(np.asarray(x0), rows, runtime=rt)
        made.append(x0)
    dtype = np.result_type(a.dtype, b.dtype, np.float32)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    offset = resume.iterations if resume is not None else 0
    state = None
    if resume is not None and resume.state:
        state = {}
        for key, value in resume.state.items():
            if isinstance(value, np.ndarray):
                part = DVector.from_array(value, rows, runtime=rt)
                made.append(part)
                state[key] = ("vec", part.name)
            else:
                state[key] = value
    x = DVector(rt, rows, rt.name("vec"), (n,), dtype)
    collector = (Collector(group, x.name, method, resume, on_checkpoint, layout=rows) if checkpoint_every else None)
    args = (a.name, b.name, x.name, x0.name if x0 is not None else None, method, dtype.str, rtol, atol,
            max(maxiter - offset, 0), restart, jacobi, n, checkpoint_every, offset, state)
    before = rt.scheduler_transitions()
    try:
        stats = group.call("solve", [args] * rows.parts, poll=collector.poll if collector else None, quiet=True)
    except DistributedError as err:
        err.checkpoint = collector.latest if collector is not None else resume
        raise
    transitions = rt.scheduler_transitions() - before
    kept = [s.pop("kept") for s in stats]
    if collector is not None:         # the last copies, which the 0.25 s pulls may have missed
        collector.take(kept)
    for v in made:
        v.free()
    info = SolveResult(method, stats, rtol, atol, transitions, offset)
    info.checkpoints = collector.count if collector is not None else 0
    return x, info
