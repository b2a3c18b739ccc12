"""The write side: a sparse output written by the kernel in its own format, in order.

When the loop nest produces the output's entries in the lexicographic order of
its levels (the output indices are the outermost loops, in level order, and
each output coordinate is produced once), every entry is *inserted* level by
level through the level types' write hooks (``LevelType.insert``: compressed
and delta levels append, dense levels locate, singletons store at their
parent's position) — MLIR's ordered ``sparse_tensor.insert`` lowering, TACO's
append assembly. The same code counts (``emit`` false: only the insertion state
advances) and fills (``emit`` true); the host sizes the buffers from the counts
in between, so nothing is allocated before its size is known, and no
coordinate list is sorted on the host.

:func:`levels_in_order` says whether a format can be written this way;
:class:`Writer` emits the loop IR. Entries whose value is zero are not stored
(sums that cancel, explicit zeros of a source), as the host assembler does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ustc.format import expr as fx
from ustc.format.ir import TensorFormat
from ustc.format.levels.base import LevelType, LevelWrite

from . import loopir as ir
from .names import FreshNames, buffer_name


def levels_in_order(fmt: TensorFormat | None, indices: tuple[str, ...]) -> tuple[str, ...] | None:
    """The index each level of output ``fmt`` (read as ``C[indices]``) stores, when the format
    can be written in order: one plain dimension per level, every level type appendable, and no
    one-child level below a unique one (a singleton there has one slot for a whole row). None
    otherwise. (An appendable level of bounded capacity, such as ELL rows, refuses an
    overflowing count in its ``written_positions`` hook.)"""
    if fmt is None or fmt.nlevels != fmt.ndim:
        return None
    levels = fmt.levels
    if not all(isinstance(lv.expr, fx.Dimension) and lv.type.append for lv in levels):
        return None
    if any(lv.type.one_child and k and levels[k - 1].type.unique for k, lv in enumerate(levels)):
        return None
    by_dim = {d.name: i for d, i in zip(fmt.dims, indices)}
    return tuple(by_dim[lv.expr.name] for lv in fmt.levels)


@dataclass(frozen=True)
class WrittenLevel:
    """One output level: its type, the index it stores and its names in the kernel."""

    ltype: LevelType
    index: str
    names: LevelWrite


class Writer:
    """Loop IR that inserts the entries of output ``tensor`` (format ``fmt``) in order."""

    def __init__(self, tensor: str, fmt: TensorFormat, level_indices: tuple[str, ...], names: FreshNames,
                 emit: ir.Expr, extents: dict[str, ir.Expr]):
        """``extents``: each index's extent (dense levels locate with it)."""
        self.tensor, self.names, self.emit = tensor, names, emit
        self.vals = buffer_name(tensor, "vals")
        self.counts = buffer_name(tensor, "counts")
        self.levels = tuple(WrittenLevel(lv.type, index, self._level_names(k, emit, extents[index]))
                            for k, (lv, index) in enumerate(zip(fmt.levels, level_indices)))

    def _level_names(self, k: int, emit: ir.Expr, size: ir.Expr) -> LevelWrite:
        t, fresh = self.tensor, self.names
        return LevelWrite(pos=buffer_name(t, "pos", k), crd=buffer_name(t, "crd", k), size=size, lo=ir.Const(0),
                          count=fresh(("write_count", k), f"{t}_n{k}"),
                          last_parent=fresh(("write_parent", k), f"{t}_last_p{k}"),
                          last_coord=fresh(("write_coord", k), f"{t}_last_c{k}"),
                          scratch=fresh(("write_gap", k), f"{t}_gap{k}"), emit=emit)

    @property
    def params(self) -> list[ir.Param]:
        """The output's buffers as kernel parameters (roles ``out_level``, ``out_vals``, ``out_counts``)."""
        out = []
        for k, lv in enumerate(self.levels):
            for buf in lv.ltype.buffers:
                out.append(ir.Param(buffer_name(self.tensor, buf, k), ("out_level", self.tensor, k, buf)))
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
            if lv.ltype.locate:
                continue
            w = lv.names
            out += [ir.Assign(w.count, ir.Const(0)), ir.Assign(w.last_parent, ir.Const(-1)),
                    ir.Assign(w.last_coord, ir.Const(0))]
        return out

    def insert(self, value: ir.Expr) -> list[ir.Stmt]:
        """Insert the entry at the current output coordinates with ``value`` (zeros are skipped)."""
        v = self.names("write_value", f"{self.tensor}_v")
        steps: list[ir.Stmt] = []
        p: ir.Expr = ir.Const(0)
        for k, lv in enumerate(self.levels):
            code, q = lv.ltype.insert(lv.names, p, ir.Var(lv.index))
            steps += code
            if not isinstance(q, (ir.Var, ir.Const)):
                name = self.names(("write_position", k), f"{self.tensor}_q{k}")
                steps.append(ir.Assign(name, q))
                q = ir.Var(name)
            p = q
        steps.append(ir.If(self.emit, (ir.Store(self.vals, (ir.Index(p),), ir.Var(v)),)))
        return [ir.Assign(v, value), ir.If(ir.Bin("!=", ir.Var(v), ir.Const(0)), tuple(steps))]

    def finish(self) -> list[ir.Stmt]:
        """Each iterated level's position count into ``counts`` (locate levels report 0)."""
        return [ir.Store(self.counts, (ir.Const(k),), ir.Var(lv.names.count))
                for k, lv in enumerate(self.levels) if not lv.ltype.locate]

