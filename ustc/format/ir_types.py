"""``Level``: one level of a format, an expression and a level type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .expr import Expr
from .levels import LevelType


@dataclass(frozen=True)
class Level:
    """A level: the coordinate ``expr`` of the dimensions, stored as ``type``."""

    expr: Expr
    type: LevelType

    def text(self, rename: Callable[[str], str] = str) -> str:
        return f"{self.expr.render(rename)} : {self.type.text()}"

    def __str__(self) -> str:
        return self.text()
