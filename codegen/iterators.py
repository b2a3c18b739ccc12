"""Iterators: how a loop walks one stored level (kept apart from what the level stores).

A :class:`Cursor` walks the positions of one segment of an iterated level
and yields ``(coordinate, position)`` pairs in order. What the level stores is
asked of its level type (``ustc.format.levels``: the read hooks ``segment``,
``coordinate``, ``coord_start`` / ``coord_step`` and capabilities such as
``one_child`` and ``stateful``); the cursor only keeps the walk's state. It
emits loop IR for the three ways a loop uses it:

* ``for_loop`` — the only iterator of a loop: ``for A_p1 in range(lo, hi)``;
* ``init`` / ``load`` / ``advance`` — a cursor inside a ``while`` co-iteration or
  a dense loop, holding its coordinate in ``A_c1`` (``load`` reads it from the
  position, except for ``stateful`` levels such as delta, which keep a running coordinate);
* ``dedup`` — wrapped around any of these when the level is nonunique and must
  yield each coordinate once: the run ``[A_p1, A_r1)`` of equal coordinates
  becomes one step, and the child level sees the whole run as its segment.

Naming: ``{prefix}_p{k}`` position, ``{prefix}_p{k}_end`` segment end,
``{prefix}_c{k}`` coordinate, ``{prefix}_r{k}`` run end, each made unique by the
kernel's :class:`~codegen.names.FreshNames`; buffers ``{tensor}_lvl{k}_pos`` / ``_crd``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ustc.format.levels.base import LevelAccess

from . import loopir as ir
from .names import FreshNames
from .space import LevelRef


@dataclass(frozen=True)
class Cursor:
    ref: LevelRef
    prefix: str        # access name used in variable names: "A" or "A_2" when A is read twice
    parent: ir.Expr    # parent position
    parent_end: ir.Expr | None  # end of the parent's run when the parent level was deduplicated
    dedup: bool
    names: FreshNames = field(compare=False, hash=False)

    # -- names ---------------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.ref.level

    @property
    def p(self) -> str:
        return self.fresh("p", f"{self.prefix}_p{self.k}")

    @property
    def end(self) -> str:
        return self.fresh("end", f"{self.prefix}_p{self.k}_end")

    @property
    def c(self) -> str:
        return self.fresh("c", f"{self.prefix}_c{self.k}")

    @property
    def run(self) -> str:
        return self.fresh("run", f"{self.prefix}_r{self.k}")

    def fresh(self, role: str, base: str) -> str:
        """This access's variable ``role`` at this level (one name per slot, level and role)."""
        return self.names((role, self.ref.slot, self.k), base)

    @property
    def access(self) -> LevelAccess:
        return self.ref.access

    @property
    def stateful(self) -> bool:
        """The coordinate is a running state (delta): ``c`` is advanced, not loaded."""
        return self.ref.ltype.stateful

    # -- segment and coordinates (the level type's read hooks) ----------------------------
    def segment(self) -> tuple[ir.Expr, ir.Expr]:
        """``[start, stop)`` positions of the children of the parent position (or run)."""
        return self.ref.ltype.segment(self.access, self.parent, self.parent_end)

    def coord_at(self, q: ir.Expr) -> ir.Expr:
        return self.ref.ltype.coordinate(self.access, q)

    def gap(self, q: ir.Expr) -> ir.Expr:
        """Stateful levels: the running coordinate's step at position q."""
        return self.ref.ltype.coord_step(self.access, q)

    def start_state(self) -> ir.Stmt:
        return ir.Assign(self.c, self.ref.ltype.coord_start(self.access))

    # -- single-iterator loop -------------------------------------------------------------
    def for_loop(self, var: str, body: tuple[ir.Stmt, ...], parallel: bool = False) -> list[ir.Stmt]:
        """``for p in segment: var = coordinate; body`` (no deduplication)."""
        start, stop = self.segment()
        if self.ref.ltype.one_child and self.parent_end is None:  # exactly one child
            return [ir.Assign(self.p, self.parent), ir.Assign(var, self.coord_at(ir.Var(self.p))), *body]
        if self.stateful:
            step = [ir.Assign(self.c, self.gap(ir.Var(self.p)), "+"), ir.Assign(var, ir.Var(self.c))]
            return [self.start_state(), ir.For(self.p, start, stop, tuple(step) + body)]
        head = ir.Assign(var, self.coord_at(ir.Var(self.p)))
        return [ir.For(self.p, start, stop, (head,) + body, parallel)]

    def chunked_loop(self, var: str, body: tuple[ir.Stmt, ...], chunks: int = 256,
                     grain: int = 0) -> list[ir.Stmt]:
        """A parallel walk of a sorted segment with repeats: chunk borders move forward to the
        start of a run, so every coordinate (every output row) belongs to exactly one chunk.
        ``chunks`` equal chunks, or (``grain`` > 0) one chunk per ``grain`` positions."""
        start, stop = self.segment()
        lo, hi = self.fresh("chunk_lo", f"{self.p}_lo"), self.fresh("chunk_hi", f"{self.p}_hi")
        chunk = self.fresh("chunk", f"{self.prefix}_chunk{self.k}")
        first, last = ir.Var(lo), ir.Var(hi)
        span = ir.sub(last, first)

        def border(name: str, index: ir.Expr) -> list[ir.Stmt]:
            inside = ir.conj([ir.Bin(">", ir.Var(name), first), ir.lt(ir.Var(name), last),
                              ir.eq(self.coord_at(ir.Var(name)), self.coord_at(ir.sub(ir.Var(name), 1)))])
            if grain:
                at = ir.Call("min", (ir.add(first, ir.mul(index, grain)), last))
            else:
                at = ir.add(first, ir.Bin("//", ir.mul(span, index), ir.Const(chunks)))
            return [ir.Assign(name, at), ir.While(inside, (ir.Assign(name, ir.Const(1), "+"),))]

        a, b = self.fresh("chunk_a", f"{self.p}_a"), self.fresh("chunk_b", f"{self.p}_b")
        head = ir.Assign(var, self.coord_at(ir.Var(self.p)))
        inner = ir.For(self.p, ir.Var(a), ir.Var(b), (head,) + body)
        walk = border(a, ir.Var(chunk)) + border(b, ir.add(ir.Var(chunk), 1)) + [inner]
        count = ir.Bin("//", ir.add(span, grain - 1), ir.Const(grain)) if grain else ir.Const(chunks)
        return [ir.Assign(lo, start), ir.Assign(hi, stop),
                ir.For(chunk, ir.Const(0), count, tuple(walk), parallel=True)]

    # -- cursor protocol ------------------------------------------------------------------
    def valid(self) -> ir.Expr:
        return ir.lt(ir.Var(self.p), ir.Var(self.end))

    def init(self) -> list[ir.Stmt]:
        start, stop = self.segment()
        out = [ir.Assign(self.p, start), ir.Assign(self.end, stop)]
        if self.stateful:
            out += [self.start_state(), ir.If(self.valid(), (ir.Assign(self.c, self.gap(ir.Var(self.p)), "+"),))]
        return out

    def load(self) -> list[ir.Stmt]:
        """Set ``c`` from the current position (call only while valid)."""
        return [] if self.stateful else [ir.Assign(self.c, self.coord_at(ir.Var(self.p)))]

    def find_run(self) -> list[ir.Stmt]:
        """``r`` = end of the run of positions holding coordinate ``c``."""
        if not self.dedup:
            return []
        more = ir.conj([ir.lt(ir.Var(self.run), ir.Var(self.end)),
                        ir.eq(self.coord_at(ir.Var(self.run)), ir.Var(self.c))])
        return [ir.Assign(self.run, ir.add(ir.Var(self.p), 1)),
                ir.While(more, (ir.Assign(self.run, ir.Const(1), "+"),))]

    def advance(self) -> list[ir.Stmt]:
        if self.dedup:
            return [ir.Assign(self.p, ir.Var(self.run))]
        out: list[ir.Stmt] = [ir.Assign(self.p, ir.Const(1), "+")]
        if self.stateful:
            out.append(ir.If(self.valid(), (ir.Assign(self.c, self.gap(ir.Var(self.p)), "+"),)))
        return out

    def gallop(self, target: ir.Expr) -> list[ir.Stmt]:
        """Move ``p`` to the first position past it whose coordinate is at least ``target`` (or to
        the end), when the current one is below it: steps doubling from ``p``, then a binary
        search in the last step (O(log gap); one comparison when the next position holds it).
        Not for ``stateful`` levels, whose coordinates are a running sum."""
        lo, hi = self.fresh("gallop_lo", f"{self.p}_lo"), self.fresh("gallop_hi", f"{self.p}_hi")
        step, mid = self.fresh("gallop_step", f"{self.p}_step"), self.fresh("gallop_mid", f"{self.p}_mid")
        below = ir.lt(self.coord_at(ir.Var(hi)), target)
        leap = ir.While(ir.conj([ir.lt(ir.Var(hi), ir.Var(self.end)), below]),
                        (ir.Assign(lo, ir.add(ir.Var(hi), 1)), ir.Assign(hi, ir.Var(step), "+"),
                         ir.Assign(step, ir.Const(2), "*")))
        halve = ir.While(ir.lt(ir.Var(lo), ir.Var(hi)),
                         (ir.Assign(mid, ir.Bin(">>", ir.add(ir.Var(lo), ir.Var(hi)), ir.Const(1))),
                          ir.If(ir.lt(self.coord_at(ir.Var(mid)), target),
                                (ir.Assign(lo, ir.add(ir.Var(mid), 1)),), (ir.Assign(hi, ir.Var(mid)),))))
        return [ir.Assign(lo, ir.add(ir.Var(self.p), 1)), ir.Assign(hi, ir.Var(lo)), ir.Assign(step, ir.Const(1)),
                leap, ir.Assign(hi, ir.Call("min", (ir.Var(hi), ir.Var(self.end)))), halve,
                ir.Assign(self.p, ir.Var(lo))]

    def child(self) -> tuple[ir.Expr, ir.Expr | None]:
        """Position (and run end, when deduplicated) handed to the next level."""
        return ir.Var(self.p), (ir.Var(self.run) if self.dedup else None)

