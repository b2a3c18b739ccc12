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

import numpy as np

from ...errors import FormatSemanticError, StorageError
from ...codegen import loopir as ir
from .base import PACKED, LevelType, Packed, as_intp, check_range, pos_end, split_spec, subscript
from .compressed import Compressed

PACKABLE_BITS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Delta(LevelType):
    keyword = "delta"
    buffers = ("pos", "crd")
    stateful = True

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
        if len(groups) > 1:
            raise FormatSemanticError("'delta' levels take no properties: their coordinates are ordered and "
                                      "unique by construction")
        if not groups or groups[0][0] != "(":
            raise FormatSemanticError("'delta' takes its width in parentheses: delta(b) or delta(b, packed)")
        items = groups[0][1]
        packed = len(items) == 2 and items[1] == PACKED
        if len(items) not in (1, 2) or (len(items) == 2 and not packed) or not _is_int(items[0]):
            raise FormatSemanticError(f"'delta' takes (b) or (b, packed), got {tuple(items)!r}")
        return cls(bits=items[0], packed=packed)

    @classmethod
    def from_spec(cls, args):
        params, props = split_spec(args)
        packed = any(p is True or p == PACKED for p in params[1:])
        ints = [p for p in params if _is_int(p)]
        if len(ints) != 1 or len(params) - len(ints) > int(packed):
            raise FormatSemanticError(f"(LevelFormat.DELTA, b[, 'packed']) expected, got {tuple(args)!r}")
        return cls(bits=ints[0], packed=packed, properties=tuple(props))

    def params_text(self):
        return f"({self.bits}, {PACKED})" if self.packed else f"({self.bits})"

    def params_repr(self):
        return (str(self.bits), repr(PACKED)) if self.packed else (str(self.bits),)

    # -- read hooks: a running coordinate, advanced by 1 + the gap at each position --------
    def coord_start(self, acc):
        return ir.sub(acc.lo, 1)

    def coord_step(self, acc, q):
        """1 + the stored gap at position ``q`` (unpacking bit-packed words)."""
        if not self.packed:
            return ir.add(1, as_intp(ir.load(acc.crd, subscript(q))))
        bit = ir.mul(q, self.bits)
        word = ir.load(acc.crd, ir.Bin(">>", bit, ir.Const(5)))
        shifted = ir.Bin(">>", word, ir.Bin("&", bit, ir.Const(31)))
        return ir.add(1, ir.Bin("&", shifted, ir.Const((1 << self.bits) - 1)))

    # -- batched layout: gaps travel unpacked while batches are joined or split -------------
    def used_entries(self, buffers, nparents):
        out = super().used_entries(buffers, nparents)
        if not self.packed:
            out["crd"] = out["crd"][:int(out["pos"][-1]) if len(out["pos"]) else 0]
        return out

    def child_starts(self, extent, pos, starts):
        return np.asarray(pos, dtype=np.int64)[starts]

    def decode_crd(self, crd, count: int):
        return self.gaps(crd, count) if self.packed else crd[:count]

    def encode_crd(self, crd):
        return pack_bits(crd, self.bits) if self.packed else crd

    # -- storage -----------------------------------------------------------------
    @property
    def crd_dtype(self) -> np.dtype:
        """uint32 words when packed, else the narrowest unsigned type holding b bits."""
        if self.packed:
            return np.dtype(np.uint32)
        return np.dtype(np.uint8 if self.bits <= 8 else np.uint16 if self.bits <= 16 else np.uint32)

    def gaps(self, crd: np.ndarray, count: int) -> np.ndarray:
        """The ``count`` stored gaps as int64 (unpacking bit-packed words)."""
        return unpack_bits(crd, self.bits, count) if self.packed else np.asarray(crd[:count], dtype=np.int64)

    def positions(self, nparents, extent, buffers):
        count = pos_end(buffers, nparents, nparents + 1)
        room = len(buffers["crd"]) * (32 // self.bits) if self.packed else len(buffers["crd"])
        if count > room:
            raise StorageError(f"pos[{nparents}] = {count} exceeds the {room} entries crd holds")
        return count

    def unpack(self, nparents, extent, lo, buffers):
        pos = np.asarray(buffers["pos"], dtype=np.int64)
        count = int(pos[nparents]) if len(pos) else 0
        gaps = self.gaps(buffers["crd"], count)
        parent = np.repeat(np.arange(nparents, dtype=np.int64), np.diff(pos[:nparents + 1]))
        steps = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(gaps + 1, out=steps[1:])
        crd = steps[1:] - steps[pos[parent]] - 1 + lo
        return parent, crd

    def pack(self, seg):
        new = seg.new_positions()
        parent, crd = seg.parent[new], seg.crd[new]
        first = np.ones(len(crd), dtype=bool)
        first[1:] = parent[1:] != parent[:-1]
        previous = np.where(first, seg.lo - 1, np.roll(crd, 1))
        gap = crd - previous - 1
        pads = gap >> self.bits            # padding entries before each real entry
        slots = np.cumsum(pads + 1)        # end (exclusive) of each entry's run
        gaps = np.full(int(slots[-1]) if len(slots) else 0, (1 << self.bits) - 1, dtype=np.int64)
        gaps[slots - 1] = gap & ((1 << self.bits) - 1)
        counts = np.bincount(parent, weights=pads + 1, minlength=seg.nparents).astype(np.int64)
        stored = pack_bits(gaps, self.bits) if self.packed else gaps.astype(self.crd_dtype)
        position = (slots - 1)[np.cumsum(new) - 1]
        return Packed({"pos": Compressed().make_pos(counts), "crd": stored}, position, len(gaps))

    def check_buffers(self, nparents, extent, lo, buffers):
        pos, crd = np.asarray(buffers["pos"], dtype=np.int64), buffers["crd"]
        if len(pos) != nparents + 1:
            raise StorageError(f"pos has {len(pos)} entries, expected {nparents + 1}")
        Compressed().check_bounds(pos[:-1], pos[1:], len(crd) * 32 // self.bits if self.packed else len(crd))
        gaps = self.gaps(crd, int(pos[-1]))
        if (gaps >= (1 << self.bits)).any():
            q = int(np.argmax(gaps >= (1 << self.bits)))
            raise StorageError(f"crd[{q}] = {gaps[q]} needs more than {self.bits} bits")
        check_range("crd (decoded)", self.unpack(nparents, extent, lo, buffers)[1], lo, extent)


def pack_bits(gaps: np.ndarray, bits: int) -> np.ndarray:
    """Entry k at bits ``(k * b) % 32`` of word ``k * b // 32`` (little-endian within the word)."""
    per = 32 // bits
    padded = np.zeros(-(-len(gaps) // per) * per, dtype=np.uint32)
    padded[:len(gaps)] = gaps
    shifts = (np.arange(per, dtype=np.uint32) * bits)
    return np.bitwise_or.reduce(padded.reshape(-1, per) << shifts, axis=1).astype(np.uint32)


def unpack_bits(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of ``pack_bits``: the first ``count`` entries as int64."""
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)
    mask = np.uint32((1 << bits) - 1)
    out = (np.asarray(words, dtype=np.uint32)[:, None] >> shifts) & mask
    return out.reshape(-1)[:count].astype(np.int64)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
