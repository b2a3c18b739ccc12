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
only the marks are (one byte per column). A short list is insertion-sorted; a longer
one is read off the marks where it is dense in its span, else bucketed by its high
bits and insertion-sorted (:func:`sort`: power-law rows of hundreds of entries sorted
~4x faster than by the library sort).

Row-parallel kernels (:func:`chunked_rows`) split the rows into one chunk per thread,
each with its own row, with borders that give every chunk about the same *work*: a
parallel pre-pass adds up each row's work as the lowering estimates it (for SpGEMM the
products the row makes, ``sum of nnz(B[k, :]) over A[i, :]``), a prefix sum turns it into
a cumulative array, and a binary search places each border. Numba splits a ``prange``
statically (thread ``t`` runs iterations ``[t C / T, (t + 1) C / T)``), so balance has
to come from the borders, not from more chunks.

The same borders split the parallel row loop of a dense output (SpMV, SpMM: :func:`balanced_rows`)
where the cost pass finds that a row's work is one segment of a stored level under the row's own
position, segments back to back (compressed, delta): the cumulative work of the rows before ``r``
is then ``pos[r] + r`` as stored, so no pre-pass runs, only one binary search per border
(:func:`row_work` reads that fact off what the lowering's cost pass measured). Elsewhere the rows
keep a plain ``prange`` (rows of one extent each: a dense loop below them).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable

import numpy as np

from . import loopir as ir
from .names import FreshNames

CHUNKS_PER_THREAD = 1  # chunks of rows per thread: the borders balance the work (Numba's prange is static)
THREADS = "n_threads"  # the kernel parameter (role ``Kind.THREADS``) the host sets to its thread count
SHORT = 48  # rows up to this long are insertion-sorted (output rows are mostly short)
DENSE = 4   # a longer row spanning at most DENSE columns per entry is read off the marks in order
BIN = 32    # bucketed rows whose fullest bucket holds at most BIN entries are insertion-sorted


@dataclass(frozen=True)
class Workspace:
    """One dense row over output index ``index``, opened at loop ``depth``; the names of its arrays
    (``vals``, ``mark``, ``listed``; the sort's ``spare`` list and ``bins``), its entry count, the
    drain loop's slot and value, and the sort's hole, key, the list's least and greatest
    coordinate, the bucket shift, bucket count and fullest bucket."""

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
    spare: str
    bins: str
    least: str
    most: str
    shift: str
    nbins: str
    fullest: str

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
                     hole=names("ws_hole", f"ws_{index}_q"), key=names("ws_key", f"ws_{index}_key"),
                     spare=names("ws_spare", f"ws_{index}_spare"), bins=names("ws_bins", f"ws_{index}_bin"),
                     least=names("ws_least", f"ws_{index}_min"), most=names("ws_most", f"ws_{index}_max"),
                     shift=names("ws_shift", f"ws_{index}_shift"), nbins=names("ws_nbins", f"ws_{index}_bins"),
                     fullest=names("ws_fullest", f"ws_{index}_fullest"))


def allocate(ws: Workspace) -> list[ir.Stmt]:
    """The workspace's arrays: marks cleared; values, the list and the sort's arrays written
    before read (pages a pass never touches cost nothing)."""
    return [ir.Alloc(ws.vals, ws.extent, ws.dtype), ir.Alloc(ws.mark, ws.extent, "bool_", zero=True),
            ir.Alloc(ws.listed, ws.extent, "intp"), ir.Alloc(ws.spare, ws.extent, "intp"),
            ir.Alloc(ws.bins, ir.add(ws.extent, 1), "intp")]


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


