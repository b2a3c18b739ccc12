"""The level-type protocol every level module implements.

A *level type* says how one level of a tensor's storage is kept: which
buffers it owns and which children a parent position has (design §2). Each
level type is a frozen dataclass in its own module; the registry in
``levels/__init__.py`` lists them, and ``LevelFormat`` is derived from it.

The protocol, for a level type class ``T``:

``T.keyword``
    the DSL keyword (``"compressed"``); also the ``LevelFormat`` value.
``T.buffers``
    names of the buffers the level owns, a subset of ``("pos", "crd")``.
``T.from_syntax(groups)`` / ``T.from_spec(args)``
    build from the DSL's argument groups (``delta(4, packed)(...)``) or from
    the object API's tuple tail (``(LevelFormat.DELTA, 4)``).
``t.text()`` / ``t.ust_repr()``
    canonical DSL text / nvmath-style repr of the level type.
``t.ordered`` / ``t.unique``
    whether the coordinates of each segment are sorted / free of repeats.
``t.check(levels, k)``
    rules that involve other levels; raises :class:`FormatSemanticError`.
``t.resolve(expr)``
    the level type completed from its level expression (``structured(n)``
    takes ``m`` from ``d mod m``); most types return ``self``.

Storage hooks (vectorised NumPy; ``P`` parents, coordinates in ``[lo, lo + extent)``):

``t.unpack(P, extent, lo, buffers) -> (parent, crd)``
    for every position ``q`` of the level, ``parent[q]`` (the parent position,
    -1 for a position that belongs to no parent) and ``crd[q]`` (int64).
``t.pack(seg) -> Packed``
    from entries sorted by ``(parent, crd, deeper levels)`` (a :class:`Segments`),
    the level's buffers, each entry's position and the number of positions.
``t.check_buffers(P, extent, lo, buffers) -> None``
    the full validity check; raises :class:`StorageError` naming the buffer and
    the first bad index.

Capabilities (class attributes; the compiler and the storage drivers ask these,
never the keyword; the vocabulary of TACO's ``ModeFormatImpl`` and MLIR's
``SparseTensorLevel``):

``locate``
    random access: the child of parent ``p`` at coordinate ``c`` is position
    ``p * size + (c - lo)``; the level owns no buffers and is *full* (every
    coordinate has a position). Levels without it are *iterated* by position.
``batched``
    (locate levels) positions restart per parent: later buffers gain a leading axis.
``one_child``
    exactly one position per parent position (the parent's own), as singleton:
    a deduplicated parent hands it its whole run of positions.
``coo_parent``
    singleton levels may follow it (the head of a COO region).
``stateful``
    coordinates are decoded from a running state along the segment (delta's
    gaps): the segment is walked in order, one thread at a time.
``any_pattern``
    every sparsity pattern of its parents' coordinates fits (structured's n of
    m does not).
``completes_affine``
    the level walks the dimension that completes an earlier ``d - e`` / ``d + e``
    level (range).

``pads``
    the level stores padding entries whose number depends on a parameter
    (delta's width): when a result is refused for its size, the NumPy pack hook
    names the parameter that would fit.
``append``
    the level can be written in lexicographic order by generated code: one
    :meth:`insert` per stored coordinate tuple, in order (MLIR's
    ``sparse_tensor.insert`` lowering; TACO's append / locate assembly). A level
    that cannot hold every pattern must refuse an overflowing count in
    ``written_positions``, before the filling pass.
``workspace``
    the level can be written when its coordinates arrive in any order under a
    parent, as long as each parent's entries arrive together (TACO's insert
    with an attribute query, MLIR's expanded access pattern): a block row's
    block columns from the rows of a CSR matrix, the diagonals of a matrix
    walked by rows. Its :meth:`workspace_insert` hook uses a workspace of one
    slot per coordinate; only locate levels may lie below it.
``collects``
    (``append`` levels) an entry's position depends on entries of its parent met
    later (structured's padding goes below an entry when its block holds fewer
    than n), so the level is written in three passes of the same code, as a
    workspace level is: count (refusals only), collect the coordinates, then,
    after ``finalize`` has placed them, find every entry's position. Its count is
    a refusal: 0, or 1 + the first parent it cannot write (the host names it); a
    writer in chunks keeps the first chunk's. Its buffers are allocated zeroed.
``split_append``
    (``append`` / ``workspace`` levels) the level can be written in chunks by
    parallel threads, each chunk over its own parents: a chunk that starts
    its ``count`` where the chunks before it ended writes exactly the
    positions a serial write would, and the chunks' counts add up (no buffer
    word is shared between positions; bit-packed delta's words are). A level
    whose parent is the root (``LevelWrite.root``) stores no ``pos`` in the
    kernel: every chunk shares that parent, and ``finalize`` sets its end.

Read hooks (loop IR, given a :class:`LevelAccess` naming the level's buffers):
``segment(acc, p, run_end)``, ``coordinate(acc, q)`` (stateless levels) or
``coord_start(acc)`` / ``coord_step(acc, q)`` (stateful levels), and
``locate_position(acc, p, c)``. Layout hooks for batched storage:
``pos_length``, ``used_entries``, ``child_starts``.

Write hooks (given a :class:`LevelWrite`): ``insert(w, p, c)`` returns the loop
IR that finds or makes the position of coordinate ``c`` under parent position
``p`` (writing buffers only while ``w.emit`` holds, so the same code counts in a
first pass and fills in a second) and that position; on the host,
``written_positions`` turns the kernel's count into the level's position count,
``write_lengths`` sizes the buffers before anything is allocated, and
``finalize`` completes them (``pos`` of parents that got no children).

``workspace_insert(w, p, c)`` writes a ``workspace`` level in three passes of
the same code (``w.emit`` false: count; ``w.emit`` true but not ``w.last_pass``:
collect the coordinates; ``w.last_pass``: fill): a coordinate counts the first
time it is met under its parent (the workspace ``w.work`` holds, per
coordinate, the last parent that met it); the collecting pass appends it; the
filling pass, at each new parent, sorts the parent's segment (the staged sort)
and records each coordinate's position in the workspace, where every entry then
finds its own. ``finalize`` runs between the last two passes too, so segments
of parents without children are in place before they are read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

import numpy as np

from ...codegen import loopir as ir
from ...errors import FormatSemanticError, StorageError

if TYPE_CHECKING:  # pragma: no cover
    from ..ir import Level

# One argument group of the DSL: the bracket that opened it and its items.
Group = tuple[str, tuple["int | str", ...]]


class _UstEnum(enum.Enum):
    """An enum whose repr is ``<Class.MEMBER>``, as nvmath-python prints it."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}>"

    def __str__(self) -> str:
        return self.value


