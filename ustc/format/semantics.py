"""The semantic pass over a format: validity rules and derived facts.

``analyze(dims, levels, pos_width, crd_width)`` enforces every rule of design
§2 "Validity" that involves the map as a whole (level types check their own
neighbourhood through ``LevelType.check``) and derives the inverse map: each
dimension as an expression over level coordinates ``l0, l1, ...``.

Worked example, BSR 2x3 ``(i, j) -> (i floordiv 2 : dense, j floordiv 3 :
compressed, i mod 2 : dense, j mod 3 : dense)``: the inverse is
``i = 2 * l0 + l2`` and ``j = 3 * l1 + l3``; for a 5x7 matrix the level
extents are ``[3, 3, 2, 3]``.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import FormatSemanticError
from .expr import Add, Dimension, Expr, FloorDiv, Mod, Mul, Sub, canonical
from .ir_types import Level

WIDTHS = (0, 8, 16, 32, 64)


def _fail(rule: str, levels: Sequence[Level] = (), k: int | None = None) -> FormatSemanticError:
    text = levels[k].text() if k is not None else None
    return FormatSemanticError(rule, level=k, level_text=text)


def check_expression(levels: Sequence[Level], k: int, dims: set[str]) -> None:
    """The level expression is one of the supported affine shapes over declared dimensions."""
    expr = levels[k].expr
    for name in expr.variables():
        if name not in dims:
            raise _fail(f"'{name}' is not a declared dimension", levels, k)
    if isinstance(expr, Dimension):
        return
    if isinstance(expr, (FloorDiv, Mod)) and isinstance(expr.operand, Dimension):
        if expr.constant < 1:
            raise _fail(f"'{expr.op}' needs a positive constant, got {expr.constant}", levels, k)
        return
    if isinstance(expr, Mul) and isinstance(expr.operand, Dimension):
        if expr.factor < 1:
            raise _fail(f"'*' needs a positive constant, got {expr.factor}", levels, k)
        return
    if isinstance(expr, (Add, Sub)) and all(isinstance(e, Dimension) for e in (expr.left, expr.right)):
        if expr.left == expr.right:
            raise _fail(f"'{expr}' needs two different dimensions", levels, k)
        return
    raise _fail(
        f"unsupported level expression '{expr}': use d, d floordiv c, d mod c, d - e, d + e or c * d",
        levels, k)


def check_block_maps(levels: Sequence[Level]) -> None:
    """``d floordiv c`` comes before ``d mod c``, with the same constant."""
    for k, level in enumerate(levels):
        expr = level.expr
        if not isinstance(expr, Mod):
            continue
        divs = [(a, other.expr) for a, other in enumerate(levels)
                if isinstance(other.expr, FloorDiv) and other.expr.operand == expr.operand]
        if any(a < k and div.constant == expr.constant for a, div in divs):
            continue
        if any(div.constant == expr.constant for _, div in divs):
            raise _fail(f"'{expr.operand} floordiv {expr.constant}' must come before '{expr}'", levels, k)
        if divs:
            raise _fail(f"'{expr}' and '{divs[0][1]}' use different constants", levels, k)
        raise _fail(f"'{expr}' needs '{expr.operand} floordiv {expr.constant}' on an earlier level", levels, k)


def check_diagonal_maps(levels: Sequence[Level]) -> None:
    """``d - e`` / ``d + e`` need a later range level over d or e."""
    for k, level in enumerate(levels):
        if isinstance(level.expr, (Add, Sub)):
            names = level.expr.variables()
            ranges = [r for r in range(k + 1, len(levels)) if levels[r].type.completes_affine
                      and levels[r].expr.variables()[0] in names]
            if not ranges:
                raise _fail(f"'{level.expr}' needs a later range level over one of {', '.join(names)}",
                            levels, k)
            for other in range(len(levels)):
                if other not in (k, ranges[0]) and set(levels[other].expr.variables()) & set(names):
                    raise _fail(f"'{levels[other].expr}' stores a dimension that '{level.expr}' and its range "
                                f"level already determine", levels, other)


def check_uses(dims: Sequence[Dimension], levels: Sequence[Level]) -> None:
    names = [d.name for d in dims]
    declared: set[str] = set()
    for name in names:
        if name in declared:
            raise FormatSemanticError(f"dimension '{name}' is declared twice")
        declared.add(name)
    if len(levels) < len(dims):
        raise FormatSemanticError(f"{len(dims)} dimensions need at least {len(dims)} levels, got {len(levels)}")
    used = {name for level in levels for name in level.expr.variables()}
    for name in names:
        if name not in used:
            raise FormatSemanticError(f"dimension '{name}' is not used by any level")
    # Compare canonical spellings: "j + i" and "i + j", "1 * i" and "i" are the same coordinate.
    order = {name: k for k, name in enumerate(names)}
    seen: dict[Expr, int] = {}
    for k, level in enumerate(levels):
        expr = canonical(level.expr, order)
        if expr in seen:
            raise _fail(f"'{level.expr}' is already stored by level {seen[expr]}", levels, k)
        seen[expr] = k


def check_single_storage(dims: Sequence[Dimension], levels: Sequence[Level]) -> None:
    """Each dimension is stored once: plainly, as ``c * d``, or as one floordiv/mod pair.

    Dimensions of ``d - e`` / ``d + e`` levels are governed by ``check_diagonal_maps``.
    """
    diagonal = {name for lv in levels if isinstance(lv.expr, (Add, Sub)) for name in lv.expr.variables()}
    for d in dims:
        if d.name in diagonal:
            continue
        uses = [(k, type(lv.expr)) for k, lv in enumerate(levels) if d.name in lv.expr.variables()]
        kinds = sorted(kind.__name__ for _, kind in uses)
        if kinds not in (["Dimension"], ["Mul"], ["FloorDiv", "Mod"]):
            k = uses[-1][0]
            raise _fail(f"dimension '{d}' is stored more than once or incompletely "
                        f"(store it as '{d}', 'c * {d}', or one '{d} floordiv c' / '{d} mod c' pair)", levels, k)


def inverse(dims: Sequence[Dimension], levels: Sequence[Level]) -> tuple[Expr, ...]:
    """Each dimension as an expression over level coordinates ``l0, l1, ...``."""
    lv = [Dimension(f"l{k}") for k in range(len(levels))]
    index: dict[Expr, int] = {}  # level expression -> first level storing it
    for k, level in enumerate(levels):
        index.setdefault(level.expr, k)
    return tuple(_recover(d, levels, lv, index) for d in dims)


def _recover(d: Dimension, levels: Sequence[Level], lv: Sequence[Dimension], index: dict[Expr, int]) -> Expr:
    if d in index:
        return lv[index[d]]
    exprs = [level.expr for level in levels]
    for k, e in enumerate(exprs):
        if isinstance(e, Mul) and e.operand == d:
            return FloorDiv(lv[k], e.factor)
    for a, e in enumerate(exprs):
        if isinstance(e, FloorDiv) and e.operand == d and Mod(d, e.constant) in index:
            return Add(Mul(e.constant, lv[a]), lv[index[Mod(d, e.constant)]])
    for a, e in enumerate(exprs):
        if isinstance(e, (Add, Sub)) and d in (e.left, e.right):
            other = e.right if e.left == d else e.left
            if other in index:  # the range level over the other dimension
                b = lv[index[other]]
                if isinstance(e, Add):
                    return Sub(lv[a], b)
                return Add(lv[a], b) if e.left == d else Sub(b, lv[a])
    raise FormatSemanticError(f"dimension '{d}' cannot be recovered from the levels "
                              "(store it plainly, as a floordiv/mod pair, or through a range level)")


def level_extent(expr: Expr, sizes: dict[str, int]) -> int:
    """Number of coordinates of a level with expression ``expr``.

    ``d``: n_d; ``d floordiv c``: ceil(n_d / c); ``d mod c``: c;
    ``d ± e``: n_d + n_e - 1 (0 if either is empty); ``c * d``: c (n_d - 1) + 1.
    """
    if isinstance(expr, Dimension):
        return sizes[expr.name]
    if isinstance(expr, FloorDiv):
        return -(-level_extent(expr.operand, sizes) // expr.constant)
    if isinstance(expr, Mod):
        return expr.constant
    if isinstance(expr, (Add, Sub)):
        a, b = level_extent(expr.left, sizes), level_extent(expr.right, sizes)
        return a + b - 1 if a and b else 0
    if isinstance(expr, Mul):
        n = level_extent(expr.operand, sizes)
        return expr.factor * (n - 1) + 1 if n else 0
    raise TypeError(f"not a level expression: {expr!r}")


def level_origin(expr: Expr, sizes: dict[str, int]) -> int:
    """Smallest coordinate of a level: ``-(n_e - 1)`` for ``d - e``, else 0."""
    if isinstance(expr, Sub):
        return -max(level_extent(expr.right, sizes) - 1, 0)
    return 0


def analyze(dims: Sequence[Dimension], levels: Sequence[Level], pos_width: int, crd_width: int
            ) -> tuple[Expr, ...]:
    """Check every validity rule; return the inverse map (see module docstring)."""
    for name, width in (("posWidth", pos_width), ("crdWidth", crd_width)):
        if width not in WIDTHS:
            raise FormatSemanticError(f"{name} must be one of 0, 8, 16, 32, 64, got {width!r}")
    names = {d.name for d in dims}
    for k in range(len(levels)):
        check_expression(levels, k, names)
    check_uses(dims, levels)
    for k, level in enumerate(levels):
        try:
            level.type.check(levels, k)
        except FormatSemanticError as exc:
            raise _fail(exc.rule, levels, k) from None
    check_block_maps(levels)
    check_diagonal_maps(levels)
    check_single_storage(dims, levels)
    return inverse(dims, levels)