def sort(array: str, count: ir.Expr, ws: Workspace) -> list[ir.Stmt]:
    """Sort ``array[0:count]`` (distinct coordinates, each marked): insertion sort up to
    :data:`SHORT` entries; a longer list spanning at most :data:`DENSE` columns per entry is
    read off the marks in order; else it is bucketed by its high bits (about one bucket per
    entry) into the spare list, which is insertion-sorted when no bucket holds more than
    :data:`BIN` entries (each entry moves within its bucket only), else library-sorted, and
    copied back."""
    t, key, lo, hi = ws.slot, ws.key, ir.Var(ws.least), ir.Var(ws.most)
    n = count
    at = ws.hole  # the next slot the dense read writes; the bucket of an entry

    def each(body: tuple[ir.Stmt, ...], start: ir.Expr = ir.Const(0)) -> ir.For:
        return ir.For(t, start, n, body)

    span = [ir.Assign(ws.least, ir.load(array, ir.Const(0))), ir.Assign(ws.most, lo),
            each((ir.Assign(key, ir.load(array, ir.Index(ir.Var(t)))),
                  ir.Assign(ws.least, ir.Call("min", (lo, ir.Var(key)))),
                  ir.Assign(ws.most, ir.Call("max", (hi, ir.Var(key))))), ir.Const(1))]
    width = ir.sub(hi, lo)
    dense = (ir.Assign(at, ir.Const(0)),
             ir.For(key, lo, ir.add(hi, 1), (
                 ir.If(ir.load(ws.mark, ir.Index(ir.Var(key))),
                       (ir.Store(array, (ir.Index(ir.Var(at)),), ir.Var(key)), ir.Assign(at, ir.Const(1), "+"))),)))

    def bucket(x: ir.Expr) -> ir.Expr:
        return ir.Bin(">>", ir.sub(x, lo), ir.Var(ws.shift))

    bins, nbins = ws.bins, ir.Var(ws.nbins)
    spread = (ir.Assign(ws.shift, ir.Const(0)),
              ir.While(ir.Bin(">=", bucket(hi), n), (ir.Assign(ws.shift, ir.Const(1), "+"),)),
              ir.Assign(ws.nbins, ir.add(bucket(hi), 1)),
              ir.For(t, ir.Const(0), ir.add(nbins, 1), (ir.Store(bins, (ir.Index(ir.Var(t)),), ir.Const(0)),)),
              each((ir.Store(bins, (ir.Index(ir.add(bucket(ir.load(array, ir.Index(ir.Var(t)))), 1)),),
                             ir.Const(1), accumulate=True),)),
              ir.Assign(ws.fullest, ir.Const(0)),
              ir.For(t, ir.Const(0), nbins, (
                  ir.Assign(ws.fullest, ir.Call("max", (ir.Var(ws.fullest), ir.load(bins, ir.Index(ir.add(ir.Var(t), 1)))))),
                  ir.Store(bins, (ir.Index(ir.add(ir.Var(t), 1)),), ir.load(bins, ir.Index(ir.Var(t))), accumulate=True))),
              each((ir.Assign(key, ir.load(array, ir.Index(ir.Var(t)))), ir.Assign(at, bucket(ir.Var(key))),
                    ir.Store(ws.spare, (ir.Index(ir.load(bins, ir.Index(ir.Var(at)))),), ir.Var(key)),
                    ir.Store(bins, (ir.Index(ir.Var(at)),), ir.Const(1), accumulate=True))),
              ir.If(ir.Bin("<=", ir.Var(ws.fullest), ir.Const(BIN)), (insertion(ws.spare, n, ws),),
                    (ir.Sort(ws.spare, ir.Const(0), n),)),
              each((ir.Store(array, (ir.Index(ir.Var(t)),), ir.load(ws.spare, ir.Index(ir.Var(t)))),)))
    longer = [ir.Comment("a long row: read off the marks when dense in its span, else bucketed by high bits"),
              *span, ir.If(ir.lt(width, ir.mul(n, DENSE)), dense, spread)]
    return [ir.If(ir.Bin("<=", n, ir.Const(SHORT)), (insertion(array, n, ws),), tuple(longer))]