class LevelProperty(_UstEnum):
    """Level properties, in canonical order."""

    NONUNIQUE = "nonunique"
    NONORDERED = "nonordered"
    SOA = "soa"


PACKED = "packed"  # the delta(b, packed) flag


@dataclass(frozen=True)
class LevelAccess:
    """How generated code names one stored level: its buffers (``{tensor}_lvl{k}_pos`` ...),
    its extent and its smallest coordinate, as loop-IR expressions."""

    pos: str
    crd: str
    size: ir.Expr
    lo: ir.Expr


@dataclass(frozen=True)
class LevelWrite:
    """How a generated kernel names one level of the tensor it writes: the buffers, extent and
    smallest coordinate, the insertion state (``count`` positions so far; ``last_parent`` and
    ``last_coord`` of the last one; ``scratch``, a local), ``emit``, true in the passes that write
    buffers, ``last_pass``, true in the pass that writes values, ``work``, the workspace of a
    level written through :meth:`LevelType.workspace_insert` (else empty), ``root``: the
    level's only parent is the root (level 0), so its ``pos`` is left to ``finalize``,
    ``hole`` / ``key``: locals of :func:`sort_segment`, and ``coo_region``: the next level is
    a one-child level (a singleton), so each coordinate tuple below needs a position of its
    own even where this level's coordinate repeats."""

    pos: str
    crd: str
    size: ir.Expr
    lo: ir.Expr
    count: str
    last_parent: str
    last_coord: str
    scratch: str
    emit: ir.Expr
    last_pass: ir.Expr | None = None
    work: str = ""
    root: bool = False
    hole: str = ""
    key: str = ""
    coo_region: bool = False

    @property
    def access(self) -> LevelAccess:
        """The same level as the read hooks name it."""
        return LevelAccess(self.pos, self.crd, self.size, self.lo)


