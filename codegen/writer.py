"""The write side: a sparse output written by the kernel in its own format.

Each level of the output is written by one of three strategies, chosen from
the loop order and the level expressions (:func:`write_strategies`):

* ``LOCATE`` (dense, batch, range levels): the position is computed from the
  parent's, nothing is written;
* ``APPEND``: the walk meets the level's coordinates in lexicographic order of
  the levels down to it, so each entry is appended through the level type's
  ``insert`` hook (compressed and delta levels append, singletons store at
  their parent's position) — MLIR's ordered ``sparse_tensor.insert`` lowering,
  TACO's append assembly;
* ``WORKSPACE``: the walk meets each parent's entries together but their
  coordinates in any order (a BSR block row's block columns from the rows of a
  CSR matrix, DIA diagonals from any row walk): the level type's
  ``workspace_insert`` hook counts distinct coordinates through a workspace,
  collects them, sorts each parent's segment and places every entry (TACO's
  insert with an attribute query). Only locate levels lie below it.

An APPEND level that ``collects`` (structured n:m: an entry's slot depends on
how many its block holds) is written in three passes too: count (refusals),
collect each parent's coordinates, then, once ``finalize`` has placed them,
find each entry's position.

The same code runs in every pass: a counting pass (``emit`` 0: only the
insertion state advances), the host sizes the buffers from the counts (and
refuses them past the memory budget before allocating), a filling pass
(``emit`` 1); a format with a workspace level runs a collecting pass (1) then
the filling pass (2). No coordinate list is sorted on the host. Entries whose
value is zero are not stored (sums that cancel, explicit zeros of a source),
as the host assembler does — except under a semiring other than plus-times,
where the output's pattern is structural (a min-plus distance of 0 is an entry).

**Chunks in parallel** (:meth:`Writer.chunked_range`, :meth:`~Writer.chunked_positions`,
:meth:`~Writer.chunked_walk`). When the output's first level pins the walk's
outermost index (``i`` or ``i floordiv c`` of a walk over ``i``: COO, DCSR, CSF,
BSR, batched formats) and every iterated level can be written in pieces (the
level types' ``split_append``), the lowering hands the outermost loop to the
writer, which splits it into chunks run by ``prange``: each chunk is a range of
the loop (borders moved to the start of a block of ``c`` rows, or of a run of
equal coordinates, so no output parent spans two chunks) with its own insertion
state and workspaces. The counting pass leaves one row of level counts per chunk
in ``counts`` (a table of ``len(counts)`` rows the host sizes); the host turns
the rows into each chunk's starting positions (a prefix over chunks) and every
later pass starts each chunk there, so the chunks write disjoint ranges that
together are exactly the serial result. The root's ``pos`` (the only parent
every chunk shares) is set by the level's ``finalize``. The plan records the
fact as ``split``.

**On the CUDA target** (``optimize.Tuning.gpu_writer``) the same chunks are spread
over GPU threads, one each (``cuda_schedule.writes_chunks``); the table of counts
has as many rows as the host gives it (``ustc.ops.cuda_host.writer_chunks``). Only
split writers run there: the lowering drops a writer that keeps a workspace level
(kernel-local ``Alloc`` and ``Sort``), a level that ``collects`` (its refusals are
settled by a serial loop after the chunks) or that does not split, and lowers the
statement onto coordinate lists instead; the chunk loop then ends the kernel.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Callable

from ustc.format import expr as fx
from ustc.format.ir import TensorFormat
from ustc.format.levels.base import LevelType, LevelWrite, signed

from . import loopir as ir
from .names import FreshNames, buffer_name
from .roles import Kind, Role
from .space import rename, to_loop


class Strategy(enum.Enum):
    """How the writer fills one level (module docstring)."""

    LOCATE = "locate"
    APPEND = "append"
    WORKSPACE = "workspace"


def write_strategies(fmt: TensorFormat | None, indices: tuple[str, ...],
                     order: tuple[str, ...]) -> tuple[Strategy, ...] | None:
    """Each level's strategy when output ``fmt`` (read as ``C[indices]``) is written by a walk
    whose loops run in ``order`` (the output indices outermost), or None when some level cannot
    be written by that walk (then the output is assembled from coordinate lists)."""
    if fmt is None or set(order[:len(indices)]) != set(indices):
        return None
    names = {d.name: i for d, i in zip(fmt.dims, indices)}
    levels, out = fmt.levels, []
    walk = _Walk(tuple(order))
    for k, lv in enumerate(levels):
        in_order = walk.in_order and walk.step(lv.expr, names)
        if lv.type.locate:
            out.append(Strategy.LOCATE)
        elif in_order and lv.type.append and not (lv.type.one_child and k and levels[k - 1].type.unique):
            out.append(Strategy.APPEND)  # (a singleton below a unique level has one slot per row)
        elif walk.in_order and lv.type.workspace and all(below.type.locate for below in levels[k + 1:]):
            out.append(Strategy.WORKSPACE)
        else:
            return None
        walk.in_order = in_order
    return tuple(out)


def walked_indices(order: tuple[str, ...], derived: dict, loopvars: dict) -> tuple[str, ...]:
    """The walk ``order`` (loop variables) in terms of the indices it walks: an index derived as
    ``c * a + b`` (``derived``: name -> ``space.Derived``) from the adjacent loops ``a`` then
    ``b``, ``b`` a ``mod c`` level's variable (in ``[0, c)``: ``loopvars``' modulus), stands in
    their place, as their lexicographic order is its ascending order (an n:m operand's
    ``j floordiv m``, ``j mod m`` loops walk ``j``). Other loops are left as they are."""
    first = {}
    for name, d in derived.items():
        e = d.expr
        if isinstance(e, fx.Add) and isinstance(e.left, fx.Mul) and isinstance(e.left.operand, fx.Dimension) \
                and isinstance(e.right, fx.Dimension) and e.right.name in loopvars \
                and loopvars[e.right.name].modulus == e.left.factor > 0:
            first[e.left.operand.name] = (name, e.right.name)
    out, k = [], 0
    while k < len(order):
        pair = first.get(order[k])
        if pair is not None and k + 1 < len(order) and order[k + 1] == pair[1]:
            out.append(pair[0])
            k += 2
        else:
            out.append(order[k])
            k += 1
    return tuple(out)


def write_passes(fmt: TensorFormat, strategies: tuple[Strategy, ...]) -> int:
    """How many times the kernel runs to write ``fmt`` by ``strategies``: 3 with a workspace
    level or one that ``collects`` (count, collect, fill), else 2 (count, fill)."""
    return 3 if Strategy.WORKSPACE in strategies or any(lv.type.collects for lv in fmt.levels) else 2


def own_walk_strategies(fmt: TensorFormat, indices: tuple[str, ...]) -> tuple[Strategy, ...] | None:
    """:func:`write_strategies` for the walk ``fmt`` asks for: :func:`_leading` order, then the
    other indices (a conversion's walk, ``B[...] = A[...]``)."""
    order = _leading(fmt, indices)
    return write_strategies(fmt, indices, order + tuple(i for i in indices if i not in order))


def output_order(fmt: TensorFormat | None, indices: tuple[str, ...]) -> tuple[str, ...]:
    """The walk order in which ``fmt`` can be written, as far as its levels decide it: the indices
    of its leading levels over one index each, in level order (``(i, j)`` for CSR and BSR; none
    for DIA, whose first level spans two); empty when no such walk writes it."""
    if fmt is None or own_walk_strategies(fmt, indices) is None:
        return ()
    return _leading(fmt, indices)


def _leading(fmt: TensorFormat, indices: tuple[str, ...]) -> tuple[str, ...]:
    """The indices of ``fmt``'s leading single-index levels, in level order, each once."""
    names = {d.name: i for d, i in zip(fmt.dims, indices)}
    order: list[str] = []
    for lv in fmt.levels:
        var = _single_index(lv.expr)
        if var is None:
            break
        if names[var] not in order:
            order.append(names[var])
    return tuple(order)


def _single_index(e: fx.Expr) -> str | None:
    """The dimension ``e`` is a non-decreasing function of on its own (``i``, ``i floordiv c``,
    ``c * i``, ``i mod c``, which is within a block), else None."""
    if isinstance(e, fx.Dimension):
        return e.name
    if isinstance(e, (fx.FloorDiv, fx.Mod, fx.Mul)) and isinstance(e.operand, fx.Dimension):
        return e.operand.name
    return None


class _Walk:
    """Whether the levels seen so far meet their coordinate tuples in lexicographic order along a
    walk in ``order``: a level over one index keeps the order when every loop outside that index's
    is pinned by a level above (``i`` or ``c * i`` pins ``i``; ``i floordiv c`` does not, and a
    later ``i mod c`` completes it)."""

    def __init__(self, order: tuple[str, ...]):
        self.order = order
        self.pinned: set[str] = set()
        self.divided: set[tuple[str, int]] = set()
        self.in_order = True

    def step(self, e: fx.Expr, names: dict[str, str]) -> bool:
        var = _single_index(e)
        if var is None:
            return False
        index = names[var]
        if index not in self.order or not set(self.order[:self.order.index(index)]) <= self.pinned:
            return False
        if isinstance(e, fx.FloorDiv):
            self.divided.add((index, e.constant))
        elif isinstance(e, fx.Mod):
            if (index, e.constant) not in self.divided:
                return False
            self.pinned.add(index)
        else:
            self.pinned.add(index)
        return True


@dataclass(frozen=True)
class WrittenLevel:
    """One output level: its type, strategy, coordinate (over the kernel's indices) and names."""

    ltype: LevelType
    strategy: Strategy
    coordinate: ir.Expr
    names: LevelWrite


@dataclass(frozen=True)
class Chunking:
    """How a writer may split the walk: its outermost loop ``index``, chunk borders kept at
    multiples of ``align`` (the block rows of ``index floordiv align`` levels)."""

    index: str
    align: int


class Writer:
    """Loop IR that inserts the entries of output ``tensor`` (format ``fmt``) level by level."""

    def __init__(self, tensor: str, fmt: TensorFormat, indices: tuple[str, ...], strategies: tuple[Strategy, ...],
                 names: FreshNames, emit: ir.Expr, extents: dict[str, ir.Expr], order: tuple[str, ...] = (),
                 parallel: bool = False):
        """``indices``: the statement's output indices; ``extents``: each index's extent (a level
        over a plain index locates with it; other levels' sizes and origins are parameters);
        ``order``: the walk's loop order; ``parallel``: the lowering allows chunks in parallel."""
        self.tensor, self.names, self.emit = tensor, names, emit
        self.vals = buffer_name(tensor, "vals")
        self.counts = buffer_name(tensor, "counts")
        self.passes = write_passes(fmt, strategies)
        self.last_pass = ir.eq(emit, 2) if self.passes == 3 else emit
        by_dim = {d.name: i for d, i in zip(fmt.dims, indices)}
        below = fmt.levels[1:] + (None,)  # each level's child level (None for the last)
        self.levels = tuple(self._level(k, lv, strategy, by_dim, extents, bool(child and child.type.one_child))
                            for k, (lv, strategy, child) in enumerate(zip(fmt.levels, strategies, below)))
        self.chunking = _chunking(fmt, by_dim, self.levels, tuple(order)) if parallel else None
        self.split = False  # set once the lowering has handed the writer its outermost loop

    def _level(self, k: int, lv, strategy: Strategy, indices: dict[str, str], extents,
               coo_region: bool) -> WrittenLevel:
        """Level ``k`` (``indices``: the format's dimension -> the statement's index; ``coo_region``:
        the next level holds one child per parent position, a singleton)."""
        t, fresh = self.tensor, self.names
        if isinstance(lv.expr, fx.Dimension):
            size, lo = extents[indices[lv.expr.name]], ir.Const(0)
        else:
            size = ir.Var(buffer_name(t, "size", k))
            lo = ir.Var(buffer_name(t, "lo", k)) if isinstance(lv.expr, (fx.Sub, fx.Add)) else ir.Const(0)
        work = buffer_name(t, "work", k) if strategy is Strategy.WORKSPACE else ""
        names = LevelWrite(pos=buffer_name(t, "pos", k), crd=buffer_name(t, "crd", k), size=size, lo=lo,
                           count=fresh(("write_count", k), f"{t}_n{k}"),
                           last_parent=fresh(("write_parent", k), f"{t}_last_p{k}"),
                           last_coord=fresh(("write_coord", k), f"{t}_last_c{k}"),
                           scratch=fresh(("write_gap", k), f"{t}_gap{k}"), emit=self.emit,
                           last_pass=self.last_pass, work=work, root=k == 0,
                           hole=fresh(("write_hole", k), f"{t}_hole{k}") if work else "",
                           key=fresh(("write_key", k), f"{t}_key{k}") if work else "",
                           coo_region=coo_region)
        return WrittenLevel(lv.type, strategy, to_loop(rename(lv.expr, indices)), names)

    @property
    def params(self) -> list[ir.Param]:
        """The output's buffers as kernel parameters (roles ``out_level``, ``out_size``, ``out_lo``,
        ``out_work``, ``out_vals``, ``out_counts``)."""
        out = []
        for k, lv in enumerate(self.levels):
            for buf in lv.ltype.buffers:
                out.append(ir.Param(buffer_name(self.tensor, buf, k), Role(Kind.OUT_LEVEL, self.tensor, k, buffer=buf)))
            for kind, buf, expr in ((Kind.OUT_SIZE, "size", lv.names.size), (Kind.OUT_LO, "lo", lv.names.lo)):
                if isinstance(expr, ir.Var) and expr.name == buffer_name(self.tensor, buf, k):
                    out.append(ir.Param(expr.name, Role(kind, self.tensor, k)))
            if lv.names.work and not self.split:  # a split writer allocates one per chunk
                out.append(ir.Param(lv.names.work, Role(Kind.OUT_WORK, self.tensor, k)))
        out.append(ir.Param(self.vals, Role(Kind.OUT_VALS, self.tensor)))
        out.append(ir.Param(self.counts, Role(Kind.OUT_COUNTS, self.tensor)))
        return out

    def reserved(self) -> set[str]:
        return {p.name for p in self.params}

    # -- loop IR ------------------------------------------------------------------------
    def init(self) -> list[ir.Stmt]:
        """Empty insertion state: no positions yet, no last parent."""
        out: list[ir.Stmt] = []
        for lv in self.levels:
            if lv.strategy is Strategy.LOCATE:
                continue
            w = lv.names
            out += [ir.Assign(w.count, ir.Const(0)), ir.Assign(w.last_parent, ir.Const(-1)),
                    ir.Assign(w.last_coord, ir.Const(0))]
        return out

    def insert(self, value: ir.Expr, skip_zeros: bool = True) -> list[ir.Stmt]:
        """Insert the entry at the current output coordinates with ``value`` (zeros are skipped
        unless ``skip_zeros`` is False)."""
        v = self.names("write_value", f"{self.tensor}_v")
        steps: list[ir.Stmt] = []
        p: ir.Expr = ir.Const(0)
        for k, lv in enumerate(self.levels):
            c = self._coordinate(k, lv, steps)
            hook = lv.ltype.workspace_insert if lv.strategy is Strategy.WORKSPACE else lv.ltype.insert
            code, q = hook(lv.names, p, c)
            steps += code
            if not isinstance(q, (ir.Var, ir.Const)):
                name = self.names(("write_position", k), f"{self.tensor}_q{k}")
                steps.append(ir.Assign(name, q))
                q = ir.Var(name)
            p = q
        steps.append(ir.If(self.last_pass, (ir.Store(self.vals, (ir.Index(p),), ir.Var(v)),)))
        if not skip_zeros:
            return [ir.Assign(v, value), *steps]
        return [ir.Assign(v, value), ir.If(ir.Bin("!=", ir.Var(v), ir.Const(0)), tuple(steps))]

    def _coordinate(self, k: int, lv: WrittenLevel, steps: list[ir.Stmt]) -> ir.Expr:
        """The level's coordinate: an index as it is, an expression of indices in a local."""
        if isinstance(lv.coordinate, ir.Var):
            return lv.coordinate
        name = self.names(("write_coordinate", k), f"{self.tensor}_c{k}")
        steps.append(ir.Assign(name, lv.coordinate))
        return ir.Var(name)

    def finish(self) -> list[ir.Stmt]:
        """Each iterated level's position count into ``counts`` (locate levels report 0)."""
        return [ir.Store(self.counts, (ir.Const(k),), ir.Var(lv.names.count))
                for k, lv in enumerate(self.levels) if lv.strategy is not Strategy.LOCATE]

    # -- chunks in parallel (module docstring) ------------------------------------------------
    def splits(self, index: str) -> bool:
        """Whether the lowering may hand this writer the outermost loop, over ``index``."""
        return self.chunking is not None and self.chunking.index == index

    def chunked_range(self, var: str, start: ir.Expr, stop: ir.Expr, body: tuple[ir.Stmt, ...]) -> list[ir.Stmt]:
        """``for var in range(start, stop): body`` as parallel chunks (borders at block rows)."""
        align = self.chunking.align

        def border(b: str, first: ir.Expr, last: ir.Expr) -> list[ir.Stmt]:
            if align == 1:
                return []
            up = ir.mul(ir.Bin("//", ir.add(ir.Var(b), align - 1), ir.Const(align)), align)
            return [ir.If(ir.Bin(">", ir.Var(b), first), (ir.Assign(b, ir.Call("min", (last, up))),))]

        return self._chunks(start, stop, border, lambda lo, hi: [ir.For(var, lo, hi, body)])

    def chunked_positions(self, cursor, var: str, body: tuple[ir.Stmt, ...]) -> list[ir.Stmt]:
        """The position loop of ``cursor`` (a unique level, ``Cursor.for_loop``) as parallel chunks
        of positions (borders moved past positions of one block row)."""
        head = ir.Assign(var, cursor.coord_at(ir.Var(cursor.p)))
        border = self._run_border(cursor) if self.chunking.align > 1 else (lambda b, first, last: [])
        start, stop = cursor.segment()
        return self._chunks(start, stop, border, lambda lo, hi: [ir.For(cursor.p, lo, hi, (head,) + body)])

    def chunked_walk(self, cursor, loops: list[ir.Stmt]) -> list[ir.Stmt]:
        """``loops``, the walk of one deduplicated ``cursor`` (``while p < end``), as parallel chunks
        of positions, each starting at a run of equal coordinates (and of one block row)."""
        start, stop = cursor.segment()
        return self._chunks(start, stop, self._run_border(cursor),
                            lambda lo, hi: [ir.Assign(cursor.p, lo), ir.Assign(cursor.end, hi), *loops])

    def _run_border(self, cursor) -> Callable:
        """A border between positions ``first`` and ``last`` moved forward while the position before
        it holds the same coordinate (``floordiv align``)."""
        align = self.chunking.align

        def key(q: ir.Expr) -> ir.Expr:
            c = cursor.coord_at(q)
            return c if align == 1 else ir.Bin("//", c, ir.Const(align))

        def border(b: str, first: ir.Expr, last: ir.Expr) -> list[ir.Stmt]:
            at = ir.Var(b)
            inside = ir.conj([ir.Bin(">", at, first), ir.lt(at, last), ir.eq(key(at), key(ir.sub(at, 1)))])
            return [ir.While(inside, (ir.Assign(b, ir.Const(1), "+"),))]

        return border

    def _chunks(self, start: ir.Expr, stop: ir.Expr, border: Callable,
                walk: Callable[[ir.Expr, ir.Expr], list[ir.Stmt]]) -> list[ir.Stmt]:
        """``walk(lo, hi)`` over ``len(counts)`` (at most) chunks of ``[start, stop)`` in parallel, each
        with its own insertion state starting at the chunk's row of ``counts`` (0 while counting),
        its counts stored there by the counting pass. ``border(name, first, last)``: statements
        that move a chunk border forward (the same for both ends of neighbouring chunks)."""
        t, fresh = self.tensor, self.names
        chunk, chunks = fresh("write_chunk", f"{t}_chunk"), fresh("write_chunks", f"{t}_chunks")
        first, span = fresh("write_first", f"{t}_first"), fresh("write_span", f"{t}_span")
        lo, hi = fresh("write_lo", f"{t}_lo"), fresh("write_hi", f"{t}_hi")
        f, n, k = ir.Var(first), ir.Var(span), ir.Var(chunks)
        last = ir.add(f, n)

        def at(name: str, index: ir.Expr) -> list[ir.Stmt]:
            return [ir.Assign(name, ir.add(f, ir.Bin("//", ir.mul(n, index), k))), *border(name, f, last)]

        row = ir.Index(ir.Var(chunk))
        init: list[ir.Stmt] = []
        done: list[ir.Stmt] = []
        for q, lv in enumerate(self.levels):
            if lv.strategy is Strategy.LOCATE:
                continue
            w = lv.names
            init += [ir.Assign(w.count, ir.Select(self.emit, ir.Load(self.counts, (row, ir.Const(q))), ir.Const(0))),
                     ir.Assign(w.last_parent, ir.Const(-1)), ir.Assign(w.last_coord, ir.Const(0))]
            if lv.strategy is Strategy.WORKSPACE:  # the chunk's own: its parents are its own
                init += [ir.Alloc(w.work, w.size, "intp"),
                         ir.For(w.scratch, ir.Const(0), w.size, (ir.Store(w.work, (ir.Index(ir.Var(w.scratch)),),
                                                                          ir.Const(-1)),))]
            done.append(ir.Store(self.counts, (row, ir.Const(q)), ir.Var(w.count)))
        body = (*at(lo, ir.Var(chunk)), *at(hi, ir.add(ir.Var(chunk), 1)), *init,
                *walk(ir.Var(lo), ir.Var(hi)), ir.If(ir.eq(self.emit, 0), tuple(done)))
        self.split = True
        return [ir.Assign(first, signed(start)), ir.Assign(span, ir.Call("max", (ir.sub(signed(stop), f), ir.Const(0)))),
                ir.Assign(chunks, ir.Call("min", (n, ir.Call("len", (ir.Var(self.counts),))))),
                ir.For(chunk, ir.Const(0), k, body, parallel=True), *self._first_refusals(k)]

    def _first_refusals(self, chunks: ir.Expr) -> list[ir.Stmt]:
        """After the counting pass, the count rows of a level that ``collects`` (a refusal: 0, or
        1 + the first parent it cannot write) keep only the first chunk's refusal, so the host's
        total names the first parent in walk order (chunks run in order of their ranges)."""
        out: list[ir.Stmt] = []
        for q, lv in enumerate(self.levels):
            if not lv.ltype.collects:
                continue
            row = self.names(("write_refusal_row", q), f"{self.tensor}_row{q}")
            seen = self.names(("write_refused", q), f"{self.tensor}_refused{q}")
            at = (ir.Index(ir.Var(row)), ir.Const(q))
            keep = ir.If(ir.Bin("!=", ir.Var(seen), ir.Const(0)), (ir.Store(self.counts, at, ir.Const(0)),),
                         (ir.Assign(seen, ir.Load(self.counts, at)),))
            out += [ir.Assign(seen, ir.Const(0)), ir.For(row, ir.Const(0), chunks, (keep,))]
        return [ir.If(ir.eq(self.emit, 0), tuple(out))] if out else []


def _chunking(fmt: TensorFormat, indices: dict[str, str], levels: tuple[WrittenLevel, ...],
              order: tuple[str, ...]) -> Chunking | None:
    """Whether the walk's outermost loop can be split into chunks written in parallel: the first
    level pins that index (``i``, ``c * i``, ``i floordiv c``), so every deeper parent belongs to
    one chunk, and every iterated level can be written in pieces (``split_append``; a singleton
    writes at its parent's position; a workspace level, or a stateful one such as delta, whose
    gaps run from the previous coordinate under the same parent, needs parents of its own)."""
    if not order:
        return None
    index, first = order[0], fmt.levels[0].expr
    if isinstance(first, fx.Mod) or _single_index(first) is None or indices[_single_index(first)] != index:
        return None
    for k, lv in enumerate(levels):
        if lv.strategy is Strategy.LOCATE:
            continue
        if k == 0 and (lv.strategy is Strategy.WORKSPACE or lv.ltype.stateful):
            return None  # every chunk meets the root's coordinates (DIA's diagonals), or a root-level
            # delta's first gap in a chunk would count from the previous chunk's last coordinate
        if not (lv.ltype.split_append or lv.ltype.one_child):
            return None
    align = 1
    for lv in fmt.levels:
        e = lv.expr
        if isinstance(e, fx.FloorDiv) and isinstance(e.operand, fx.Dimension) and indices[e.operand.name] == index:
            align = math.lcm(align, e.constant)
    return Chunking(index, align)
