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

The same code runs in every pass: a counting pass (``emit`` 0: only the
insertion state advances), the host sizes the buffers from the counts (and
refuses them past the memory budget before allocating), a filling pass
(``emit`` 1); a format with a workspace level runs a collecting pass (1) then
the filling pass (2). No coordinate list is sorted on the host. Entries whose
value is zero are not stored (sums that cancel, explicit zeros of a source),
as the host assembler does — except under a semiring other than plus-times,
where the output's pattern is structural (a min-plus distance of 0 is an entry).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ustc.format import expr as fx
from ustc.format.ir import TensorFormat
from ustc.format.levels.base import LevelType, LevelWrite

from . import loopir as ir
from .names import FreshNames, buffer_name
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


class Writer:
    """Loop IR that inserts the entries of output ``tensor`` (format ``fmt``) level by level."""

    def __init__(self, tensor: str, fmt: TensorFormat, indices: tuple[str, ...], strategies: tuple[Strategy, ...],
                 names: FreshNames, emit: ir.Expr, extents: dict[str, ir.Expr]):
        """``indices``: the statement's output indices; ``extents``: each index's extent (a level
        over a plain index locates with it; other levels' sizes and origins are parameters)."""
        self.tensor, self.names, self.emit = tensor, names, emit
        self.vals = buffer_name(tensor, "vals")
        self.counts = buffer_name(tensor, "counts")
        self.passes = 3 if Strategy.WORKSPACE in strategies else 2
        self.last_pass = ir.eq(emit, 2) if self.passes == 3 else emit
        by_dim = {d.name: i for d, i in zip(fmt.dims, indices)}
        self.levels = tuple(self._level(k, lv, strategy, by_dim, extents)
                            for k, (lv, strategy) in enumerate(zip(fmt.levels, strategies)))

    def _level(self, k: int, lv, strategy: Strategy, indices: dict[str, str], extents) -> WrittenLevel:
        """Level ``k`` (``indices``: the format's dimension -> the statement's index)."""
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
                           last_pass=self.last_pass, work=work)
        return WrittenLevel(lv.type, strategy, to_loop(rename(lv.expr, indices)), names)

    @property
    def params(self) -> list[ir.Param]:
        """The output's buffers as kernel parameters (roles ``out_level``, ``out_size``, ``out_lo``,
        ``out_work``, ``out_vals``, ``out_counts``)."""
        out = []
        for k, lv in enumerate(self.levels):
            for buf in lv.ltype.buffers:
                out.append(ir.Param(buffer_name(self.tensor, buf, k), ("out_level", self.tensor, k, buf)))
            for role, expr in (("out_size", lv.names.size), ("out_lo", lv.names.lo)):
                if isinstance(expr, ir.Var) and expr.name == buffer_name(self.tensor, role[4:], k):
                    out.append(ir.Param(expr.name, (role, self.tensor, k)))
            if lv.names.work:
                out.append(ir.Param(lv.names.work, ("out_work", self.tensor, k)))
        out.append(ir.Param(self.vals, ("out_vals", self.tensor)))
        out.append(ir.Param(self.counts, ("out_counts", self.tensor)))
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