@dataclass(frozen=True)
class LevelType:
    """Base of all level types; see the module docstring for the protocol."""

    keyword: ClassVar[str] = ""
    buffers: ClassVar[tuple[str, ...]] = ()
    allowed_properties: ClassVar[frozenset[LevelProperty]] = frozenset()
    # capabilities (module docstring)
    locate: ClassVar[bool] = False
    batched: ClassVar[bool] = False
    one_child: ClassVar[bool] = False
    coo_parent: ClassVar[bool] = False
    stateful: ClassVar[bool] = False
    any_pattern: ClassVar[bool] = True
    completes_affine: ClassVar[bool] = False
    append: ClassVar[bool] = False
    workspace: ClassVar[bool] = False
    collects: ClassVar[bool] = False
    split_append: ClassVar[bool] = False
    pads: ClassVar[bool] = False

    properties: tuple[LevelProperty, ...] = ()

    def __post_init__(self):
        props = tuple(self.properties)
        for prop in props:
            if not isinstance(prop, LevelProperty):
                raise FormatSemanticError(f"{prop!r} is not a level property")
            if prop not in self.allowed_properties:
                allowed = ", ".join(p.value for p in LevelProperty if p in self.allowed_properties)
                raise FormatSemanticError(
                    f"'{self.keyword}' levels take no property '{prop.value}'"
                    + (f" (allowed: {allowed})" if allowed else " (they take no properties)"))
        if len(set(props)) != len(props):
            raise FormatSemanticError(f"a property is repeated on '{self.keyword}'")
        object.__setattr__(self, "properties", tuple(p for p in LevelProperty if p in props))

    # -- construction ----------------------------------------------------
    @classmethod
    def from_syntax(cls, groups: Sequence[Group]) -> "LevelType":
        """Build from the DSL: by default at most one ``(property, ...)`` group."""
        return cls(properties=cls._properties_from(groups))

    @classmethod
    def from_spec(cls, args: Sequence[object]) -> "LevelType":
        """Build from the object API: by default only LevelProperty members."""
        if any(not isinstance(a, LevelProperty) for a in args):
            raise FormatSemanticError(f"'{cls.keyword}' takes only level properties, got {tuple(args)!r}")
        return cls(properties=tuple(args))

    @classmethod
    def _properties_from(cls, groups: Sequence[Group]) -> tuple[LevelProperty, ...]:
        if not groups:
            return ()
        if len(groups) > 1 or groups[0][0] != "(":
            raise FormatSemanticError(f"'{cls.keyword}' takes one parenthesised property list")
        return tuple(_property(item, cls.keyword) for item in groups[0][1])

    # -- description ------------------------------------------------------
    @property
    def format(self):
        from . import LevelFormat

        return LevelFormat(self.keyword)

    @property
    def ordered(self) -> bool:
        return LevelProperty.NONORDERED not in self.properties

    @property
    def unique(self) -> bool:
        return LevelProperty.NONUNIQUE not in self.properties

    def params_text(self) -> str:
        """Text between the keyword and the properties, e.g. ``(4, packed)``."""
        return ""

    def params_repr(self) -> tuple[str, ...]:
        """Parameters as they appear in the nvmath-style repr tuple."""
        return ()

    def text(self) -> str:
        props = ", ".join(p.value for p in self.properties)
        return self.keyword + self.params_text() + (f"({props})" if props else "")

    def ust_repr(self) -> str:
        items = [repr(self.format), *self.params_repr(), *(repr(p) for p in self.properties)]
        return items[0] if len(items) == 1 else "(" + ", ".join(items) + ")"

    def __str__(self) -> str:
        return self.text()

    # -- rules --------------------------------------------------------------
    def check(self, levels: Sequence["Level"], k: int) -> None:
        """Rules that involve other levels; the default has none."""

    def resolve(self, expr) -> "LevelType":
        return self

    # -- storage -------------------------------------------------------------
    def unpack(self, nparents: int, extent: int, lo: int, buffers: dict) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError(f"{self.keyword} has no storage hooks")

    def pack(self, seg: "Segments") -> "Packed":
        raise NotImplementedError(f"{self.keyword} has no storage hooks")

    def positions(self, nparents: int, extent: int, buffers: dict) -> int:
        """Number of positions of the level (O(1): reads at most one buffer entry).

        Raises StorageError when a buffer's length cannot fit ``nparents``.
        Default (dense, batch, range): ``nparents * extent``.
        """
        return nparents * extent

    def check_buffers(self, nparents: int, extent: int, lo: int, buffers: dict) -> None:
        """Default: nothing beyond what ``unpack`` needs."""

    def check_safe(self, nparents: int, extent: int, lo: int, buffers: dict) -> None:
        """What a kernel needs to stay inside every buffer: positions that do not decrease and
        stay within the next buffer, coordinates within ``[lo, lo + extent)``; order and
        uniqueness are not looked at (that is :meth:`check_buffers`). Raises StorageError naming
        the buffer and index. Default: :meth:`check_buffers` (the full check is always safe)."""
        self.check_buffers(nparents, extent, lo, buffers)

    # -- batched layout (one batch's buffers; ustc.tensor.batch) ------------------------
    def pos_length(self, nparents: int) -> int:
        """Entries of ``pos`` for ``nparents`` parents (levels with a pos buffer)."""
        return nparents + 1

    def used_entries(self, buffers: dict, nparents: int) -> dict:
        """``buffers`` cut to what ``nparents`` parents use (a batch row's padded tail dropped)."""
        out = dict(buffers)
        if "pos" in out:
            out["pos"] = out["pos"][:self.pos_length(nparents)]
        return out

    def child_starts(self, extent: int, pos, starts: np.ndarray) -> np.ndarray:
        """First child position of every parent position in ``starts`` (segments back to back)."""
        return starts * extent

    def shift_pos(self, pos: np.ndarray, offset: int, last: bool) -> np.ndarray:
        """One batch's ``pos`` as part of a flat ``pos`` starting at position ``offset``."""
        return (pos if last else pos[:-1]) + offset

    def batch_pos(self, pos: np.ndarray, starts: np.ndarray, b: int, base: int) -> np.ndarray:
        """Batch ``b``'s slice of a flat ``pos`` (parents ``starts[b]:starts[b + 1]``), rebased."""
        return pos[starts[b]:starts[b + 1] + 1] - base

    def empty_pos_length(self) -> int:
        """Entries of ``pos`` for no parents."""
        return self.pos_length(0)

    def decode_crd(self, crd: np.ndarray, count: int) -> np.ndarray:
        """The first ``count`` coordinates (or gaps) one per entry (bit-packed levels unpack)."""
        return crd[:count]

    def encode_crd(self, crd: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`decode_crd` for a whole buffer."""
        return crd

    # -- read hooks (loop IR) -------------------------------------------------------------
    @property
    def iterate(self) -> bool:
        """Walked by position (the opposite of ``locate``)."""
        return not self.locate

    @property
    def full(self) -> bool:
        """Every coordinate of the extent has a position."""
        return self.locate

    def segment(self, acc: LevelAccess, p: ir.Expr, run_end: ir.Expr | None) -> tuple[ir.Expr, ir.Expr]:
        """``[start, stop)``: the positions of parent position ``p``'s children (default: ``pos``).
        ``run_end`` is set when the parent was deduplicated (only ``one_child`` levels see it)."""
        return (as_intp(ir.load(acc.pos, subscript(p))), as_intp(ir.load(acc.pos, subscript(ir.add(p, 1)))))

    def coordinate(self, acc: LevelAccess, q: ir.Expr) -> ir.Expr:
        """The coordinate at position ``q`` (stateless levels; default: ``crd[q]``)."""
        return as_intp(ir.load(acc.crd, subscript(q)))

    def coord_start(self, acc: LevelAccess) -> ir.Expr:  # pragma: no cover - stateful levels override
        raise NotImplementedError(f"{self.keyword} keeps no coordinate state")

    def coord_step(self, acc: LevelAccess, q: ir.Expr) -> ir.Expr:  # pragma: no cover - stateful levels override
        raise NotImplementedError(f"{self.keyword} keeps no coordinate state")

    def locate_position(self, acc: LevelAccess, p: ir.Expr, c: ir.Expr) -> ir.Expr:
        """``locate`` levels: the position of coordinate ``c`` under parent position ``p``."""
        return ir.add(ir.mul(p, acc.size), ir.sub(c, acc.lo))


    # -- write hooks (loop IR; module docstring) ---------------------------------------------
    def insert(self, w: LevelWrite, p: ir.Expr, c: ir.Expr) -> tuple[list[ir.Stmt], ir.Expr]:
        """Locate levels: the position is computed, nothing is written."""
        if not self.locate:  # pragma: no cover - appendable iterated levels override
            raise NotImplementedError(f"{self.keyword} levels cannot be written in order")
        return [], self.locate_position(w.access, p, c)

    def workspace_insert(self, w: LevelWrite, p: ir.Expr, c: ir.Expr) -> tuple[list[ir.Stmt], ir.Expr]:
        """``workspace`` levels: the loop IR that counts, collects or places coordinate ``c`` under
        parent position ``p`` and the position it takes (read only in the last pass)."""
        raise NotImplementedError(f"{self.keyword} levels cannot be written through a workspace")

    def written_positions(self, nparents: int, extent: int, counted: int) -> int:
        """Positions of the written level: ``counted`` is the kernel's ``count`` for it."""
        return nparents * extent if self.locate else counted

    def write_lengths(self, nparents: int, count: int) -> dict[str, int]:
        """Length of each buffer the kernel writes, for ``nparents`` parents and ``count`` positions."""
        return {}

    def finalize(self, buffers: dict, nparents: int, count: int) -> dict:
        """The level's buffers once the kernel wrote them (default: as written)."""
        return buffers


def unique_append(w: LevelWrite, unique: bool, p: ir.Expr, c: ir.Expr,
                  body: list[ir.Stmt]) -> list[ir.Stmt]:
    """``body`` (which appends positions) run when coordinate ``c`` under ``p`` is not the last
    position's, then the state updated: in-order insertion meets a repeated (parent, coordinate)
    only right after its first time. A nonunique level runs ``body`` for every entry only where
    singletons follow (``w.coo_region``: every tuple below gets its own position, as in COO);
    with any other child a repeated coordinate shares its position, as the pack oracle stores
    it (one position per distinct coordinate group, :meth:`Segments.new_positions`)."""
    body = body + [ir.Assign(w.last_parent, p), ir.Assign(w.last_coord, c)]
    if not unique and w.coo_region:
        return body
    new = ir.disj([ir.Bin("!=", ir.Var(w.last_parent), p), ir.Bin("!=", ir.Var(w.last_coord), c)])
    return [ir.If(new, tuple(body))]


SHORT_SEGMENT = 32  # segments up to this long are insertion-sorted (a library sort call costs more)


def sort_segment(w: LevelWrite, start: ir.Expr, stop: ir.Expr) -> ir.Stmt:
    """Sort ``w.crd[start:stop]`` in place: an insertion sort (locals ``w.scratch``, ``w.hole``,
    ``w.key``) for a short segment (block columns of a block row), the library's sort above."""
    a, q, key = w.scratch, w.hole, w.key
    start, stop = signed(start), signed(stop)  # the hole walks down to start - 1
    shift = ir.While(ir.conj([ir.Bin(">=", ir.Var(q), start), ir.Bin(">", ir.load(w.crd, subscript(ir.Var(q))), ir.Var(key))]),
                     (ir.Store(w.crd, (subscript(ir.add(ir.Var(q), 1)),), ir.load(w.crd, subscript(ir.Var(q)))),
                      ir.Assign(q, ir.sub(ir.Var(q), 1))))
    insertion = ir.For(a, ir.add(start, 1), stop, (ir.Assign(key, ir.load(w.crd, subscript(ir.Var(a)))),
                                                    ir.Assign(q, ir.sub(ir.Var(a), 1)), shift,
                                                    ir.Store(w.crd, (subscript(ir.add(ir.Var(q), 1)),), ir.Var(key))))
    return ir.If(ir.Bin("<=", ir.sub(stop, start), ir.Const(SHORT_SEGMENT)), (insertion,),
                 (ir.Sort(w.crd, start, stop),))


def store(array: str, index: ir.Expr, value: ir.Expr) -> ir.Stmt:
    return ir.Store(array, (subscript(index),), value)


def subscript(q: ir.Expr) -> ir.Expr:
    """A position as a subscript: positions are never negative, so targets may skip the wrap check."""
    return q if isinstance(q, (ir.Const, ir.Index)) else ir.Index(q)


def signed(e: ir.Expr) -> ir.Expr:
    """``e`` as a signed machine integer (:func:`as_intp`) unless it is one already."""
    if isinstance(e, ir.Const) or (isinstance(e, ir.Call) and e.fn == "np.intp"):
        return e
    return as_intp(e)


def as_intp(load: ir.Expr) -> ir.Expr:
    """An index buffer's element as a signed machine integer: narrow unsigned buffers (uint8,
    uint16 from small widths) mixed with signed loop variables would otherwise promote to float."""
    return ir.Call("np.intp", (load,))


def pos_end(buffers: dict, nparents: int, length: int) -> int:
    """``pos[nparents]`` after checking that ``pos`` has ``length`` entries."""
    pos = buffers["pos"]
    if len(pos) != length:
        raise StorageError(f"pos has {len(pos)} entries, expected {length} for {nparents} parent positions")
    return int(pos[nparents]) if nparents < length else int(pos[-1])


@dataclass
class Segments:
    """Entries at one level, sorted by (parent, crd, deeper levels).

    ``parent`` and ``crd`` are int64 arrays of equal length; ``nparents`` is the
    number of positions of the previous level; coordinates lie in
    ``[lo, lo + extent)``. ``group`` holds the coordinate arrays that identify a
    position: ``[crd]``, plus the coordinates of the singleton levels that
    follow (a COO region gets one position per distinct coordinate tuple).
    ``prefix`` (singleton levels only) holds the coordinates above it in its
    COO region, with the region's parent first. ``values`` are the entries'
    values (structured pruning looks at them).
    """

    parent: np.ndarray
    crd: np.ndarray
    nparents: int
    extent: int
    lo: int
    group: list
    prefix: list | None = None
    values: np.ndarray | None = None
    prune: bool = False
    where: str = ""

    def new_positions(self) -> np.ndarray:
        """True where an entry starts a new position: its parent or its group changes."""
        new = np.ones(len(self.crd), dtype=bool)
        if len(new) > 1:
            np.not_equal(self.parent[1:], self.parent[:-1], out=new[1:])
            for c in self.group:
                new[1:] |= c[1:] != c[:-1]
        return new

    def repeated(self, keys: list, new: np.ndarray) -> int | None:
        """Index of the first new position whose ``keys`` equal the previous position's, else None."""
        starts = np.flatnonzero(new)
        if len(starts) < 2:
            return None
        same = np.ones(len(starts) - 1, dtype=bool)
        for k in keys:
            picked = k[starts]
            same &= picked[1:] == picked[:-1]
        return int(starts[int(np.argmax(same)) + 1]) if same.any() else None


@dataclass
class Packed:
    """What ``pack`` returns: buffers, each entry's position, the position count,
    and (for levels that may drop entries) a mask of the entries kept."""

    buffers: dict
    position: np.ndarray
    count: int
    keep: np.ndarray | None = None


def prefix_sum(counts: np.ndarray) -> np.ndarray:
    """``[0, c0, c0 + c1, ...]`` as int64: positions of segments of ``counts`` entries back to back."""
    pos = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=pos[1:])
    return pos


