"""``TensorFormat``: the validated, frozen format IR.

A format is a tuple of dimensions, a tuple of levels (expression + level
type) and optional index widths. Construction validates it (see
``semantics``); equality and hashing go by the canonical text, which renames
dimensions to ``d0, d1, ...``, so ``parse(str(f)) == f`` for every ``f``::

    >>> i, j = Dimension("i"), Dimension("j")
    >>> csc = TensorFormat([i, j], {j: LevelFormat.DENSE, i: LevelFormat.COMPRESSED})
    >>> str(csc)
    '(d0, d1) -> (d1 : dense, d0 : compressed)'
    >>> csc
    [i, j] -> (j: <LevelFormat.DENSE>, i: <LevelFormat.COMPRESSED>)
    >>> csc == TensorFormat.parse("(r, c) -> (c : dense, r : compressed)")
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping, Sequence

from ..errors import FormatError, FormatSemanticError
from . import semantics
from .expr import Dimension, Expr, canonical
from .ir_types import Level
from .levels import BY_KEYWORD, Compressed, Dense, LevelFormat, LevelType


@dataclass(frozen=True, eq=False, repr=False)
class TensorFormat:
    """A sparse tensor format (see the module docstring)."""

    dims: tuple[Dimension, ...]
    levels: tuple[Level, ...]
    pos_width: int = 0
    crd_width: int = 0
    name: str | None = field(default=None, compare=False)
    dim_exprs: tuple[Expr, ...] = field(init=False)

    def __post_init__(self):
        dims = tuple(_dimension(d) for d in self.dims)
        levels = _levels(self.levels)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "dim_exprs", semantics.analyze(dims, levels, self.pos_width, self.crd_width))

    # -- text -------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "TensorFormat":
        """Parse DSL text or a named format (``"CSR"``, ``"BSR(2, 2)"``); cached by text."""
        from .parser import parse

        return parse(text)

    def render(self, rename=None) -> str:
        """DSL text; ``rename`` maps dimension names (default: keep them)."""
        rename = rename or str
        order = {d.name: k for k, d in enumerate(self.dims)}
        dims = ", ".join(rename(d.name) for d in self.dims)
        levels = ", ".join(f"{canonical(lv.expr, order).render(rename)} : {lv.type.text()}"
                           for lv in self.levels)
        widths = "".join(f", {key} = {w}" for key, w in (("posWidth", self.pos_width),
                                                          ("crdWidth", self.crd_width)) if w)
        return f"({dims}) -> ({levels}){widths}"

    @cached_property
    def signature(self) -> str:
        """The canonical text: dimensions renamed ``d0, d1, ...``."""
        names = {d.name: f"d{k}" for k, d in enumerate(self.dims)}
        return self.render(names.__getitem__)

    @property
    def text(self) -> str:
        """DSL text with the format's own dimension names."""
        return self.render()

    @cached_property
    def digest(self) -> str:
        """sha256 of the signature: stable across processes, unlike ``hash``."""
        return hashlib.sha256(self.signature.encode()).hexdigest()

    def __str__(self) -> str:
        return self.signature

    def __repr__(self) -> str:
        levels = ", ".join(f"{lv.expr}: {lv.type.ust_repr()}" for lv in self.levels)
        widths = "".join(f", {key}={w}" for key, w in (("posWidth", self.pos_width),
                                                        ("crdWidth", self.crd_width)) if w)
        return f"[{', '.join(d.name for d in self.dims)}] -> ({levels}){widths}"

    def __eq__(self, other) -> bool:
        if not isinstance(other, TensorFormat):
            return NotImplemented
        return self.signature == other.signature

    def __hash__(self) -> int:
        return hash(self.signature)

    def named(self, name: str) -> "TensorFormat":
        """The same format carrying a display name (names do not affect equality)."""
        return TensorFormat(self.dims, self.levels, self.pos_width, self.crd_width, name=name)

    # -- derived facts ------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.dims)

    rank = ndim

    @property
    def nlevels(self) -> int:
        return len(self.levels)

    @property
    def level_formats(self) -> tuple[LevelFormat, ...]:
        return tuple(lv.type.format for lv in self.levels)

    @property
    def batch_levels(self) -> int:
        """Number of leading batch levels."""
        return sum(lv.type.batched for lv in self.levels)

    @property
    def holds_any_pattern(self) -> bool:
        """Every sparsity pattern fits (no level like n:m that caps its entries, no one-child
        level below a unique one, which allows one entry per coordinate above it)."""
        levels = self.levels
        return all(lv.type.any_pattern and not (lv.type.one_child and k and levels[k - 1].type.unique)
                   for k, lv in enumerate(levels))

    @property
    def compressed_rows(self) -> bool:
        """Two plain levels, dense then ordered unique compressed (CSR, CSC): each row's
        coordinates are one slice of ``crd`` and ``pos`` is the row offsets."""
        return (self.nlevels == 2 and all(isinstance(lv.expr, Dimension) for lv in self.levels)
                and self.levels[0].type == Dense() and self.levels[1].type == Compressed())

    @property
    def dense_storage(self) -> bool:
        """Every level is a linearised full level: every coordinate stored, no buffers."""
        return all(lv.type.full and not lv.type.batched and not lv.type.completes_affine for lv in self.levels)

    @property
    def all_dense(self) -> bool:
        """Dense storage with one level per dimension (a dense array, maybe permuted)."""
        return self.dense_storage and all(isinstance(lv.expr, Dimension) for lv in self.levels)

    @property
    def num_dimensions(self) -> int:
        """Number of dimensions (the tensor's rank); same as ``ndim``."""
        return len(self.dims)

    @property
    def num_levels(self) -> int:
        """Number of storage levels; same as ``nlevels``."""
        return len(self.levels)

    @property
    def dimensions(self) -> tuple[Dimension, ...]:
        """The dimensions, in order; same as ``dims``."""
        return self.dims

    @property
    def is_identity(self) -> bool:
        """One plain level per dimension, in dimension order (CSR, COO, row-major dense)."""
        return (self.nlevels == self.ndim
                and all(isinstance(lv.expr, Dimension) and lv.expr == d for lv, d in zip(self.levels, self.dims)))

    @property
    def is_ordered(self) -> bool:
        """Every level keeps the coordinates of each of its segments sorted."""
        return all(lv.type.ordered for lv in self.levels)

    @property
    def is_unique(self) -> bool:
        """No coordinate of the tensor is stored twice.

        A nonunique level may repeat a coordinate; the repeat is resolved again by a
        unique one-child level below it (COO's ``singleton`` under ``compressed(nonunique)``
        promises that the whole coordinate so far is unique). Other levels pass it on.
        """
        repeats = False
        for lv in self.levels:
            if not lv.type.unique:
                repeats = True
            elif lv.type.one_child:
                repeats = False
        return not repeats

    def level_is_ordered(self, k: int) -> bool:
        """Coordinates of every segment of level ``k`` are sorted."""
        return self.levels[k].type.ordered

    def level_is_unique(self, k: int) -> bool:
        """No coordinate repeats within a segment of level ``k``."""
        return self.levels[k].type.unique

    def dim2lvl(self, dim_indices: Sequence[int], as_size: bool = False) -> list[int]:
        """Level coordinates of the dimension coordinates ``dim_indices`` (a list), or, with
        ``as_size``, the level extents of dimension extents ``dim_indices``."""
        if as_size:
            return list(self.level_shape(dim_indices))
        if len(dim_indices) != self.ndim:
            raise FormatError(f"format has {self.ndim} dimensions, got {len(dim_indices)} coordinates")
        return [int(c) for c in self.level_coordinates([int(c) for c in dim_indices])]

    def lvl2dim(self, lvl_indices: Sequence[int]) -> list[int]:
        """Dimension coordinates of the level coordinates ``lvl_indices`` (the inverse of ``dim2lvl``)."""
        if len(lvl_indices) != self.nlevels:
            raise FormatError(f"format has {self.nlevels} levels, got {len(lvl_indices)} coordinates")
        return [int(c) for c in self.dim_coordinates([int(c) for c in lvl_indices])]

    @property
    def buffers(self) -> tuple[tuple[int, str], ...]:
        """The ``(level, buffer)`` pairs the storage holds, e.g. ``((1, 'pos'), (1, 'crd'))``."""
        return tuple((k, b) for k, lv in enumerate(self.levels) for b in lv.type.buffers)

    def level_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Level extents for dimension extents ``shape``."""
        if len(shape) != self.ndim:
            raise FormatError(f"format has {self.ndim} dimensions, shape {tuple(shape)} has {len(shape)}")
        sizes = {d.name: int(n) for d, n in zip(self.dims, shape)}
        return tuple(semantics.level_extent(lv.expr, sizes) for lv in self.levels)

    def level_origins(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Smallest coordinate of each level (negative only for ``d - e`` levels)."""
        sizes = {d.name: int(n) for d, n in zip(self.dims, shape)}
        return tuple(semantics.level_origin(lv.expr, sizes) for lv in self.levels)

    def level_coordinates(self, coords: Sequence) -> tuple:
        """Level coordinates of dimension coordinates (ints or NumPy arrays)."""
        env = {d.name: c for d, c in zip(self.dims, coords)}
        return tuple(lv.expr.evaluate(env) for lv in self.levels)

    def dim_coordinates(self, level_coords: Sequence) -> tuple:
        """Dimension coordinates of level coordinates: the inverse map."""
        env = {f"l{k}": c for k, c in enumerate(level_coords)}
        return tuple(e.evaluate(env) for e in self.dim_exprs)