def insertion(array: str, count: ir.Expr, ws: Workspace) -> ir.For:
    """Insertion sort of ``array[0:count]``."""
    p, q, key = ws.slot, ws.hole, ws.key
    shift = ir.While(ir.conj([ir.Bin(">=", ir.Var(q), ir.Const(0)),
                              ir.Bin(">", ir.Load(array, (ir.Index(ir.Var(q)),)), ir.Var(key))]),
                     (ir.Store(array, (ir.Index(ir.add(ir.Var(q), 1)),), ir.Load(array, (ir.Index(ir.Var(q)),))),
                      ir.Assign(q, ir.sub(ir.Var(q), 1))))
    return ir.For(p, ir.Const(1), count, (ir.Assign(key, ir.Load(array, (ir.Index(ir.Var(p)),))),
                                          ir.Assign(q, ir.sub(ir.Var(p), 1)), shift,
                                          ir.Store(array, (ir.Index(ir.add(ir.Var(q), 1)),), ir.Var(key))))


def weight(names: FreshNames, var: str) -> str:
    """The variable the work estimate of one iteration of the chunked loop over ``var`` adds up in
    (the lowering's cost pass writes it; :func:`chunked_rows` starts it at 1 per row)."""
    return names("ws_weight", f"{var}_w")


def chunked_rows(ws: Workspace, names: FreshNames, var: str, start: ir.Expr, stop: ir.Expr,
                 body: tuple[ir.Stmt, ...], work: tuple[ir.Stmt, ...]) -> list[ir.Stmt]:
    """``for var in range(start, stop)`` run in parallel as :data:`CHUNKS_PER_THREAD` chunks per
    thread (the :data:`THREADS` parameter), each with its own workspace, their borders balancing
    the work: ``work`` adds one iteration's estimated cost to :func:`weight` (the lowering's cost
    pass over the loops below ``var``), a parallel pre-pass stores it per row, a prefix sum makes
    it cumulative and a binary search finds each border. One chunk (one thread, the serial twin)
    skips the pre-pass. Chunks may be empty (one row heavier than a chunk's share)."""
    rows, chunks = names("ws_rows", f"{var}_rows"), names("ws_chunks", f"{var}_chunks")
    chunk, border = names("ws_chunk", f"{var}_chunk"), names("ws_border", f"{var}_border")
    cumulative, w, r = names("ws_work", f"{var}_work"), weight(names, var), names("ws_step", f"{var}_r")
    n, c = ir.Var(rows), ir.Var(chunks)

    each_row = ir.For(var, start, stop, (ir.Assign(w, ir.Const(1)), *work,
                                         ir.Store(cumulative, (ir.Index(ir.add(ir.sub(ir.Var(var), start), 1)),),
                                                  ir.Var(w))), parallel=True)
    prefix = ir.For(r, ir.Const(0), n, (ir.Store(cumulative, (ir.Index(ir.add(ir.Var(r), 1)),),
                                                 _at(cumulative, ir.Var(r)), accumulate=True),))
    borders = _borders(names, var, n, c, border, lambda k: _at(cumulative, k), ir.Const(0), _at(cumulative, n))
    balance = ir.If(ir.Bin(">", c, ir.Const(1)), (
        ir.Comment(f"each row's work, summed up: {border}[c] is where chunk c's even share starts"),
        ir.Alloc(cumulative, ir.add(n, 1), "intp"), ir.Store(cumulative, (ir.Const(0),), ir.Const(0)),
        each_row, prefix, borders))
    inner = (*allocate(ws), ir.For(var, ir.add(start, _at(border, ir.Var(chunk))),
                                   ir.add(start, _at(border, ir.add(ir.Var(chunk), 1))), body))
    return _split(names, var, start, stop, balance, inner)


@dataclass(frozen=True)
class RowWork:
    """The work of a dense output's parallel row loop over ``var``, as stored: ``before(r)`` is the
    work of the loop's rows before row ``r`` plus a constant (``np.intp(A_lvl1_pos[r]) + r``: each
    row's entries and 1), for every ``r`` of the loop's range and one past it; ``source`` names the
    buffer it reads."""

    var: str
    before: Callable[[ir.Expr], ir.Expr]
    source: str
    segment: Callable[[ir.Expr], tuple[ir.Expr, ir.Expr]] | None = None  # row r's [start, stop) positions


