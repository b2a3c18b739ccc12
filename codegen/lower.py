"""Lowering: one statement, its level space and a loop order become a loop-IR function.

The loop nest follows ``order`` (see ``graph``). At each loop the merge lattice
of the iterators there picks the loop shape:

* no iterator, or a *universe* point: a dense ``for`` over the variable's
  range, iterators (if any) as cursors checked against the loop variable;
* one iterator whose every term needs it: ``for`` over its positions;
* otherwise ``while`` loops over the sorted coordinates, one per lattice point,
  largest first: each runs while the point's iterators all hold entries, takes
  the minimum coordinate and branches on which iterators hold it (``A + B``:
  both, then A's tail, then B's). Past ``SPLIT_ITERATORS`` operands one loop
  runs over all of them, exhausted ones reading a sentinel coordinate.

After a variable is bound, *settling* computes derived indices (guarded against
padding unless the loop bounds were tightened to exclude it, and a ``c * d``
level's ``d = l floordiv c`` to multiples of c) and the positions
of random-access levels. Once every output index is bound and only reduction
loops remain, the sum is kept in a register (``acc``) and stored once.
Dense outputs are accumulated into (the host zero-fills for ``=``, or fills with
the semiring's ``𝟘``); sparse
outputs are appended as coordinate lists, counted in a first pass
(``emit=COUNT``) and filled in a second (``FILL``), or written in one serial pass
(``APPEND``) when the host knows a capacity (:func:`ustc.ops.runtime.output_bound`).

Semirings (:mod:`codegen.semiring`): the lattices treat absent entries as ``𝟘``,
the register starts at ``𝟘`` and folds with ⊕ (``acc = min(acc, v)``), and so do
the stores into a dense output. In formats that store padding (a dense level
below a sparse one — BSR blocks, DIA diagonals —, structured n:m, delta), a
stored zero is padding, not an entry: where that matters (any semiring but
plus-times, and values passed through a prolog) the kernel tests the value and
takes the lattice point without that operand when it is zero. User functions
(prologs, ⊗, ⊕, epilogs) are called through module-level externs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ustc.errors import UnsupportedOperation
from ustc.format.ir import TensorFormat

from . import lattice as lat
from . import loopir as ir
from . import notation as nt
from . import optimize
from . import workspace as wsp
from .iterators import Cursor
from .names import FreshNames, buffer_name
from .functions import Function
from .writer import Strategy, Writer, walked_indices, write_strategies
from .space import Replan, Space, exactness, linear_in, plain_format, to_loop

NARROW_FLOATS = frozenset({"float16", "bfloat16"})
WIDE_FLOAT = "float32"  # what narrow floats are read as and summed in (fp32 accumulation)
SENTINEL = 1 << 62
COUNT, FILL, APPEND = 0, 1, 2  # the ``emit`` modes of a kernel with a sparse output
SPLIT_ITERATORS = 3  # co-iterations up to this many get one loop per lattice point (3^n bodies)


@dataclass(frozen=True)
class Output:
    tensor: str
    sparse: bool
    dtype: np.dtype
    format: TensorFormat | None = None


@dataclass(frozen=True)
class Ctx:
    expr: nt.Expr
    bound: frozenset[str]
    pos: dict = field(hash=False, compare=False)  # slot -> (level, position expr, run end | None)
    acc: str | None = None
    acc_depth: int = -1
    in_parallel: bool = False
    checked: frozenset[int] = frozenset()  # padded operands whose value was tested non-zero
    in_ws: bool = False  # stores fold into the workspace (codegen.workspace)
    tally: str | None = None  # the cost pass: add the sizes of the loop over ``tally_at`` to this variable
    tally_at: str | None = None  # the index whose loop the cost pass measures (the workspace's, or the row's next)


class Lowering:
    """Lower ``space.statement`` in loop ``order``; :meth:`function` returns the loop IR."""

    def __init__(self, space: Space, order: list[str], output: Output, name: str = "kernel",
                 tuning: optimize.Tuning = optimize.CPU, narrow: frozenset[str] = frozenset()):
        """``narrow``: the tensors holding float16 / bfloat16 values, read as float32."""
        self.space, self.order, self.out, self.name = space, order, output, name
        self.tuning, self.narrow = tuning, narrow
        self.stmt = space.statement
        self.sr = self.stmt.semiring
        self.externs: dict[str, ir.Extern] = {}  # key -> the module-level name of a user function
        if self.sr.logical and self.out.dtype.kind not in "biu":
            raise UnsupportedOperation(f"an {self.sr.add} reduction folds truth values: its output must be "
                                       f"bool or integer, '{output.tensor}' is {self.out.dtype}")
        counts: dict[str, int] = {}
        for a in space.accesses.values():
            counts[a.tensor] = counts.get(a.tensor, 0) + 1
        self.repeated = {t for t, n in counts.items() if n > 1}
        self.rows: str | None = None  # set when a sparse output is built row-parallel
        self.balance: wsp.RowWork | None = None  # a dense output's parallel row loop splittable by work
        self.tallied: list | None = None  # what a recording cost pass measured (:meth:`row_work`)
        self.prefix = {s: (a.tensor if a.tensor not in self.repeated else f"{a.tensor}_{s}")
                       for s, a in space.accesses.items()}
        self.names = FreshNames(self.reserved())
        self.acc = self.names("acc", "acc")
        self.found = self.names("found", "found")
        self.fold = self.sr.add if isinstance(self.sr.add, str) else self.extern(self.sr.add)
        self.fold = {"plus": "+", "times": "*", "or": "|", "and": "&"}.get(self.fold, self.fold)
        self.zero = _zero(self.out.dtype) if self.sr.add == "plus" else self.sr.identity(self.out.dtype)
        # a narrow output's sum is kept in float32: float16 sums lose digits after 2,048 terms
        wide = self.out.dtype.name in NARROW_FLOATS and isinstance(self.zero, float)
        self.start = ir.Const(self.zero, WIDE_FLOAT if wide else None)
        self.ws = self._workspace()
        self.writer = self._writer()

    def _workspace(self) -> wsp.Workspace | None:
        """The dense row a reduction into a sparse output folds into, when the loop order walks a
        reduction index before the output's last index (``codegen.workspace``)."""
        if not (self.out.sparse and self.tuning.workspaces):
            return None
        found = wsp.placement(self.stmt.lhs.indices, tuple(self.order), self.space.derived)
        if found is None:
            return None
        index, depth = found
        return wsp.make(index, depth, self.space.loopvars[index].extent, self.out.dtype, self.names)

    def written_order(self) -> tuple[str, ...]:
        """The order the output's entries come out in: a workspace drains its index right after
        the outer output indices."""
        order = tuple(self.order)
        if self.ws is None:
            return order
        outer = order[:self.ws.depth]
        return outer + (self.ws.index,) + tuple(v for v in order[self.ws.depth:] if v != self.ws.index)

    def extern(self, fn: Function) -> str:
        """The module-level name this kernel calls user function ``fn`` by."""
        found = self.externs.get(fn.key)
        if found is None:
            tag = "".join(c for c in fn.key if c.isalnum())[:10]
            found = ir.Extern(self.names(("extern", fn.key), f"{fn.name}_{tag}"), fn.key)
            self.externs[fn.key] = found
        return found.name

    def _writer(self) -> Writer | None:
        """The writer of a sparse output in its own format, when the loop order lets every level be
        written (``writer.write_strategies``: the output indices outermost, none derived). Compressed
        rows (CSR, CSC) keep the kernel that writes each row at its offset, in parallel: its
        coordinate list is their crd and its offsets their pos."""
        if not (self.out.sparse and self.tuning.ordered_writes):
            return None
        if self.out.format.compressed_rows and not self.tuning.gpu_writer:
            return None  # compressed rows: the row-parallel (or one-pass appending) kernel writes them
        if self.stmt.accumulate:
            return None  # '+=' merges the old entries on the host
        indices = self.stmt.lhs.indices
        order = walked_indices(self.written_order(), self.space.derived, self.space.loopvars)
        strategies = write_strategies(self.out.format, indices, order)
        if strategies is None or any(v in self.space.derived and v not in order for v in indices):
            return None
        if self.tuning.gpu_writer and (Strategy.WORKSPACE in strategies
                                       or any(lv.type.collects for lv in self.out.format.levels)):
            return None  # kernel-local workspaces, sorts, a serial refusal pass: not on a GPU
        extents = {v: self.space.loopvars[v].extent if v in self.space.loopvars else ir.Var(f"n_{v}") for v in indices}
        return Writer(self.out.tensor, self.out.format, indices, strategies, self.names, ir.Var("emit"), extents,
                      order, parallel=self.ws is None)

    def reserved(self) -> set[str]:
        """Names fresh variables must avoid: tensors, indices, loop variables, scalars, and every
        parameter name a kernel of this statement may take (``codegen.compile`` names them)."""
        stmt, out = self.stmt, self.out.tensor
        names = {out, "emit", wsp.THREADS, f"{out}_vals", f"{out}_offsets", f"{out}_counts", self.count, self.capacity}
        names |= {f"{out}_crd{d}" for d in range(len(stmt.lhs.indices))}
        levels = self.out.format.nlevels if self.out.format is not None else len(stmt.lhs.indices)
        names |= {buffer_name(out, b, k) for k in range(levels) for b in ("pos", "crd", "size", "lo", "work")}
        names |= set(stmt.indices) | set(self.space.loopvars) | set(self.space.derived) | set(stmt.rhs.scalars())
        names |= {f"n_{v}" for v in set(stmt.indices) | set(self.space.loopvars)}
        for access in self.space.accesses.values():
            names.add(access.tensor)
            fmt = self.space.formats.get(access.tensor)
            for k in range(fmt.nlevels if fmt is not None else 0):
                names |= {buffer_name(access.tensor, b, k) for b in ("pos", "crd", "size", "lo")}
            names.add(f"{access.tensor}_vals")
        return names

    # -- entry -------------------------------------------------------------------------
    def body(self) -> list[ir.Stmt]:
        body = self._body()
        if self.writer is not None and self.tuning.gpu_writer and not self.writer.split:
            self.writer = None  # a GPU runs no one-thread writer: lower again for the coordinate lists
            body = self._body()
        return body

    def _body(self) -> list[ir.Stmt]:
        pos = {slot: (-1, ir.Const(0), None) for slot in self.space.levels}
        ctx = Ctx(self.stmt.rhs, frozenset(), pos)
        steps, ctx = self.settle(ctx, frozenset())
        body = optimize.tile_parallel(self.wrap(steps, lambda: self.lower(ctx, 0)), self.tuning.tile, self.names)
        if not self.out.sparse:
            return body
        if self.ws is not None and self.rows is None:  # a serial kernel: one workspace for all rows
            body = wsp.allocate(self.ws) + body
        if self.writer is not None:
            if self.writer.split:  # each chunk of the outermost loop keeps its own insertion state
                # (on a GPU the chunk loop ends the kernel: it is the loop spread over threads)
                return body if self.tuning.gpu_writer else body + [ir.Return(ir.Const(0))]
            return self.writer.init() + body + self.writer.finish() + [ir.Return(ir.Const(0))]
        # entries past the arrays' capacity are counted, not written (the host then re-runs)
        capacity = [ir.Assign(self.capacity, ir.Call("len", (ir.Var(f"{self.out.tensor}_vals"),)))]
        if self.rows is None:
            return capacity + [ir.Assign(self.count, ir.Const(0))] + body + [ir.Return(ir.Var(self.count))]
        return capacity + body

    @property
    def count(self) -> str:
        return f"{self.out.tensor}_n"

    @property
    def capacity(self) -> str:
        return f"{self.out.tensor}_cap"

    # -- the recursion -------------------------------------------------------------------
    def lower(self, ctx: Ctx, depth: int) -> list[ir.Stmt]:
        if ctx.expr is nt.ZERO:
            return []
        if ctx.tally is not None and depth < len(self.order) and self.order[depth] == ctx.tally_at:
            return self.tally(ctx, depth)
        if self.ws is not None and not ctx.in_ws and depth == self.ws.depth:
            return self.open_workspace(ctx, depth)
        if ctx.acc is None and depth < len(self.order) and set(self.stmt.lhs.indices) <= ctx.bound:
            return self.accumulate(ctx, depth)
        if depth == len(self.order):
            return self.compute(ctx)
        v = self.order[depth]
        iterators, lattice = self.co_iteration(ctx, v)
        if not lattice.points:
            return []
        if not iterators or lattice.universe:
            return self.dense_loop(ctx, depth, v, lattice)
        slot = iterators[0]
        if len(iterators) == 1 and (self.next_ref(ctx, slot).ltype.unique or self.raw_ok(slot, lattice)):
            return self.position_loop(ctx, depth, v, slot, lattice.points[0].expr)
        return self.while_loop(ctx, depth, v, lattice)

    def open_workspace(self, ctx: Ctx, depth: int) -> list[ir.Stmt]:
        """The reduction loops below ``depth`` folding into the workspace, then its drain."""
        loops = self.lower(replace(ctx, in_ws=True), depth)
        if not loops:
            return []
        return wsp.opened(self.ws, loops, self.store(ir.Var(self.ws.value)))

    def costed(self, ctx: Ctx, depth: int, v: str, updates: dict, expr: nt.Expr, tight) -> list[ir.Stmt]:
        """The cost pass of one iteration of the chunked row loop over ``v``: the loops below it
        walked as the kernel walks them, down to the workspace index, whose loop is not entered
        but its size added to :func:`codegen.workspace.weight` (for SpGEMM ``C[i, j] = A[i, k] *
        B[k, j]``: ``nnz(B[k, :])`` summed over ``A[i, :]``, the products row ``i`` makes)."""
        tally = replace(ctx, in_ws=True, tally=wsp.weight(self.names, v), tally_at=self.ws.index)
        return self.bind(tally, depth, v, updates, expr, tight)

    def row_work(self, ctx: Ctx, depth: int, v: str, expr: nt.Expr, tight) -> wsp.RowWork | None:
        """The work of a dense output's parallel row loop over ``v``, when its rows' cumulative work
        can be read off a stored level (:func:`codegen.workspace.row_work`): a cost pass like
        :meth:`costed`, measuring the loop right below ``v``, whose terms are recorded, not emitted."""
        if depth + 1 >= len(self.order):
            return None
        self.tallied = []
        try:
            self.bind(replace(ctx, tally=wsp.weight(self.names, v), tally_at=self.order[depth + 1]),
                      depth, v, {}, expr, tight)
            return wsp.row_work(v, self.tallied)
        finally:
            self.tallied = None

    def tally(self, ctx: Ctx, depth: int) -> list[ir.Stmt]:
        """The size of the loop over the workspace index at ``depth``: its iterators' segment
        lengths added up (an upper bound on a union's), or the index's extent for a dense loop."""
        v = self.order[depth]
        iterators, lattice = self.co_iteration(ctx, v)
        if not lattice.points:
            return []
        if not iterators or lattice.universe:
            if self.tallied is not None:
                self.tallied.append(())
            return [ir.Assign(ctx.tally, self.space.loopvars[v].extent, "+")]
        sizes = []
        cursors = [self.cursor(ctx, slot, dedup=False) for slot in lattice.iterators]
        if self.tallied is not None:
            self.tallied.append(tuple(cursors))
        for c in cursors:
            start, stop = c.segment()
            sizes.append(ir.sub(stop, start))
        total = sizes[0]
        for size in sizes[1:]:
            total = ir.add(total, size)
        return [ir.Assign(ctx.tally, total, "+")]

    def raw_ok(self, slot: int, lattice: lat.Lattice) -> bool:
        """Duplicates may be visited one by one: every term is linear in this only operand (sums
        and products, folded with +; a duplicated entry's value is the sum of its copies)."""
        return (self.writer is None and self.space.accesses[slot].tensor not in self.repeated
                and len(lattice.points) == 1 and self.sr.add == "plus" and _sums_of_products(lattice.points[0].expr))

    # -- loop shapes ----------------------------------------------------------------------
    def dense_loop(self, ctx: Ctx, depth: int, v: str, lattice: lat.Lattice) -> list[ir.Stmt]:
        var = self.space.loopvars[v]
        start, stop, tight = var.lo, ir.add(var.lo, var.extent), frozenset()
        if not lattice.iterators:  # cursors must see every coordinate, so only cursor-free loops shrink
            start, stop, tight = self.tighten(ctx, v, start, stop)
            parallel = self.parallel_ok(ctx, depth, v, dense=True)
            inner = replace(ctx, in_parallel=ctx.in_parallel or parallel)
            body = self.bind(inner, depth, v, {}, lattice.points[0].expr, tight)
            if parallel and depth == 0 and not self.out.sparse and self.tuning.balance:
                self.balance = self.row_work(inner, depth, v, lattice.points[0].expr, tight)
            if self.sparse_rows(ctx, depth, v):
                rows = self.row_counted(v, body)
                if self.ws is not None:
                    work = self.costed(inner, depth, v, {}, lattice.points[0].expr, tight)
                    return wsp.chunked_rows(self.ws, self.names, v, start, stop, rows, tuple(work))
                return [ir.For(v, start, stop, rows, parallel=True)]
            if self.writes_split(depth, v):
                return self.writer.chunked_range(v, start, stop, tuple(body))
            full = (var.lo, ir.add(var.lo, var.extent)) if parallel and depth > 0 else None
            return [ir.For(v, start, stop, tuple(body), parallel, full=full)]
        cursors = [self.cursor(ctx, s, dedup=True) for s in lattice.iterators]
        pre = [s for c in cursors for s in c.init()]
        body: list[ir.Stmt] = []
        for c in cursors:
            body += [ir.Assign(self.here(c), ir.Const(False)),
                     ir.If(c.valid(), tuple(c.load() + [ir.Assign(self.here(c), ir.eq(ir.Var(c.c), ir.Var(v)))]))]
            body += [ir.If(ir.Var(self.here(c)), tuple(c.find_run()))] if c.dedup else []
        body += self.cases(ctx, depth, v, lattice, cursors, tight)
        body += [ir.If(ir.Var(self.here(c)), tuple(c.advance())) for c in cursors]
        return pre + [ir.For(v, start, stop, tuple(body))]

    def position_loop(self, ctx: Ctx, depth: int, v: str, slot: int, expr: nt.Expr) -> list[ir.Stmt]:
        ref = self.next_ref(ctx, slot)
        c = self.cursor(ctx, slot, dedup=False)
        if self.chunkable(ctx, depth, v, ref):
            inner = replace(ctx, in_parallel=True)
            body = self.bind(inner, depth, v, {slot: (ref.level, *c.child())}, expr, frozenset())
            return c.chunked_loop(v, tuple(body), grain=self.tuning.grain)
        parallel = ref.ltype.unique and not ref.ltype.stateful and self.parallel_ok(ctx, depth, v, dense=False)
        inner = replace(ctx, in_parallel=ctx.in_parallel or parallel)
        body = self.bind(inner, depth, v, {slot: (ref.level, *c.child())}, expr, frozenset())
        if self.writes_split(depth, v) and not (ref.ltype.one_child or ref.ltype.stateful):
            return self.writer.chunked_positions(c, v, tuple(body))
        return c.for_loop(v, tuple(body), parallel)

    def while_loop(self, ctx: Ctx, depth: int, v: str, lattice: lat.Lattice) -> list[ir.Stmt]:
        cursors = [self.cursor(ctx, s, dedup=True) for s in lattice.iterators]
        pre = [s for c in cursors for s in c.init()]
        if len(cursors) > SPLIT_ITERATORS:
            return pre + [self.union_loop(ctx, depth, v, lattice, cursors)]
        if _intersection(lattice, cursors):
            return pre + [self.leapfrog_loop(ctx, depth, v, lattice, cursors)]
        if len(cursors) == 1 and len(lattice.points) == 1 and not cursors[0].stateful and self.writes_split(depth, v):
            return self.writer.chunked_walk(cursors[0], [self.point_loop(ctx, depth, v, lattice, lattice.points[0],
                                                                         cursors)])
        return pre + [self.point_loop(ctx, depth, v, lattice, point, cursors) for point in lattice.points]

    def point_loop(self, ctx: Ctx, depth: int, v: str, lattice: lat.Lattice, point: lat.Point,
                   cursors: list[Cursor]) -> ir.While:
        """The loop of one lattice point: it runs while all the point's iterators hold entries,
        and branches over the points below it. Points go largest first, so when it starts every
        other iterator is exhausted (a superset of a point is a point, and its loop ended
        because one of its iterators ran out), and no coordinate needs a sentinel."""
        members = [c for c in cursors if c.ref.slot in point.present]
        below = lat.Lattice(tuple(c.ref.slot for c in members),
                            tuple(q for q in lattice.points if q.present <= point.present))
        alone = len(members) == 1  # one iterator: it holds every coordinate the loop visits
        body: list[ir.Stmt] = [s for c in members for s in c.load()]
        body.append(ir.Assign(v, _smallest(members)))
        for c in members:
            if alone:
                body += c.find_run()
                continue
            body.append(ir.Assign(self.here(c), ir.eq(ir.Var(c.c), ir.Var(v))))
            body += [ir.If(ir.Var(self.here(c)), tuple(c.find_run()))] if c.dedup else []
        body += self.cases(ctx, depth, v, below, members, frozenset(), sure=point.present if alone else frozenset())
        for c in members:
            body += c.advance() if alone else [ir.If(ir.Var(self.here(c)), tuple(c.advance()))]
        return ir.While(ir.conj([c.valid() for c in members]), tuple(body))

    def leapfrog_loop(self, ctx: Ctx, depth: int, v: str, lattice: lat.Lattice, cursors: list[Cursor]) -> ir.While:
        """The intersection of two sorted iterators: the one behind gallops to the other's
        coordinate (a short row against a long list of rows costs O(log) per step, not the
        walk of the long list: SpGEMM's ``k`` loop over a DCSR right operand)."""
        a, b = cursors
        ca, cb = ir.Var(a.c), ir.Var(b.c)
        match = [ir.Assign(v, ca), *a.find_run(), *b.find_run(),
                 *self.cases(ctx, depth, v, lattice, cursors, frozenset(), sure=lattice.points[0].present),
                 *a.advance(), *b.advance()]
        step = ir.If(ir.lt(ca, cb), tuple(a.gallop(cb)), (ir.If(ir.lt(cb, ca), tuple(b.gallop(ca)), tuple(match)),))
        return ir.While(ir.conj([a.valid(), b.valid()]), (*a.load(), *b.load(), step))

    def union_loop(self, ctx: Ctx, depth: int, v: str, lattice: lat.Lattice, cursors: list[Cursor]) -> ir.While:
        """One loop for many iterators: it runs while some minimal point is alive; exhausted
        iterators read a sentinel coordinate (one body instead of 3^n point bodies)."""
        alive = lattice.alive_sets()
        always = frozenset.intersection(*alive)
        cond = ir.disj([ir.conj([c.valid() for c in cursors if c.ref.slot in s]) for s in alive])
        body: list[ir.Stmt] = []
        for c in cursors:
            if c.stateful and c.ref.slot not in always:
                body.append(ir.Assign(c.c, ir.Select(c.valid(), ir.Var(c.c), ir.Const(SENTINEL))))
            elif not c.stateful:
                load = c.coord_at(ir.Var(c.p))
                body.append(ir.Assign(c.c, load if c.ref.slot in always
                                      else ir.Select(c.valid(), load, ir.Const(SENTINEL))))
        body.append(ir.Assign(v, _smallest(cursors)))
        for c in cursors:
            body.append(ir.Assign(self.here(c), ir.eq(ir.Var(c.c), ir.Var(v))))
            body += [ir.If(ir.Var(self.here(c)), tuple(c.find_run()))] if c.dedup else []
        body += self.cases(ctx, depth, v, lattice, cursors, frozenset())
        body += [ir.If(ir.Var(self.here(c)), tuple(c.advance())) for c in cursors]
        return ir.While(cond, tuple(body))

    def cases(self, ctx, depth, v, lattice, cursors, tight, sure=frozenset()) -> list[ir.Stmt]:
        """``if``/``elif`` over the lattice points, largest first (structural zeros are monotone);
        iterators in ``sure`` are known to hold the coordinate (no test)."""
        by_slot = {c.ref.slot: c for c in cursors}
        branches = []
        for point in lattice.points:
            updates = {s: (by_slot[s].ref.level, *by_slot[s].child()) for s in point.present}
            body = self.bind(ctx, depth, v, updates, point.expr, tight)
            cond = ir.conj([ir.Var(self.here(by_slot[s])) for s in sorted(point.present - sure)])
            branches.append((cond, body))
        out: tuple[ir.Stmt, ...] = ()
        for cond, body in reversed(branches):
            if cond == ir.Const(True):
                out = tuple(body)
            else:
                out = (ir.If(cond, tuple(body), out),)
        return list(out)

    def here(self, c: Cursor) -> str:
        return c.fresh("here", f"{c.prefix}_here{c.k}")

    # -- cursors ----------------------------------------------------------------------------
    def cursor(self, ctx: Ctx, slot: int, dedup: bool) -> Cursor:
        level, parent, parent_end = ctx.pos[slot]
        ref = self.space.levels[slot][level + 1]
        fmt = self.space.formats[ref.tensor]
        dedup = dedup and not ref.ltype.unique
        if dedup or parent_end is not None:
            if not ref.ltype.ordered:
                raise Replan(ref.tensor, plain_format(fmt), f"level {ref.level} is unordered but must be "
                             f"co-iterated", slot)
            child = self.space.levels[slot][ref.level + 1] if ref.level + 1 < fmt.nlevels else None
            if dedup and child is not None and not child.ltype.one_child:
                raise Replan(ref.tensor, plain_format(fmt), f"level {ref.level} repeats coordinates and "
                             f"its child level is not a singleton", slot)
        if parent_end is not None and not ref.ltype.one_child:
            raise Replan(ref.tensor, plain_format(fmt), "a deduplicated level has a non-singleton child", slot)
        return Cursor(ref, self.prefix[slot], parent, parent_end, dedup, self.names)

    def next_ref(self, ctx: Ctx, slot: int):
        refs = self.space.levels[slot]
        level = ctx.pos[slot][0]
        return refs[level + 1] if level + 1 < len(refs) else None

    def present(self, ctx: Ctx) -> list[int]:
        return [a.slot for a in ctx.expr.accesses() if a.slot in self.space.levels]

    def co_iteration(self, ctx: Ctx, v: str):
        """The slots whose next level iterates ``v``, and their merge lattice over ``ctx.expr``."""
        iterators = tuple(s for s in self.present(ctx) if (ref := self.next_ref(ctx, s)) is not None
                          and ref.var == v and ref.iterate)
        return iterators, lat.build(ctx.expr, iterators, self.sr)

    # -- binding and settling --------------------------------------------------------------
    def bind(self, ctx: Ctx, depth: int, v: str, updates: dict, expr: nt.Expr, tight) -> list[ir.Stmt]:
        if expr is nt.ZERO:
            return []
        pos = dict(ctx.pos)
        pos.update(updates)
        inner = replace(ctx, expr=expr, bound=ctx.bound | {v}, pos=pos)
        steps, inner = self.settle(inner, tight)
        return self.wrap(steps, lambda: self.lower(inner, depth + 1))

    def settle(self, ctx: Ctx, tight) -> tuple[list, Ctx]:
        """Compute derived indices and random-access positions that became known."""
        steps: list = []
        bound, pos = set(ctx.bound), dict(ctx.pos)
        changed = True
        while changed:
            changed = False
            for name, d in self.space.derived.items():
                if name not in bound and d.deps <= bound:
                    steps.append(ir.Assign(name, to_loop(d.expr)))
                    guard = exactness(d.expr)
                    if name not in tight:
                        n = ir.Var(f"n_{name}")
                        guard += [ir.Bin("<=", ir.Const(0), ir.Var(name)), ir.lt(ir.Var(name), n)]
                    if guard:
                        steps.append(("guard", ir.conj(guard)))
                    bound.add(name)
                    changed = True
            for slot in self.present(ctx):
                level, p, run = pos[slot]
                refs = self.space.levels[slot]
                while level + 1 < len(refs) and not refs[level + 1].iterate and refs[level + 1].var in bound:
                    ref = refs[level + 1]
                    if run is not None:
                        raise Replan(ref.tensor, plain_format(self.space.formats[ref.tensor]),
                                     "a deduplicated level has a random-access child", slot)
                    q = ref.ltype.locate_position(ref.access, p, ir.Var(ref.var))
                    if not isinstance(q, (ir.Var, ir.Const)):
                        name = self.names(("p", slot, ref.level), f"{self.prefix[slot]}_p{ref.level}")
                        steps.append(ir.Assign(name, q))
                        q = ir.Var(name)
                    level, p = level + 1, q
                    pos[slot] = (level, p, None)
                    changed = True
        return steps, replace(ctx, bound=frozenset(bound), pos=pos)

    @staticmethod
    def wrap(steps: list, rest) -> list[ir.Stmt]:
        body = rest()
        for step in reversed(steps):
            if isinstance(step, tuple):
                body = [ir.If(step[1], tuple(body))] if body else []
            else:
                body = [step] + body
        return body

    def tighten(self, ctx: Ctx, v: str, start: ir.Expr, stop: ir.Expr):
        """Shrink a dense loop so derived indices linear in ``v`` stay in range (no guard needed)."""
        tight = set()
        for name, d in self.space.derived.items():
            if name in ctx.bound or v not in d.deps or not d.deps <= ctx.bound | {v}:
                continue
            lin = linear_in(d.expr, v)
            if lin is None or lin[0] == 0:
                continue
            a, r = lin
            r = to_loop(r) if r is not None else ir.Const(0)
            n = ir.Var(f"n_{name}")
            if a > 0:  # 0 <= a v + r < n
                low, high = ir.Neg(ir.Bin("//", r, ir.Const(a))), ir.Neg(ir.Bin("//", ir.sub(r, n), ir.Const(a)))
            else:      # 0 <= r - b v < n
                b = -a
                low = ir.add(ir.Bin("//", ir.sub(r, n), ir.Const(b)), 1)
                high = ir.add(ir.Bin("//", r, ir.Const(b)), 1)
            if a in (1, -1):
                low, high = (ir.Neg(r), ir.sub(n, r)) if a == 1 else (ir.add(ir.sub(r, n), 1), ir.add(r, 1))
            start, stop = ir.Call("max", (start, low)), ir.Call("min", (stop, high))
            tight.add(name)
        return start, stop, frozenset(tight)

    # -- parallel loops ------------------------------------------------------------------
    def parallel_ok(self, ctx: Ctx, depth: int, v: str, dense: bool) -> bool:
        """No two iterations write the same output element (or the only write is a register sum)."""
        if self.out.sparse or ctx.in_parallel or not (depth == 0 or dense):
            return False
        if ctx.acc is not None:
            return ctx.acc_depth == depth
        for index in self.stmt.lhs.indices:
            if index == v:
                return True
            d = self.space.derived.get(index)
            if d is None or v not in d.deps:
                continue
            lin = linear_in(d.expr, v)
            if lin is None or lin[0] == 0:
                continue
            others = set(lin[1].variables()) if lin[1] is not None else set()
            inside = others - ctx.bound
            if all(0 < self.space.loopvars[u].modulus <= abs(lin[0]) for u in inside if u in self.space.loopvars):
                return True
        return False

    def writes_split(self, depth: int, v: str) -> bool:
        """The outermost loop, over ``v``, goes to the writer as chunks written in parallel."""
        return depth == 0 and self.writer is not None and self.writer.splits(v)

    def sparse_rows(self, ctx: Ctx, depth: int, v: str) -> bool:
        """A sparse output built in parallel over the outermost output index (its rows)."""
        return (self.out.sparse and self.writer is None and depth == 0 and not ctx.in_parallel
                and v in self.stmt.lhs.indices and v not in self.space.derived)

    def row_counted(self, v: str, body) -> tuple[ir.Stmt, ...]:
        """Per-row counter, by ``emit`` mode (:data:`COUNT`, :data:`FILL`, :data:`APPEND`): counting
        stores row sizes in ``offsets[v + 1]``; filling starts each row at ``offsets[v]`` (the
        host turns sizes into offsets in between); appending (one pass, serial, into arrays of
        a known capacity) starts each row where the previous one ended and stores its end."""
        offsets = f"{self.out.tensor}_offsets"
        self.rows = v
        start = ir.Select(ir.Var("emit"), ir.Load(offsets, (ir.Index(ir.Var(v)),)), ir.Const(0))
        done = ir.If(ir.Bin("!=", ir.Var("emit"), ir.Const(FILL)),
                     (ir.Store(offsets, (ir.Index(ir.add(ir.Var(v), 1)),), ir.Var(self.count)),))
        return (ir.Assign(self.count, start), *body, done)

    def chunkable(self, ctx: Ctx, depth: int, v: str, ref) -> bool:
        """A sorted level with repeats (COO rows) writing output rows it owns: split at run borders."""
        return (depth == 0 and not ref.ltype.unique and ref.ltype.ordered and not ref.ltype.one_child
                and not ref.ltype.stateful and ctx.acc is None and not self.out.sparse
                and v in self.stmt.lhs.indices)

    # -- the statement body -------------------------------------------------------------------
    def accumulate(self, ctx: Ctx, depth: int) -> list[ir.Stmt]:
        acc = self.acc
        init = [ir.Assign(acc, self.start)]
        if self.out.sparse:
            init.append(ir.Assign(self.found, ir.Const(False)))
        inner = replace(ctx, acc=acc, acc_depth=depth)
        loops = self.lower(inner, depth)
        if not loops:
            return []
        if self.tuning.unroll:
            loops = optimize.unroll_reductions(loops, acc, self.start, self.names, self.fold)
        guard = self.found if self.out.sparse else None
        return init + loops + self.store(ir.Var(acc), guard=guard, into_ws=ctx.in_ws)

    def compute(self, ctx: Ctx) -> list[ir.Stmt]:
        slot = self.unchecked_padding(ctx)
        if slot is not None:  # a stored zero of a padded operand is no entry: take the point without it
            _, p, _ = ctx.pos[slot]
            tensor = self.space.accesses[slot].tensor
            cond = ir.Bin("!=", ir.Load(f"{tensor}_vals", (ir.Index(p),)), ir.Const(0))
            present = self.compute(replace(ctx, checked=ctx.checked | {slot}))
            rest = nt.substitute(ctx.expr, frozenset({slot}), self.sr)
            absent = [] if rest is nt.ZERO else self.compute(replace(ctx, expr=rest))
            return [ir.If(cond, tuple(present), tuple(absent))] if present or absent else []
        pre: list[ir.Stmt] = []
        value = self.value(ctx.expr, ctx, pre)
        if ctx.acc is not None:
            if self.out.sparse:
                pre.append(ir.Assign(self.found, ir.Const(True)))
            if self.sr.logical and not _is_bool(value):
                value = ir.Call("bool", (value,))
            pre.append(ir.Assign(ctx.acc, value, self.fold))  # last, so optimize.unroll_reductions applies
            return pre
        return pre + self.store(value, into_ws=ctx.in_ws)

    def unchecked_padding(self, ctx: Ctx) -> int | None:
        """An access of ``ctx.expr`` to an operand whose format stores padding, whose stored zeros
        would count as values here (any semiring but plus-times, or read through a prolog), and
        whose value has not been tested yet; None when there is none."""
        prologs = _applied_slots(ctx.expr)
        for a in ctx.expr.accesses():
            if a.slot in ctx.checked or a.slot not in self.space.levels:
                continue
            if self.sr.is_plus_times and a.slot not in prologs:
                continue
            fmt = self.space.formats.get(a.tensor)
            if fmt is not None and stores_padding(fmt) and ctx.pos[a.slot][2] is None:
                return a.slot
        return None

    @property
    def skips_zeros(self) -> bool:
        """Whether the writer stores no zero-valued entries (plus-times; under another semiring the
        output's pattern is structural)."""
        return self.sr.is_plus_times

    def store(self, value: ir.Expr, guard: str | None = None, into_ws: bool = False) -> list[ir.Stmt]:
        idx = tuple(ir.Index(ir.Var(i)) for i in self.stmt.lhs.indices) or (ir.Const(0),)
        name = self.out.tensor
        if into_ws:
            counted = self.writer is not None and self.skips_zeros  # the count decides on values
            out = wsp.fold(self.ws, value, self.fold, counted)
            return [ir.If(ir.Var(guard), tuple(out))] if guard else out
        if not self.out.sparse:  # a narrow output's old value and the sum add in float32; no atomic does that
            atomic = self.out.dtype.name not in NARROW_FLOATS
            return [ir.Store(name, idx, value, accumulate=True, op=self.fold, atomic=atomic)]
        if self.writer is not None:
            if self.stmt.epilog is not None:  # each entry is inserted once: the epilog applies here
                value = ir.Call(self.extern(self.stmt.epilog), (value,))
            out = self.writer.insert(value, skip_zeros=self.skips_zeros)
            return [ir.If(ir.Var(guard), tuple(out))] if guard else out
        n = ir.Index(ir.Var(self.count))   # the running output position is never negative
        writes = [ir.Store(f"{name}_crd{d}", (n,), ir.Var(i)) for d, i in enumerate(self.stmt.lhs.indices)]
        writes.append(ir.Store(f"{name}_vals", (n,), value))
        room = ir.conj([ir.Var("emit"), ir.lt(ir.Var(self.count), ir.Var(self.capacity))])
        out = [ir.If(room, tuple(writes)), ir.Assign(self.count, ir.Const(1), "+")]
        return [ir.If(ir.Var(guard), tuple(out))] if guard else out

    def read(self, tensor: str, load: ir.Load) -> ir.Expr:
        """A value of ``tensor`` as the arithmetic takes it: narrow floats widened to float32, so
        products round once, in float32, not in float16 first."""
        return ir.Call(f"np.{WIDE_FLOAT}", (load,)) if tensor in self.narrow else load

    def value(self, e: nt.Expr, ctx: Ctx, pre: list) -> ir.Expr:
        if isinstance(e, nt.Access):
            if e.slot not in self.space.levels:
                idx = tuple(ir.Index(ir.Var(i)) for i in e.indices) or (ir.Const(0),)
                return self.read(e.tensor, ir.Load(e.tensor, idx))
            level, p, run = ctx.pos[e.slot]
            if level != len(self.space.levels[e.slot]) - 1:  # pragma: no cover - lowering invariant
                raise UnsupportedOperation(f"internal: {e} read before all its levels were walked")
            if run is None:
                return self.read(e.tensor, ir.Load(f"{e.tensor}_vals", (ir.Index(p),)))
            name = self.names(("run_value", e.slot), f"{self.prefix[e.slot]}_v")
            q = self.names(("run_position", e.slot), f"{self.prefix[e.slot]}_q")
            load = self.read(e.tensor, ir.Load(f"{e.tensor}_vals", (ir.Index(ir.Var(q)),)))
            start = ir.Const(0.0, WIDE_FLOAT) if e.tensor in self.narrow else ir.Const(0)
            pre += [ir.Assign(name, start), ir.For(q, p, run, (ir.Assign(name, load, "+"),))]
            return ir.Var(name)
        if isinstance(e, nt.Literal):
            return ir.Const(e.value)
        if isinstance(e, nt.Scalar):
            return ir.Var(e.name)
        if isinstance(e, nt.Neg):
            return ir.Neg(self.value(e.operand, ctx, pre))
        if isinstance(e, nt.Identity):
            return ir.Const(self.zero)
        if isinstance(e, nt.Apply):
            return ir.Call(self.extern(e.fn), (self.value(e.operand, ctx, pre),))
        if isinstance(e, nt.Call):
            return ir.Call(self.extern(e.fn), tuple(self.value(a, ctx, pre) for a in e.args))
        left, right = self.value(e.left, ctx, pre), self.value(e.right, ctx, pre)
        if isinstance(e, (nt.Min, nt.Max)):
            return ir.Call(e.symbol, (left, right))
        if isinstance(e, (nt.And, nt.Or)):  # truth values: bool(a) & bool(b)
            return ir.Bin(e.symbol, *(v if _is_bool(v) else ir.Call("bool", (v,)) for v in (left, right)))
        op = {nt.Add: "+", nt.Sub: "-", nt.Mul: "*"}[type(e)]
        return ir.Bin(op, left, right)


