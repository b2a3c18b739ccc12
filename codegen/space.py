"""Level-space rewrite: every stored level becomes a loop variable.

A level whose expression is a plain dimension iterates that dimension's index
variable (CSR's ``j``). Any other level expression (``i floordiv 2``, ``j - i``,
``i + j``, ``2 * j``) gets a loop variable of its own, named after the
expression (``i_div2``, ``j_minus_i``), shared by every access with the same
expression; the index variables it replaces become *derived*: computed from
loop variables through the format's inverse map (``j = j_minus_i + i`` for
DIA, ``i = 2 * i_div2 + i_mod2`` for BSR) and guarded against padding.

A level is walked by *iteration* or, when its level type has the ``locate``
capability (dense, batch, range), by *locate*: the position is
``parent * size + (c - lo)``. A stored level that must be iterated at a derived
index cannot be co-iterated; :class:`Replan` asks the planner to convert that
operand first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ustc.format import expr as fx
from ustc.format.ir import TensorFormat
from ustc.format.levels.base import LevelAccess, LevelType

from . import loopir as ir
from .names import buffer_name
from .notation import Access, Statement

class Replan(Exception):
    """The statement cannot be lowered with ``tensor`` in its current format; convert it."""

    def __init__(self, tensor: str, target: TensorFormat, reason: str, slot: int | None = None):
        super().__init__(f"{tensor}: {reason}")
        self.tensor, self.target, self.reason, self.slot = tensor, target, reason, slot


@dataclass(frozen=True)
class LevelRef:
    """Level ``level`` of the tensor read by access ``slot``, walked at variable ``var``."""

    slot: int
    tensor: str
    level: int
    ltype: LevelType
    var: str
    lo_nonzero: bool

    @property
    def iterate(self) -> bool:
        return self.ltype.iterate

    @property
    def access(self) -> LevelAccess:
        """The level's buffers as generated code names them (``A_lvl1_pos`` ...)."""
        t, k = self.tensor, self.level
        lo = ir.Var(buffer_name(t, "lo", k)) if self.lo_nonzero else ir.Const(0)
        return LevelAccess(buffer_name(t, "pos", k), buffer_name(t, "crd", k), ir.Var(buffer_name(t, "size", k)), lo)


@dataclass(frozen=True)
class LoopVar:
    """A loop variable: an index variable, or a level expression's own variable."""

    name: str
    extent: ir.Expr  # number of coordinates
    lo: ir.Expr      # smallest coordinate
    modulus: int = 0  # c for a "d mod c" level: coordinates lie in [0, c)


@dataclass(frozen=True)
class Derived:
    """An index variable computed from loop variables (``expr`` is a format ``Expr``)."""

    name: str
    expr: fx.Expr
    owner: int  # slot of the access that defines it

    @property
    def deps(self) -> frozenset[str]:
        return frozenset(self.expr.variables())