def row_work(var: str, tallied: list[tuple]) -> RowWork | None:
    """The stored work of the row loop over ``var``, from what the lowering's cost pass measured
    (``tallied``: per loop it reached below the row, the cursors whose segments it added up, ``()``
    for a dense loop), or None. Stored when that pass reached one loop, over one stored level's
    segment of the row's own position (the row's position is ``var``), and that level's segments
    lie back to back: segment ``r`` ends where segment ``r + 1`` starts, as the level type's own
    segment hook writes them (compressed and delta levels; not loose_compressed's pairs)."""
    if len(tallied) != 1 or len(tallied[0]) != 1:
        return None
    cursor = tallied[0][0]
    row = ir.Var(var)
    if cursor.parent != row or cursor.parent_end is not None or cursor.ref.ltype.one_child:
        return None
    ltype, access = cursor.ref.ltype, cursor.access
    if ltype.segment(access, ir.add(row, 1), None)[0] != ltype.segment(access, row, None)[1]:
        return None
    return RowWork(var, lambda r: ir.add(ltype.segment(access, r, None)[0], r), access.pos,
                   lambda r: ltype.segment(access, r, None))


def balanced_rows(body: list[ir.Stmt], work: RowWork, names: FreshNames) -> list[ir.Stmt]:
    """``body`` with its outermost parallel loop over ``work.var`` split into one chunk per thread
    (the :data:`THREADS` parameter) of about equal work: each border is a binary search of the
    stored cumulative work (:class:`RowWork`), no pre-pass. Numba would hand every thread the same
    number of rows, however long (a power-law graph's rows run from 1 entry to 10^5). ``body``
    unchanged when it has no such loop."""
    for k, s in enumerate(body):
        if isinstance(s, ir.For) and s.parallel and s.var == work.var and s.step == 1:
            return body[:k] + _balanced(s, work, names) + body[k + 1:]
    return body


def _balanced(loop: ir.For, work: RowWork, names: FreshNames) -> list[ir.Stmt]:
    var, start = loop.var, loop.start
    rows, chunks = names("ws_rows", f"{var}_rows"), names("ws_chunks", f"{var}_chunks")
    chunk, border = names("ws_chunk", f"{var}_chunk"), names("ws_border", f"{var}_border")
    first, total = names("ws_first", f"{var}_first"), names("ws_total", f"{var}_total")
    n, c = ir.Var(rows), ir.Var(chunks)
    borders = _borders(names, var, n, c, border, lambda k: work.before(ir.add(start, k)), ir.Var(first), ir.Var(total))
    balance = ir.If(ir.Bin(">", c, ir.Const(1)), (
        ir.Comment(f"a row's work is its entries and 1: {work.source}[r] + r is the work before row r, "
                   f"{border}[c] where chunk c's even share starts"),
        ir.Assign(first, work.before(start)),
        ir.Assign(total, ir.sub(work.before(ir.add(start, n)), ir.Var(first))),
        borders))
    first_row = ir.add(start, _at(border, ir.Var(chunk)))
    rows_loop = ir.For(var, first_row, ir.add(start, _at(border, ir.add(ir.Var(chunk), 1))), loop.body)
    return _split(names, var, start, loop.stop, balance, _carried(rows_loop, work, first_row, names))


def _carried(loop: ir.For, work: RowWork, first_row: ir.Expr, names: FreshNames) -> tuple[ir.Stmt, ...]:
    """A chunk's rows run in order, and each row's segment starts where the previous one ended
    (:func:`row_work`'s fact): the segment's bounds are carried from row to row, one ``pos``
    load a row instead of two (serial CSR SpMV measured 13.2 -> 9.3 us on 4,096 stencil rows,
    1.32 -> 1.08 ms on 216,000). ``loop`` unchanged when its body reads no such bound."""
    if work.segment is None:
        return (loop,)
    row = ir.Var(loop.var)
    begin, end = names("ws_begin", f"{loop.var}_begin"), names("ws_end", f"{loop.var}_end")
    lo, hi = work.segment(row)
    body = substitute(loop.body, {lo: ir.Var(begin), hi: ir.Var(end)})
    if body == loop.body:
        return (loop,)
    step = (ir.Assign(begin, ir.Var(end)), ir.Assign(end, hi))
    return ir.Assign(end, work.segment(first_row)[0]), replace(loop, body=step + body)


