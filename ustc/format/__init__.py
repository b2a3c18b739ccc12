"""The format IR: expressions, level types, ``TensorFormat`` and the DSL parser."""

from .expr import Add, Const, Dimension, Expr, FloorDiv, Mod, Mul, Sub
from .ir import TensorFormat
from .ir_types import Level
from .levels import LEVEL_TYPES, LevelFormat, LevelProperty, LevelType
from .parser import parse

__all__ = ["Add", "Const", "Dimension", "Expr", "FloorDiv", "Mod", "Mul", "Sub", "TensorFormat", "Level",
           "LEVEL_TYPES", "LevelFormat", "LevelProperty", "LevelType", "parse"]
