"""``structured[n, m]``: exactly n stored entries in every block of m (n:m sparsity).

Buffers: ``crd`` holding the in-block coordinate of each stored entry.
Children of parent position ``p``: positions ``[p * n, (p + 1) * n)``, in
ascending coordinate order; a block with fewer nonzeros is padded with value-0
entries at its lowest unused coordinates. It is the last level, only dense
levels precede it, and its expression is ``d mod m`` with ``d floordiv m`` on
an earlier level. 2:4 sparsity is ``structured[2, 4]``; the UST spelling
``structured(2)`` takes m from the ``mod``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import FormatSemanticError
from ..expr import Dimension, FloorDiv, Mod
from .base import LevelType, int_args, split_spec


@dataclass(frozen=True)
class Structured(LevelType):
    keyword = "structured"
    buffers = ("crd",)

    n: int = 2
    m: int | None = 4  # None until resolved from the level's "d mod m"

    def __post_init__(self):
        super().__post_init__()
        if self.m is not None and not 0 <= self.n <= self.m:
            raise FormatSemanticError(f"structured[n, m] needs 0 <= n <= m, got [{self.n}, {self.m}]")
        if self.m is None and self.n < 0:
            raise FormatSemanticError(f"structured(n) needs n >= 0, got {self.n}")

    @classmethod
    def from_syntax(cls, groups):
        if len(groups) != 1:
            raise FormatSemanticError("'structured' takes [n, m] or (n) and no properties")
        bracket, items = groups[0]
        if bracket == "[":
            n, m = int_args(cls.keyword, items, 2, "[n, m]")
            return cls(n=n, m=m)
        (n,) = int_args(cls.keyword, items, 1, "(n)")
        return cls(n=n, m=None)

    @classmethod
    def from_spec(cls, args):
        params, props = split_spec(args)
        if props:
            raise FormatSemanticError("'structured' levels take no properties")
        if len(params) == 1:
            (n,) = int_args(cls.keyword, params, 1, "n")
            return cls(n=n, m=None)
        n, m = int_args(cls.keyword, params, 2, "n, m")
        return cls(n=n, m=m)

    def params_text(self):
        return f"[{self.n}, {self.m}]"

    def params_repr(self):
        return (str(self.n), str(self.m))

    def resolve(self, expr):
        if not isinstance(expr, Mod) or not isinstance(expr.operand, Dimension):
            raise FormatSemanticError("a structured level's expression must be 'd mod m'")
        if self.m is None:
            return replace(self, m=expr.constant)
        if self.m != expr.constant:
            raise FormatSemanticError(
                f"structured[{self.n}, {self.m}] needs 'mod {self.m}', the level has 'mod {expr.constant}'")
        return self

    def check(self, levels, k):
        if k != len(levels) - 1:
            raise FormatSemanticError("a structured level must be the last level")
        before = [level for level in levels[:k] if level.type.keyword != "dense"]
        if before:
            raise FormatSemanticError(
                f"only dense levels may precede a structured level, not '{before[0].type.keyword}'")
        dim = levels[k].expr.operand
        if FloorDiv(dim, self.m) not in [level.expr for level in levels[:k]]:
            raise FormatSemanticError(f"a structured level needs '{dim} floordiv {self.m}' on an earlier level")
