"""``delta(b)``: compressed, with each coordinate stored as a b-bit gap.

Buffers: ``pos`` and ``crd``. ``crd[k]`` holds how many coordinates were
skipped since the previous stored entry of the segment (for the first entry:
since the segment start), so ``coordinate = previous + 1 + crd[k]`` with
``previous = -1`` at the segment start and every ``crd[k] < 2**b``. A gap
that needs more than ``b`` bits is bridged by padding entries with value 0;
padding never runs past the segment's last real entry.

Example: ``delta(2)`` row ``[1 at 0, 2 at 15]`` (16 columns) stores
``crd = [0, 3, 3, 3, 2]`` and ``values = [1, 0, 0, 0, 2]``.

``delta(b, packed)`` keeps the same gaps bit-packed, ``b`` in {1, 2, 4, 8}
bits per entry in uint32 words: entry ``k`` sits at bit ``(k * b) % 32`` of
word ``k * b // 32`` (the MACKO storage). Coordinates are ordered and unique
by construction, so the level takes no properties.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatSemanticError
from .base import PACKED, LevelType, split_spec

PACKABLE_BITS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Delta(LevelType):
    keyword = "delta"
    buffers = ("pos", "crd")

    bits: int = 8
    packed: bool = False

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 1 <= self.bits <= 32:
            raise FormatSemanticError(f"delta(b) needs 1 <= b <= 32, got {self.bits!r}")
        if self.packed and self.bits not in PACKABLE_BITS:
            raise FormatSemanticError(
                f"delta({self.bits}, packed) needs b in {{1, 2, 4, 8}} so entries tile 32-bit words")

    @classmethod
    def from_syntax(cls, groups):
        if not groups or groups[0][0] != "(" or len(groups) > 1:
            raise FormatSemanticError("'delta' takes its width in parentheses: delta(b) or delta(b, packed)")
        items = groups[0][1]
        packed = len(items) == 2 and items[1] == PACKED
        if len(items) not in (1, 2) or (len(items) == 2 and not packed) or not _is_int(items[0]):
            raise FormatSemanticError(f"'delta' takes (b) or (b, packed), got {tuple(items)!r}")
        return cls(bits=items[0], packed=packed)

    @classmethod
    def from_spec(cls, args):
        params, props = split_spec(args)
        packed = PACKED in params or True in params[1:]
        ints = [p for p in params if _is_int(p)]
        if len(ints) != 1 or len(params) - len(ints) > int(packed):
            raise FormatSemanticError(f"(LevelFormat.DELTA, b[, 'packed']) expected, got {tuple(args)!r}")
        return cls(bits=ints[0], packed=packed, properties=tuple(props))

    def params_text(self):
        return f"({self.bits}, {PACKED})" if self.packed else f"({self.bits})"

    def params_repr(self):
        return (str(self.bits), repr(PACKED)) if self.packed else (str(self.bits),)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