def _dimension(d) -> Dimension:
    if isinstance(d, Dimension):
        return d
    if isinstance(d, str):
        return Dimension(d)
    raise FormatError(f"a dimension must be a Dimension or a name, not {d!r}")


def _levels(spec) -> tuple[Level, ...]:
    items: Iterable = spec.items() if isinstance(spec, Mapping) else spec
    out = []
    for k, item in enumerate(items):
        if isinstance(item, Level):
            expr, ltype = item.expr, item.type
        else:
            try:
                raw_expr, raw_type = item
            except (TypeError, ValueError):
                raise FormatError(f"level {k}: expected (expression, level format), got {item!r}") from None
            expr = raw_expr if isinstance(raw_expr, Expr) else _dimension(raw_expr)
            ltype = _level_type(raw_type, k, expr)
        try:
            ltype = ltype.resolve(expr)
        except FormatSemanticError as exc:
            raise FormatSemanticError(exc.rule, level=k, level_text=f"{expr} : {ltype}") from None
        out.append(Level(expr, ltype))
    return tuple(out)


def _level_type(spec, k: int, expr: Expr) -> LevelType:
    if isinstance(spec, LevelType):
        return spec
    head, args = (spec[0], spec[1:]) if isinstance(spec, tuple) and spec else (spec, ())
    if not isinstance(head, LevelFormat):
        raise FormatError(f"level {k} ({expr}): expected a LevelFormat or a tuple starting with one, "
                          f"got {spec!r}")
    try:
        return BY_KEYWORD[head.value].from_spec(args)
    except FormatSemanticError as exc:
        raise FormatSemanticError(exc.rule, level=k, level_text=f"{expr} : {spec!r}") from None