class Space:
    """The rewritten statement: levels per access, loop variables, derived indices."""

    def __init__(self, statement: Statement, formats: dict[str, TensorFormat | None]):
        self.statement = statement
        self.formats = formats
        self.accesses: dict[int, Access] = {a.slot: a for a in statement.rhs.accesses()}
        self.levels: dict[int, tuple[LevelRef, ...]] = {}
        self.loopvars: dict[str, LoopVar] = {}
        self.derived: dict[str, Derived] = {}
        for slot, access in self.accesses.items():
            if formats.get(access.tensor) is not None:
                self.levels[slot] = self._rewrite(access, formats[access.tensor])
        for index in statement.indices:
            if index not in self.derived:
                self.loopvars.setdefault(index, LoopVar(index, ir.Var(f"n_{index}"), ir.Const(0)))
        self._check()

    # -- the rewrite ---------------------------------------------------------------
    def _rewrite(self, access: Access, fmt: TensorFormat) -> tuple[LevelRef, ...]:
        names = {d.name: v for d, v in zip(fmt.dims, access.indices)}
        refs, level_vars = [], {}
        for k, level in enumerate(fmt.levels):
            e = level.expr
            if isinstance(e, fx.Dimension):
                var = names[e.name]
            else:
                var = _var_name(e.render(names.__getitem__))
                lo = ir.Var(buffer_name(access.tensor, "lo", k)) if isinstance(e, fx.Sub) else ir.Const(0)
                modulus = e.constant if isinstance(e, fx.Mod) else 0
                self.loopvars.setdefault(var, LoopVar(var, ir.Var(buffer_name(access.tensor, "size", k)), lo, modulus))
            level_vars[f"l{k}"] = var
            refs.append(LevelRef(access.slot, access.tensor, k, level.type, var,
                                 isinstance(e, fx.Sub)))
        for d, dim_expr in zip(fmt.dims, fmt.dim_exprs):
            index = names[d.name]
            definition = rename(dim_expr, level_vars)
            if isinstance(definition, fx.Dimension) and definition.name == index:
                continue
            known = self.derived.get(index)
            if known is not None and known.expr != definition:
                raise Replan(access.tensor, plain_format(fmt),
                             f"index '{index}' is already derived as {known.expr} from another operand", access.slot)
            self.derived.setdefault(index, Derived(index, definition, access.slot))
        return tuple(refs)

    def _check(self) -> None:
        """An iterated level at an index another operand derives: convert one of the two.

        Two operands deriving each other's indices (DIAI's ``j = v + i`` next to DIAJ's
        ``i = j - v``) leave no loop variable to start from: the later one takes the
        earlier one's levels (any pattern fits them) or, failing that, plain levels."""
        for d in self.derived.values():
            chained = [self.derived[v] for v in d.deps if v in self.derived]
            if chained:
                first, later = sorted((d, chained[0]), key=lambda x: x.owner)
                self._replan_like(first.owner, later.owner,
                                  f"index '{later.name}' is derived from '{first.name}', which "
                                  f"{self.accesses[first.owner].tensor}'s format derives in turn")
        for slot, refs in self.levels.items():
            for ref in refs:
                d = self.derived.get(ref.var)
                if d is None or not ref.iterate or d.owner == slot:
                    continue
                owner = self.accesses[d.owner]
                owner_fmt = self.formats[owner.tensor]
                access = self.accesses[slot]
                why = (f"level {ref.level} ({self.formats[ref.tensor].levels[ref.level]}) must be iterated at "
                       f"index '{ref.var}', which {owner.tensor}'s format derives")
                if _blocks_only(owner_fmt) and coiterable(owner_fmt) and set(access.indices) == set(owner.indices):
                    target = like(owner_fmt, owner.indices, self.formats[ref.tensor], access.indices)
                    raise Replan(ref.tensor, target, why, slot)
                raise Replan(owner.tensor, plain_format(owner_fmt), why, d.owner)

    def _replan_like(self, model_slot: int, slot: int, why: str) -> None:
        model, access = self.accesses[model_slot], self.accesses[slot]
        model_fmt, fmt = self.formats[model.tensor], self.formats[access.tensor]
        if set(model.indices) == set(access.indices) and model_fmt.holds_any_pattern and coiterable(model_fmt):
            raise Replan(access.tensor, like(model_fmt, model.indices, fmt, access.indices), why, slot)
        raise Replan(access.tensor, plain_format(fmt), why, slot)

    # -- queries ---------------------------------------------------------------------
    def nodes_of(self, var: str) -> frozenset[str]:
        """Loop variables that must be bound before ``var`` is known."""
        if var in self.derived:
            return self.derived[var].deps
        return frozenset({var})

    def sparse_slots(self) -> list[int]:
        return sorted(self.levels)


def rename(e: fx.Expr, names: dict[str, str]) -> fx.Expr:
    """``e`` with dimension names replaced through ``names``."""
    if isinstance(e, fx.Dimension):
        return fx.Dimension(names.get(e.name, e.name))
    if isinstance(e, fx.Const):
        return e
    if isinstance(e, (fx.Add, fx.Sub)):
        return type(e)(rename(e.left, names), rename(e.right, names))
    if isinstance(e, fx.Mul):
        return fx.Mul(e.factor, rename(e.operand, names))
    return type(e)(rename(e.operand, names), e.constant)


def to_loop(e: fx.Expr) -> ir.Expr:
    """A format expression over loop variables as a loop-IR expression."""
    if isinstance(e, fx.Dimension):
        return ir.Var(e.name)
    if isinstance(e, fx.Const):
        return ir.Const(e.value)
    if isinstance(e, fx.Add):
        return ir.add(to_loop(e.left), to_loop(e.right))
    if isinstance(e, fx.Sub):
        return ir.sub(to_loop(e.left), to_loop(e.right))
    if isinstance(e, fx.Mul):
        return ir.mul(e.factor, to_loop(e.operand))
    op = "//" if isinstance(e, fx.FloorDiv) else "%"
    return ir.Bin(op, to_loop(e.operand), ir.Const(e.constant))


