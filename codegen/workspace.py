"""Workspaces: a reduction into a sparse output gathered in a dense row before it is written.

``C[i, j] = A[i, k] * B[k, j]`` walked ``i, k, j`` (the order the operands' levels
ask for) meets each output entry ``(i, j)`` once per ``k``. Written as it comes,
every partial product is an output entry that the host must sort and fold (SpGEMM
on a 64,000-row stencil took 19 s into DCSR that way). A workspace (TACO's
``precompute``, MLIR's expand / compress) is one dense row over the output's last
index, opened when the outer output indices are bound:

* each product folds into ``vals[j]``; the first touch marks ``j`` and lists it;
* when the reduction loops end, the listed coordinates are sorted (filling passes
  only: a count needs no order) and drained: each ``(i, j)`` is stored once, through
  the writer or the row kernel, and its mark cleared for the next row.

The first touch stores rather than folds, so the values row is never zero-filled;
only the marks are (one byte per column). Row-parallel kernels give every chunk of
rows its own row (:func:`chunked_rows`), a few chunks per thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import loopir as ir
from .names import FreshNames

CHUNKS_PER_THREAD = 8  # chunks of rows per thread in a row-parallel kernel: balance vs. row allocations
THREADS = "n_threads"  # the kernel parameter (role ``("threads",)``) the host sets to its thread count


@dataclass(frozen=True)
class Workspace:
    """One dense row over output index ``index``, opened at loop ``depth``; the names of its arrays
    (``vals``, ``mark``, ``listed``), its entry count, the drain loop's slot and value, and the
    insertion sort's hole and key."""

    index: str
    depth: int
    extent: ir.Expr
    dtype: str
    vals: str
    mark: str
    listed: str
    count: str
    slot: str
    value: str
    hole: str
    key: str

    def __post_init__(self):
        if self.depth < 0:
            raise ValueError(f"a workspace opens at a loop depth >= 0, not {self.depth}")


def placement(lhs: tuple[str, ...], order: tuple[str, ...], derived) -> tuple[str, int] | None:
    """``(index, depth)`` of the workspace a sparse output ``lhs`` walked in ``order`` needs, or None:
    its last output index in ``order`` comes after some reduction index, and every other output
    index comes before the first reduction index (then they are bound at ``depth``)."""
    if not lhs or any(v in derived or v not in order for v in lhs):
        return None
    last = max(lhs, key=order.index)
    first = next((d for d, v in enumerate(order) if v not in lhs), None)
    if first is None or first > order.index(last):
        return None
    if any(order.index(v) > first for v in lhs if v != last):
        return None
    return last, first


def make(index: str, depth: int, extent: ir.Expr, dtype: np.dtype, names: FreshNames) -> Workspace:
    """A workspace over ``index`` with fresh names derived from it (``ws_j_vals``, ...)."""
    name = np.dtype(dtype).name
    return Workspace(index, depth, extent, "bool_" if name == "bool" else name,
                     vals=names("ws_vals", f"ws_{index}_vals"), mark=names("ws_mark", f"ws_{index}_mark"),
                     listed=names("ws_listed", f"ws_{index}_list"), count=names("ws_count", f"ws_{index}_n"),
                     slot=names("ws_slot", f"ws_{index}_t"), value=names("ws_value", f"ws_{index}_v"),
                     hole=names("ws_hole", f"ws_{index}_q"), key=names("ws_key", f"ws_{index}_key"))


def allocate(ws: Workspace) -> list[ir.Stmt]:
    """The workspace's arrays: marks cleared; values and the list written before read."""
    return [ir.Alloc(ws.vals, ws.extent, ws.dtype), ir.Alloc(ws.mark, ws.extent, "bool_", zero=True),
            ir.Alloc(ws.listed, ws.extent, "intp")]