def segment_parents(pos_lo: np.ndarray, pos_hi: np.ndarray, count: int) -> np.ndarray:
    """``parent[q]`` for positions ``q < count`` covered by segments ``[lo[p], hi[p])``; -1 elsewhere."""
    lengths = (pos_hi - pos_lo).astype(np.int64)
    parent = np.full(count, -1, dtype=np.int64)
    if not lengths.any():
        return parent
    owners = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.repeat(pos_lo.astype(np.int64) - np.cumsum(lengths) + lengths, lengths)
    parent[starts + np.arange(len(owners), dtype=np.int64)] = owners
    return parent


def dense_unpack(nparents: int, extent: int, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``p * extent + c``: parent ``p`` and coordinate ``lo + c``."""
    q = np.arange(nparents * extent, dtype=np.int64)
    return (q // extent if extent else q), (q % extent + lo if extent else q)


def dense_pack(seg: "Segments") -> "Packed":
    return Packed({}, seg.parent * seg.extent + (seg.crd - seg.lo), seg.nparents * seg.extent)


def _property(item: "int | str", keyword: str) -> LevelProperty:
    try:
        return LevelProperty(item)
    except ValueError:
        names = ", ".join(p.value for p in LevelProperty)
        raise FormatSemanticError(f"unknown property {item!r} on '{keyword}' (known: {names})") from None


def int_args(keyword: str, items: Sequence["int | str"], count: int, what: str) -> tuple[int, ...]:
    """Exactly ``count`` integer items, else a semantic error naming ``what``."""
    if len(items) != count or any(not isinstance(x, int) or isinstance(x, bool) for x in items):
        raise FormatSemanticError(f"'{keyword}' takes {what}, got {tuple(items)!r}")
    return tuple(items)


def split_spec(args: Sequence[object]) -> tuple[list[object], list[LevelProperty]]:
    """Split an object-API tuple tail into parameters and properties."""
    params = [a for a in args if not isinstance(a, LevelProperty)]
    props = [a for a in args if isinstance(a, LevelProperty)]
    return params, props


def check_range(name: str, crd: np.ndarray, lo: int, extent: int, first: int = 0) -> None:
    """Every coordinate lies in ``[lo, lo + extent)``, else StorageError at the first bad index
    (``crd`` may be a slice starting at index ``first`` of the named buffer). The common case,
    all in range, costs a min and a max (no temporary)."""
    if len(crd) == 0 or (int(crd.min()) >= lo and int(crd.max()) < lo + extent):
        return
    bad = (crd < lo) | (crd >= lo + extent)
    q = int(np.argmax(bad))
    raise StorageError(f"{name}[{q + first}] = {crd[q]} is outside [{lo}, {lo + extent})")


def check_segments(crd: np.ndarray, parent: np.ndarray, ordered: bool, unique: bool) -> None:
    """Within each segment (equal ``parent``): sorted if ``ordered``; no repeats if ``unique``."""
    if len(crd) < 2:
        return
    same = parent[1:] == parent[:-1]
    c = crd.astype(np.int64)
    if ordered:
        bad = same & ((c[1:] <= c[:-1]) if unique else (c[1:] < c[:-1]))
        if bad.any():
            q = int(np.argmax(bad)) + 1
            what = "repeats or decreases" if unique else "decreases"
            raise StorageError(f"crd[{q}] = {c[q]} {what} within its segment (level claims ordered"
                               f"{' and unique' if unique else ''})")
    elif unique:
        order = np.lexsort((c, parent))
        dup = (parent[order][1:] == parent[order][:-1]) & (c[order][1:] == c[order][:-1])
        if dup.any():
            q = int(order[int(np.argmax(dup)) + 1])
            raise StorageError(f"crd[{q}] = {c[q]} repeats within its segment (level claims unique)")