def substitute(body: tuple[ir.Stmt, ...], mapping: dict) -> tuple[ir.Stmt, ...]:
    """``body`` with every expression equal to a key of ``mapping`` replaced by its value."""
    def expr(e):
        if e in mapping:
            return mapping[e]
        changes = {f.name: _sub(getattr(e, f.name)) for f in fields(e)}
        return replace(e, **changes)

    def _sub(value):
        if isinstance(value, ir.Expr):
            return expr(value)
        if isinstance(value, ir.Stmt):
            return stmt(value)
        if isinstance(value, tuple):
            return tuple(_sub(v) for v in value)
        return value

    def stmt(s):
        return replace(s, **{f.name: _sub(getattr(s, f.name)) for f in fields(s)})

    return tuple(stmt(s) for s in body)


def _at(array: str, k: ir.Expr) -> ir.Load:
    return ir.load(array, ir.Index(k))


def _split(names: FreshNames, var: str, start: ir.Expr, stop: ir.Expr, balance: ir.Stmt,
           inner: tuple[ir.Stmt, ...]) -> list[ir.Stmt]:
    """The rows ``[start, stop)`` as chunks run in parallel: ``balance`` sets their borders (else
    equal counts of rows: only one chunk, or none), each chunk runs ``inner``."""
    rows, chunks = names("ws_rows", f"{var}_rows"), names("ws_chunks", f"{var}_chunks")
    chunk, border = names("ws_chunk", f"{var}_chunk"), names("ws_border", f"{var}_border")
    n, c = ir.Var(rows), ir.Var(chunks)
    per = ir.mul(ir.Var(THREADS), CHUNKS_PER_THREAD)  # a parameter: Numba caches no kernel calling get_num_threads
    return [ir.Assign(rows, ir.Call("max", (ir.sub(stop, start), ir.Const(0)))),
            ir.Assign(chunks, ir.Call("min", (n, per))),
            ir.Alloc(border, ir.add(c, 1), "intp"),
            ir.Store(border, (ir.Const(0),), ir.Const(0)), ir.Store(border, (ir.Index(c),), n),
            balance,
            ir.For(chunk, ir.Const(0), c, inner, parallel=True)]


def _borders(names: FreshNames, var: str, n: ir.Expr, c: ir.Expr, border: str,
             before: Callable[[ir.Expr], ir.Expr], first: ir.Expr, total: ir.Expr) -> ir.For:
    """``border[k]`` for chunks ``k`` in ``[1, c)``: the first row ``r`` (of ``n``, counted from the
    loop's start) whose ``before(r)`` reaches ``first + total * k // c``, by binary search from the
    previous border (``before`` grows with ``r``)."""
    goal, lo, hi, mid = (names(f"ws_{role}", f"{var}_{role}") for role in ("goal", "lo", "hi", "mid"))
    chunk = names("ws_chunk", f"{var}_chunk")
    search = ir.While(ir.lt(ir.Var(lo), ir.Var(hi)), (
        ir.Assign(mid, ir.Bin(">>", ir.add(ir.Var(lo), ir.Var(hi)), ir.Const(1))),
        ir.If(ir.lt(before(ir.Var(mid)), ir.Var(goal)), (ir.Assign(lo, ir.add(ir.Var(mid), 1)),),
              (ir.Assign(hi, ir.Var(mid)),))))
    return ir.For(chunk, ir.Const(1), c, (
        ir.Assign(goal, ir.add(first, ir.Bin("//", ir.mul(total, ir.Var(chunk)), c))),
        ir.Assign(lo, _at(border, ir.sub(ir.Var(chunk), 1))), ir.Assign(hi, n), search,
        ir.Store(border, (ir.Index(ir.Var(chunk)),), ir.Var(lo))))