def exactness(e: fx.Expr) -> list[ir.Expr]:
    """``x % c == 0`` for every ``x floordiv c`` in an inverse map: a ``c * d`` level (whose
    inverse is ``l floordiv c``) holds a tensor entry only at multiples of c; a dense loop over
    the level, a dense ``c * d`` level and delta padding reach the other coordinates too."""
    if isinstance(e, (fx.Dimension, fx.Const)):
        return []
    if isinstance(e, (fx.Add, fx.Sub)):
        return exactness(e.left) + exactness(e.right)
    inner = exactness(e.operand)
    if isinstance(e, fx.FloorDiv) and e.constant != 1:
        inner.append(ir.eq(ir.Bin("%", to_loop(e.operand), ir.Const(e.constant)), 0))
    return inner


def linear_in(e: fx.Expr, x: str) -> tuple[int, fx.Expr | None] | None:
    """``(a, r)`` with ``e = a * x + r`` and ``r`` free of ``x`` (``r`` None for 0), else None."""
    if x not in e.variables():
        return 0, e
    if isinstance(e, fx.Dimension):
        return 1, None
    if isinstance(e, fx.Mul):
        inner = linear_in(e.operand, x)
        if inner is None:
            return None
        a, r = inner
        return e.factor * a, None if r is None else fx.Mul(e.factor, r)
    if isinstance(e, (fx.Add, fx.Sub)):
        left, right = linear_in(e.left, x), linear_in(e.right, x)
        if left is None or right is None:
            return None
        sign = 1 if isinstance(e, fx.Add) else -1
        a = left[0] + sign * right[0]
        r = _combine(left[1], right[1], sign)
        return a, r
    return None


def _combine(a, b, sign):
    if b is None:
        return a
    if a is None:
        return b if sign > 0 else fx.Sub(fx.Const(0), b)
    return fx.Add(a, b) if sign > 0 else fx.Sub(a, b)


def _var_name(text: str) -> str:
    for old, new in ((" floordiv ", "_div"), (" mod ", "_mod"), (" - ", "_minus_"), (" + ", "_plus_"),
                     (" * ", "_times_")):
        text = text.replace(old, new)
    return "v_" + re.sub(r"\W", "", text)


def _is_plain(fmt: TensorFormat) -> bool:
    return all(isinstance(lv.expr, fx.Dimension) for lv in fmt.levels)


def _blocks_only(fmt: TensorFormat) -> bool:
    """Non-plain levels are only block maps (every pattern fits, fill-in bounded by the block)."""
    return all(isinstance(lv.expr, (fx.Dimension, fx.FloorDiv, fx.Mod)) for lv in fmt.levels) and \
        all(lv.type.any_pattern and not lv.type.completes_affine for lv in fmt.levels)


def coiterable(fmt: TensorFormat) -> bool:
    """Every level ordered, repeats only above singletons: a format others may be converted to
    for co-iteration (a level failing this would itself be converted, and the two conversions
    would chase each other until the planner gives up)."""
    levels = fmt.levels
    return all(lv.type.ordered for lv in levels) and \
        all(lv.type.unique or k + 1 == len(levels) or levels[k + 1].type.one_child
            for k, lv in enumerate(levels))


def plain_format(fmt: TensorFormat) -> TensorFormat:
    """The fallback format: compressed levels, one per dimension (CSF-like).

    Every level is ordered, unique and iterable, so the lowering handles it
    without conversion; used when an operand's own format cannot be walked.
    Plain formats keep their level order; others take the dimensions in order.
    """
    if _is_plain(fmt):
        return csf(fmt, [lv.expr.name for lv in fmt.levels])
    return csf(fmt, [d.name for d in fmt.dims])


def like(model: TensorFormat, model_indices, fmt: TensorFormat, indices) -> TensorFormat:
    """``model``'s levels for a tensor of format ``fmt`` read with ``indices`` (same index set)."""
    from ustc.format.ir_types import Level

    to_index = {d.name: v for d, v in zip(model.dims, model_indices)}
    to_dim = {v: d.name for d, v in zip(fmt.dims, indices)}
    names = {d: to_dim[v] for d, v in to_index.items()}
    levels = tuple(Level(rename(lv.expr, names), lv.type) for lv in model.levels)
    return TensorFormat(fmt.dims, levels, model.pos_width, model.crd_width)


def csf(fmt: TensorFormat, dim_order: list[str]) -> TensorFormat:
    """``fmt``'s dimensions stored as compressed levels in ``dim_order`` (keeping widths)."""
    from ustc.format.levels import Compressed
    from ustc.format.ir_types import Level

    dims = {d.name: d for d in fmt.dims}
    levels = tuple(Level(dims[name], Compressed()) for name in dim_order)
    return TensorFormat(fmt.dims, levels, fmt.pos_width, fmt.crd_width)