def fold(ws: Workspace, value: ir.Expr, op: str, counted: bool) -> list[ir.Stmt]:
    """Fold ``value`` into the entry at the current ``index`` (``op``: the reduction's fold). Unless
    ``counted`` (the count decides on values: zeros are not stored), a counting pass (``emit`` 0)
    only marks and lists."""
    at = (ir.Index(ir.Var(ws.index)),)

    def when(stmt: ir.Stmt) -> ir.Stmt:
        return stmt if counted else ir.If(ir.Var("emit"), (stmt,))

    first = (ir.Store(ws.mark, at, ir.Const(True)),
             ir.Store(ws.listed, (ir.Index(ir.Var(ws.count)),), ir.Var(ws.index)),
             ir.Assign(ws.count, ir.Const(1), "+"),
             when(ir.Store(ws.vals, at, value)))
    again = when(ir.Store(ws.vals, at, value, accumulate=True, op=op))
    return [ir.If(ir.Load(ws.mark, at), (again,), first)]


def opened(ws: Workspace, loops: list[ir.Stmt], store: list[ir.Stmt]) -> list[ir.Stmt]:
    """``loops`` (the reduction, folding into the workspace) then the drain: the listed coordinates
    sorted in filling passes, each stored once by ``store`` (which reads ``index`` and ``value``)."""
    j = ir.Var(ws.index)
    drain = (ir.Assign(ws.index, ir.Load(ws.listed, (ir.Index(ir.Var(ws.slot)),))),
             ir.Assign(ws.value, ir.Load(ws.vals, (ir.Index(j),))),
             ir.Store(ws.mark, (ir.Index(j),), ir.Const(False)),
             *store)
    return [ir.Assign(ws.count, ir.Const(0)), *loops,
            ir.If(ir.Var("emit"), tuple(sort(ws.listed, ir.Var(ws.count), ws))),
            ir.For(ws.slot, ir.Const(0), ir.Var(ws.count), drain)]


SHORT = 48  # rows up to this long are insertion-sorted (output rows are mostly short)


def sort(array: str, count: ir.Expr, ws: Workspace) -> list[ir.Stmt]:
    """Sort ``array[0:count]``: insertion sort for a short row, the library's sort otherwise."""
    p, q, key = ws.slot, ws.hole, ws.key
    shift = ir.While(ir.conj([ir.Bin(">=", ir.Var(q), ir.Const(0)),
                              ir.Bin(">", ir.Load(array, (ir.Index(ir.Var(q)),)), ir.Var(key))]),
                     (ir.Store(array, (ir.Index(ir.add(ir.Var(q), 1)),), ir.Load(array, (ir.Index(ir.Var(q)),))),
                      ir.Assign(q, ir.sub(ir.Var(q), 1))))
    insertion = ir.For(p, ir.Const(1), count, (ir.Assign(key, ir.Load(array, (ir.Index(ir.Var(p)),))),
                                               ir.Assign(q, ir.sub(ir.Var(p), 1)), shift,
                                               ir.Store(array, (ir.Index(ir.add(ir.Var(q), 1)),), ir.Var(key))))
    return [ir.If(ir.Bin("<=", count, ir.Const(SHORT)), (insertion,), (ir.Sort(array, ir.Const(0), count),))]


def chunked_rows(ws: Workspace, names: FreshNames, var: str, start: ir.Expr, stop: ir.Expr,
                 body: tuple[ir.Stmt, ...]) -> list[ir.Stmt]:
    """``for var in range(start, stop)`` run in parallel as a few chunks of rows per thread (the
    :data:`THREADS` parameter), each chunk with its own workspace."""
    rows, chunks = names("ws_rows", f"{var}_rows"), names("ws_chunks", f"{var}_chunks")
    chunk = names("ws_chunk", f"{var}_chunk")
    lo, hi = names("ws_lo", f"{var}_lo"), names("ws_hi", f"{var}_hi")
    n, c = ir.Var(rows), ir.Var(chunks)
    per = ir.mul(ir.Var(THREADS), CHUNKS_PER_THREAD)  # a parameter: Numba caches no kernel calling get_num_threads

    def border(k: ir.Expr) -> ir.Expr:
        return ir.add(start, ir.Bin("//", ir.mul(n, k), c))

    inner = (ir.Assign(lo, border(ir.Var(chunk))), ir.Assign(hi, border(ir.add(ir.Var(chunk), 1))),
             *allocate(ws), ir.For(var, ir.Var(lo), ir.Var(hi), body))
    return [ir.Assign(rows, ir.Call("max", (ir.sub(stop, start), ir.Const(0)))),
            ir.Assign(chunks, ir.Call("min", (n, per))),
            ir.For(chunk, ir.Const(0), c, inner, parallel=True)]
