"""``delta(b)``: compressed, with each coordinate stored as a b-bit gap.

Buffers: ``pos`` and ``crd``. ``crd[k]`` holds how many coordinates were
skipped since the previous stored entry of the segment (for the first entry:
since the segment start), so ``coordinate = previous + 1 + crd[k]`` with
``previous = -1`` at the segment start and every ``crd[k] < 2**b``. A gap
that needs more than ``b`` bits is bridged by padding entries with value 0;
padding never runs past the segment's last real entry.

Example: ``delta(2)`` row ``[1 at 0, 2 at 15]`` (16 columns) stores
``crd = [0, 3, 3, 3, 2]`` and ``values = [1, 0, 0, 0, 2]``.

``delta(b, packed)`` keeps the same gaps bit-packed in uint32 words, ``per =
32 // b`` of them a word, low bits first: entry ``k`` sits at bit
``(k % per) * b`` of word ``k // per`` (for b in {1, 2, 4, 8} that is bit
``(k * b) % 32`` of word ``k * b // 32``: the MACKO storage). ``b`` is one of
:data:`PACKABLE_BITS` = 1, 2, 3, 4, 5, 6, 8, 10, 16: the widest width for each
count of gaps a word (32, 16, 10, 8, 6, 5, 4, 3, 2; b = 3, 5, 6 and 10 leave 2
bits of a word unused). :func:`~.delta_width.choose_width` picks b per matrix from its
gap histogram. Coordinates are ordered and unique by construction, so the
level takes no properties.

Padding can dwarf the real entries (a gap of g costs ``g >> b`` of them), so
``pack`` counts the entries first and raises StorageError, naming the
narrowest width that would fit, when their crd plus values would exceed
:func:`memory_budget` (``USTC_MEMORY_BUDGET`` overrides it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import FormatSemanticError, StorageError
from ...memory import BUDGET_VARIABLE, memory_budget
from ...codegen import loopir as ir
from .base import (PACKED, LevelType, Packed, as_intp, check_range, pos_end, split_spec, store, subscript,
                   unique_append)
from .compressed import Compressed

#: packed widths: the widest b for each number of gaps a 32-bit word holds (a gap never straddles
#: two words; narrower widths with the same count per word would only add padding)
PACKABLE_BITS = (1, 2, 3, 4, 5, 6, 8, 10, 16)


@dataclass(frozen=True)
class Delta(LevelType):
    keyword = "delta"
    buffers = ("pos", "crd")
    stateful = True
    append = True
    pads = True

    bits: int = 8
    packed: bool = False

    @property
    def per_word(self) -> int:
        """Gaps a uint32 word holds when packed (``32 // bits``)."""
        return 32 // self.bits

    @property
    def split_append(self) -> bool:
        """Chunks may be written in parallel unless gaps are bit-packed (a word holds several)."""
        return not self.packed

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 1 <= self.bits <= 32:
            raise FormatSemanticError(f"delta(b) needs 1 <= b <= 32, got {self.bits!r}")
        if self.packed and self.bits not in PACKABLE_BITS:
            raise FormatSemanticError(
                f"delta({self.bits}, packed) needs b in {{{', '.join(map(str, PACKABLE_BITS))}}}: "
                f"the widest width for each number of gaps a 32-bit word holds")

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
        word, at = self._slot(q)
        shifted = ir.Bin(">>", ir.load(acc.crd, word), at)
        return ir.add(1, ir.Bin("&", shifted, ir.Const((1 << self.bits) - 1)))

    def _slot(self, q):
        """``(word index, bit offset)`` of packed entry ``q`` (shifts when ``b`` divides 32)."""
        if 32 % self.bits == 0:
            bit = ir.mul(q, self.bits)
            return ir.Bin(">>", bit, ir.Const(5)), ir.Bin("&", bit, ir.Const(31))
        per = ir.Const(self.per_word)
        return ir.Bin("//", q, per), ir.mul(ir.Bin("%", q, per), self.bits)

    # -- write hooks: append in order, bridging wide gaps with value-0 padding entries --------
    def insert(self, w, p, c):
        n, gap, full = ir.Var(w.count), ir.Var(w.scratch), 1 << self.bits
        prev = ir.Select(ir.Bin("!=", ir.Var(w.last_parent), p), ir.sub(w.lo, 1), ir.Var(w.last_coord))
        pad = (ir.If(w.emit, (self._write_gap(w, n, ir.Const(full - 1)),)), ir.Assign(w.count, ir.Const(1), "+"),
               ir.Assign(w.scratch, ir.sub(gap, full)))
        body = [ir.Assign(w.scratch, ir.sub(ir.sub(c, prev), 1)),
                ir.While(ir.Bin(">=", gap, ir.Const(full)), pad),
                ir.If(w.emit, (self._write_gap(w, n, gap),) + (() if w.root else (store(w.pos, ir.add(p, 1), ir.add(n, 1)),))),
                ir.Assign(w.count, ir.Const(1), "+")]
        return unique_append(w, True, p, c, body), ir.sub(n, 1)

    def _write_gap(self, w, q, gap):
        if not self.packed:
            return store(w.crd, q, gap)
        at, offset = self._slot(q)
        word = ir.Index(at)
        shifted = ir.Bin("<<", gap, offset)
        return ir.Store(w.crd, (word,), ir.Bin("|", ir.Load(w.crd, (word,)), shifted))

    def write_lengths(self, nparents, count):
        return {"pos": nparents + 1, "crd": -(-count // self.per_word) if self.packed else count}

    finalize = Compressed.finalize           # pos[p + 1] of a parent with no children

    # -- batched layout: gaps travel unpacked while batches are joined or split -------------
    def used_entries(self, buffers, nparents):
        out = super().used_entries(buffers, nparents)
        if not self.packed:
            out["crd"] = out["crd"][:int(out["pos"][-1]) if len(out["pos"]) else 0]
        return out

    child_starts = Compressed.child_starts   # segments given by pos, as compressed

    def decode_crd(self, crd, count: int):
        return self.gaps(crd, count) if self.packed else crd[:count]

    def encode_crd(self, crd):
        return pack_bits(crd, self.bits) if self.packed else crd

    # -- storage -----------------------------------------------------------------
    @property
    def crd_dtype(self) -> np.dtype:
        """uint32 words when packed, else the narrowest unsigned type holding b bits."""
        return np.dtype(np.uint32) if self.packed else _narrowest_unsigned(self.bits)

    def gaps(self, crd: np.ndarray, count: int) -> np.ndarray:
        """The ``count`` stored gaps as int64 (unpacking bit-packed words)."""
        return unpack_bits(crd, self.bits, count) if self.packed else np.asarray(crd[:count], dtype=np.int64)

    def positions(self, nparents, extent, buffers):
        count = pos_end(buffers, nparents, nparents + 1)
        room = len(buffers["crd"]) * self.per_word if self.packed else len(buffers["crd"])
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
        every = bool(new.all())  # unique coordinates (the usual case): no copies of parent and crd
        parent, crd = (seg.parent, seg.crd) if every else (seg.parent[new], seg.crd[new])
        gap = row_gaps(parent, crd, seg.lo)
        slots = gap >> self.bits           # padding entries before each real entry
        # sizes before memory: count what the level would store (and refuse) before allocating it
        total = self.require_room(gap, seg.values.dtype.itemsize if seg.values is not None else 8,
                                  seg.where, pads=slots)
        slots += 1
        np.cumsum(slots, out=slots)        # end (exclusive) of each entry's run; int64 as total fits
        slots -= 1                         # now each real entry's position
        ends = np.cumsum(np.bincount(parent, minlength=seg.nparents))  # entries up to each parent
        run_end = np.zeros(seg.nparents + 1, dtype=np.int64)
        has = ends > 0
        run_end[1:][has] = slots[ends[has] - 1] + 1
        gaps = np.full(total, (1 << self.bits) - 1, dtype=_narrowest_unsigned(self.bits))
        gap &= (1 << self.bits) - 1
        gaps[slots] = gap
        del gap
        stored = pack_bits(gaps, self.bits) if self.packed else gaps
        position = slots if every else slots[np.cumsum(new) - 1]
        return Packed({"pos": Compressed().make_pos(np.diff(run_end)), "crd": stored}, position, total)

    def require_room(self, gap: np.ndarray, value_bytes: int = 8, where: str = "", *, pads=None) -> int:
        """The number of entries this level stores for entries skipping ``gap`` coordinates each
        (real ones plus padding), computed without allocating them.

        Raises StorageError when their crd plus values (``value_bytes`` each)
        would exceed :func:`memory_budget`, naming the narrowest width that fits.
        ``gap`` is int64 (``row_gaps``); ``pads``, when given, is ``gap >> bits``
        and may be overwritten on the way to the error.
        """
        if pads is None:
            pads = gap >> self.bits
        widest = int(gap.max()) if len(gap) else 0
        total = _padded_count(pads, widest >> self.bits)
        budget = memory_budget()
        if self.storage_bytes(total, value_bytes) > budget:
            raise StorageError(self._over_budget(where, gap, widest, total, value_bytes, budget, pads))
        return total

    def storage_bytes(self, count: int, value_bytes: int) -> int:
        """Bytes of ``crd`` plus values for ``count`` stored entries of ``value_bytes`` each."""
        crd = -(-count // self.per_word) * 4 if self.packed else count * self.crd_dtype.itemsize
        return crd + count * value_bytes

    def _over_budget(self, where, gap, widest, total, vbytes, budget, scratch) -> str:
        n = len(gap)
        need = self.storage_bytes(total, vbytes)
        where = where or f"level ({self.text()})"
        plural = "s" * (self.bits > 1)
        text = (f"{where}: {self.text()} would store {total:,} entries ({n:,} nonzeros and {total - n:,} "
                f"padding entries bridging gaps wider than {self.bits} bit{plural}), {need:,} bytes "
                f"({_human(need)}) of crd and values, more than the memory budget of {budget:,} bytes "
                f"({_human(budget)}; {BUDGET_VARIABLE} sets it)")
        top = max(1, widest.bit_length())
        fit = _narrowest_fit(gap, top, vbytes, budget, self.packed, scratch)
        if fit is None:
            plain = Delta(bits=min(top, 32))
            count = _padded_count(gap >> plain.bits, widest >> plain.bits)
            return text + (f"; no delta width fits: even {plain.text()} needs "
                           f"{plain.storage_bytes(count, vbytes):,} bytes")
        level, count = fit
        if self.packed and not level.packed:
            text += "; no packed width fits"
        text += (f"; the narrowest width that fits is b = {level.bits}: {level.text()} stores "
                 f"{count:,} entries in {level.storage_bytes(count, vbytes):,} bytes")
        if level.bits < top <= 32:
            text += f" (from b = {top} on, no padding: {n:,} entries)"
        return text

    def check_buffers(self, nparents, extent, lo, buffers):
        pos, crd = np.asarray(buffers["pos"], dtype=np.int64), buffers["crd"]
        if len(pos) != nparents + 1:
            raise StorageError(f"pos has {len(pos)} entries, expected {nparents + 1}")
        Compressed().check_bounds(pos[:-1], pos[1:], len(crd) * self.per_word if self.packed else len(crd))
        gaps = self.gaps(crd, int(pos[-1]))
        if (gaps >= (1 << self.bits)).any():
            q = int(np.argmax(gaps >= (1 << self.bits)))
            raise StorageError(f"crd[{q}] = {gaps[q]} needs more than {self.bits} bits")
        check_range("crd (decoded)", self.unpack(nparents, extent, lo, buffers)[1], lo, extent)


def pack_bits(gaps: np.ndarray, bits: int) -> np.ndarray:
    """Entry k at bit ``(k % per) * b`` of word ``k // per``, ``per = 32 // b`` (low bits first)."""
    per = 32 // bits
    words = np.zeros(-(-len(gaps) // per), dtype=np.uint32)
    for s in range(per):  # one strided pass per slot of the word: no temporary larger than the words
        part = np.asarray(gaps[s::per]).astype(np.uint32)
        part <<= np.uint32(s * bits)
        words[:len(part)] |= part
    return words


def unpack_bits(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of ``pack_bits``: the first ``count`` entries as int64."""
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)
    mask = np.uint32((1 << bits) - 1)
    out = (np.asarray(words, dtype=np.uint32)[:, None] >> shifts) & mask
    return out.reshape(-1)[:count].astype(np.int64)


def _padded_count(pads: np.ndarray, largest: int | None = None) -> int:
    """``sum(pads + 1)`` exactly, as a Python int (no int64 overflow whatever the gaps);
    ``largest``: ``pads.max()`` when known."""
    if not len(pads):
        return 0
    if largest is None:
        largest = int(pads.max())
    if largest < (1 << 62) // len(pads):  # the int64 sum cannot overflow
        return int(pads.sum()) + len(pads)
    return (int((pads >> 32).sum()) << 32) + int((pads & 0xFFFFFFFF).sum()) + len(pads)


def row_gaps(parent: np.ndarray, crd: np.ndarray, lo: int) -> np.ndarray:
    """int64 coordinates skipped before each entry: since the previous entry of its parent, or since
    ``lo`` for a parent's first. ``parent`` and ``crd`` are sorted by (parent, crd) and unique."""
    gap = np.empty(len(crd), dtype=np.int64)
    if len(crd):
        np.subtract(crd[1:], crd[:-1], out=gap[1:])
        gap[1:] -= 1
        first = np.flatnonzero(parent[1:] != parent[:-1]) + 1
        gap[0] = crd[0] - lo
        gap[first] = crd[first] - lo
    return gap


def _narrowest_fit(gap: np.ndarray, top: int, vbytes: int, budget: int, packed: bool, scratch=None):
    """``(level, count)`` of the narrowest delta width whose padded storage fits ``budget``, or None.

    Packed levels try the packable widths first, then plain ones. ``top`` is
    the bit length of the widest gap: from there on nothing is padded, so
    wider widths never help. The count falls as b grows while crd bytes per
    entry step up after 8 and 16 bits, so each run of equal entry size is
    bisected (a handful of passes over the gaps, only those wide enough to
    matter, shifted into ``scratch``).
    """
    n = len(gap)
    pool = gap
    if scratch is None or len(scratch) < n:
        scratch = np.empty(n, dtype=np.int64)
    widest = (1 << top) - 1  # at least the widest gap: bounds the sums below
    counts: dict = {}

    def fits(level):
        b = level.bits
        if b not in counts:
            out = np.right_shift(pool, b, out=scratch[:len(pool)])
            counts[b] = _padded_count(out, widest >> b) - len(pool) + n if b < top else n
        return level.storage_bytes(counts[b], vbytes) <= budget

    if packed:
        for b in PACKABLE_BITS:
            level = Delta(bits=b, packed=True)
            if fits(level):
                return level, counts[b]
            if b >= top:
                break
    for lo, hi in ((1, 8), (9, 16), (17, 32)):
        hi = min(hi, max(top, lo))
        if lo > 1:
            pool = pool[pool >= (1 << lo)]  # narrower gaps add no padding at any b >= lo
        if not fits(Delta(bits=hi)):
            if hi >= top:
                return None
            continue
        while lo < hi:  # smallest fitting b in [lo, hi]: equal crd bytes, so fitting is monotone
            mid = (lo + hi) // 2
            if fits(Delta(bits=mid)):
                hi = mid
            else:
                lo = mid + 1
        return Delta(bits=hi), counts[hi]
    return None


def _narrowest_unsigned(bits: int) -> np.dtype:
    return np.dtype(np.uint8 if bits <= 8 else np.uint16 if bits <= 16 else np.uint32)


def _human(nbytes: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} bytes"


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