def stores_padding(fmt: TensorFormat) -> bool:
    """Whether ``fmt`` stores positions that are no entry of the tensor, holding zeros: a locate
    level below an iterated one (BSR blocks, DIA diagonals over their range), a level that pads
    (delta) or holds fixed-size groups (structured n:m)."""
    iterated = False
    for lv in fmt.levels:
        t = lv.type
        if t.pads or not t.any_pattern or (t.locate and iterated):
            return True
        iterated = iterated or not t.locate
    return False


def _applied_slots(e: nt.Expr) -> set[int]:
    """Slots of the accesses read through a prolog (inside an :class:`~codegen.notation.Apply`)."""
    if isinstance(e, nt.Apply):
        return {a.slot for a in e.accesses()}
    out: set[int] = set()
    for child in e.children():
        out |= _applied_slots(child)
    return out


def _sums_of_products(e: nt.Expr) -> bool:
    """Only ``+ - *``, negation, accesses, literals and scalars: linear in each access."""
    if isinstance(e, (nt.Add, nt.Sub, nt.Mul, nt.Neg)):
        return all(_sums_of_products(c) for c in e.children())
    return isinstance(e, (nt.Access, nt.Literal, nt.Scalar))


def _is_bool(v: ir.Expr) -> bool:
    """``v`` is a truth value by construction (a comparison, a logical operator, a bool cast)."""
    if isinstance(v, ir.Const):
        return isinstance(v.value, bool)
    if isinstance(v, ir.Call):
        return v.fn == "bool"
    return isinstance(v, ir.Bin) and v.op in ("&", "|", "and", "or", "==", "!=", "<", "<=", ">", ">=") \
        and (v.op not in ("&", "|") or (_is_bool(v.left) and _is_bool(v.right)))


def _zero(dtype: np.dtype):
    kind = np.dtype(dtype).kind
    return 0j if kind == "c" else 0.0 if kind == "f" or np.dtype(dtype).name in NARROW_FLOATS else 0


def _intersection(lattice: lat.Lattice, cursors: list[Cursor]) -> bool:
    """Two iterators that hold a term only together (``A * B``), both with loadable coordinates."""
    return (len(cursors) == 2 and len(lattice.points) == 1
            and lattice.points[0].present == frozenset(c.ref.slot for c in cursors)
            and not any(c.stateful for c in cursors))


def _smallest(cursors: list[Cursor]) -> ir.Expr:
    """The least coordinate the cursors hold (``min(A_c1, B_c1, ...)`` as nested calls)."""
    coord: ir.Expr = ir.Var(cursors[0].c)
    for c in cursors[1:]:
        coord = ir.Call("min", (coord, ir.Var(c.c)))
    return coord
