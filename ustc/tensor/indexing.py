"""NumPy-style indexing of ustc Tensors, on every format: ``A[i, j]``, ``A[i0:i1]``, ``A[:, j]``,
integer arrays, boolean masks, ``None`` and ``...``, and ``A[...] = v``.

    >>> import numpy as np, ustc
    >>> A = ustc.Tensor.from_dense(np.array([[1., 0, 2], [0, 3, 0], [4, 0, 5]]), "CSR")
    >>> float(A[2, 2]), float(A[-1, 1])
    (5.0, 0.0)
    >>> B = A[1:]                                    # a CSR view: crd and values are A's memory
    >>> B.format == A.format, np.shares_memory(B.values, A.values), B.to_dense().tolist()
    (True, True, [[0.0, 3.0, 0.0], [4.0, 0.0, 5.0]])
    >>> A[[2, 0]][:, [True, False, True]].to_dense().tolist()
    [[4.0, 5.0], [1.0, 2.0]]
    >>> A[0, 1] = 7.0                                # CSR takes insertions
    >>> A.to_dense()[0].tolist()
    [1.0, 7.0, 2.0]

Indexing follows NumPy's rules (integer arrays broadcast together; their result dimensions
go where the first one was when they are adjacent, else first). Integers in every dimension
give a NumPy scalar; anything else a sparse Tensor (an all-dense Tensor indexes as its array).

How it runs, by what is asked:

* ``A[i, j, ...]`` walks the levels with their read hooks (``segment``, ``coordinate``,
  ``locate_position``; stateful levels decode their segment): a locate level computes the
  position, an ordered level binary-searches its segment's coordinates. CSR costs two loads
  and one binary search in the row: O(log row length), never a scan of the entries.
* A slice or an integer on the dimension of the first level, when that level is dense, batch
  or ordered compressed over a plain dimension (CSR and CSC rows and columns, COO, DCSR,
  BatchedCSR batches, CSF): a view. The levels below are cut with their ``child_starts``
  hook; ``crd`` and ``values`` are slices of the tensor's own buffers and ``pos`` is rebased
  (O(rows + entries in the slice)). An integer on a dense first level drops the level, so
  ``A[i]`` of CSR is a 1-D compressed view.
* An integer array on that dimension (dense or batch first level): the subtrees are gathered,
  O(selected entries), in the same format.
* Everything else selects among the stored entries of what the steps above left (vectorised
  NumPy over the coordinate arrays) and builds the result with ``Tensor.from_coo``: in the
  tensor's own format when the rank is kept and the format holds any pattern (for integer
  arrays: also only plain levels, no blocks or diagonals), else a compressed vector, CSR or
  COO of the result's rank.

Assignment ``A[key] = v`` writes stored entries in place in every format (duplicates: the
first one takes the value, the others 0). Entries that are not stored and get a nonzero value
are inserted where the format can grow entry by entry (plain levels, no dense level below a
sparse one, every pattern: CSR, CSC, COO, DCSR, DCSC, DELTA, CSF, BatchedCSR): the storage is
rebuilt in the same format, O(nnz). Formats that can only grow by blocks, diagonals, dense
fibers or n:m groups raise :class:`ustc.UnsupportedOperation` naming the format and suggesting a
conversion. Out-of-range indices raise :class:`ustc.IndexingError` (an ``IndexError``) naming the
dimension and its extent.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
from dataclasses import dataclass, replace

import numpy as np

from ..codegen import loopir as ir
from ..errors import FormatError, IndexingError, ShapeError, UnsupportedOperation
from ..format.expr import Dimension, FloorDiv, Mod
from ..format.ir import TensorFormat
from ..format.levels.base import LevelAccess, LevelType, prefix_sum
from ..format.levels.loose_compressed import LooseCompressed
from . import batch, packages, storage
from .tensor import Tensor

# --------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class Take:
    """An integer index (already within the extent)."""

    k: int


@dataclass(frozen=True)
class Span:
    """A slice: coordinates ``start + step * q`` for ``q`` in ``[0, count)``."""

    start: int
    step: int
    count: int

    def full(self, n: int) -> bool:
        return self.start == 0 and self.step == 1 and self.count == n

    def bounds(self) -> tuple[int, int]:
        """``[lo, hi)``: the smallest range holding every selected coordinate."""
        if self.count == 0:
            return 0, 0
        last = self.start + self.step * (self.count - 1)
        return min(self.start, last), max(self.start, last) + 1


@dataclass(frozen=True)
class Pick:
    """An integer array, broadcast to the advanced indices' shape and flattened."""

    arr: np.ndarray


@dataclass(frozen=True)
class Index:
    """A parsed key: one spec per dimension of the tensor, and the result's dimensions in order
    (``("dim", d)`` for a sliced dimension, ``("new",)`` for None, ``("adv",)`` where the
    advanced indices' shape goes)."""

    specs: tuple
    slots: tuple
    adv_shape: tuple | None
    shape: tuple

    @property
    def scalar(self) -> bool:
        return not self.slots and all(isinstance(s, Take) for s in self.specs)

    @property
    def advanced(self) -> bool:
        return self.adv_shape is not None

    def identity(self, shape) -> bool:
        return (self.adv_shape is None and all(s[0] == "dim" for s in self.slots)
                and all(isinstance(s, Span) and s.full(n) for s, n in zip(self.specs, shape)))

    def with_spec(self, d: int, spec) -> "Index":
        specs = list(self.specs)
        specs[d] = spec
        return replace(self, specs=tuple(specs))

    def without(self, d: int) -> "Index":
        """The key of a tensor whose dimension ``d`` (taken by an integer) is gone."""
        specs = self.specs[:d] + self.specs[d + 1:]
        slots = tuple(("dim", s[1] - (s[1] > d)) if s[0] == "dim" else s for s in self.slots)
        return replace(self, specs=specs, slots=slots)


def _is_int(x) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def _as_array(x) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.to_dense()
    arr = packages.host_array(x) if not isinstance(x, (list, tuple)) else np.asarray(x)
    if arr.dtype == bool or arr.dtype.kind in "iu":
        return arr
    if arr.size == 0:
        return arr.astype(np.intp)
    raise IndexingError(f"only integers, slices (':'), ellipsis ('...'), None and integer or boolean "
                        f"arrays are valid indices; got {type(x).__name__} of dtype {arr.dtype}")


def _wrap(k: int, n: int, d: int) -> int:
    if not -n <= k < n:
        raise IndexingError(f"index {k} is out of range for dimension {d} of extent {n}")
    return k + n if k < 0 else k


def _wrap_array(a: np.ndarray, n: int, d: int) -> np.ndarray:
    a = a.astype(np.int64, copy=False)
    bad = (a < -n) | (a >= n)
    if bad.any():
        raise IndexingError(f"index {a[bad].flat[0]} is out of range for dimension {d} of extent {n}")
    return np.where(a < 0, a + n, a)


def _span(s: slice, n: int, d: int) -> Span:
    for part in (s.start, s.stop, s.step):
        if part is not None and not _is_int(part):
            raise IndexingError(f"slice indices must be integers or None, got {part!r} in dimension {d}")
    if s.step == 0:
        raise IndexingError(f"slice step cannot be zero (dimension {d})")
    start, stop, step = s.indices(n)
    return Span(start, step, len(range(start, stop, step)))


def parse(key, shape) -> Index:
    """The key of ``t[key]`` for a tensor of ``shape``, checked (``IndexingError``)."""
    shape = tuple(shape)
    ndim = len(shape)
    items = key if isinstance(key, tuple) else (key,)
    kinds: list = []
    for x in items:
        if x is None:
            kinds.append(("new", None))
        elif x is Ellipsis:
            kinds.append(("ellipsis", None))
        elif isinstance(x, slice):
            kinds.append(("slice", x))
        elif isinstance(x, (bool, np.bool_)):
            raise IndexingError("a boolean scalar is not a valid index of a ustc Tensor; use a boolean array")
        elif _is_int(x):
            kinds.append(("int", operator.index(x)))
        else:
            arr = _as_array(x)
            if arr.dtype == bool:
                kinds.append(("mask", arr))
            elif arr.ndim == 0:
                kinds.append(("int", int(arr)))
            else:
                kinds.append(("array", arr))
    if sum(k == "ellipsis" for k, _ in kinds) > 1:
        raise IndexingError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k, _ in kinds if k in ("slice", "int", "array")) + \
        sum(max(x.ndim, 1) for k, x in kinds if k == "mask")
    if used > ndim:
        raise IndexingError(f"too many indices: the tensor is {ndim}-D, {used} dimensions were indexed")
    fill = [("slice", slice(None))] * (ndim - used)
    at = next((p for p, (k, _) in enumerate(kinds) if k == "ellipsis"), len(kinds))
    kinds = kinds[:at] + fill + kinds[at + 1:]

    specs: list = [None] * ndim
    order: list = []            # (kind, key position, dimension)
    arrays: dict = {}
    d = 0
    for p, (kind, x) in enumerate(kinds):
        if kind == "new":
            order.append(("new", p, None))
        elif kind == "slice":
            specs[d] = _span(x, shape[d], d)
            order.append(("dim", p, d))
            d += 1
        elif kind == "int":
            specs[d] = Take(_wrap(x, shape[d], d))
            order.append(("int", p, d))
            d += 1
        elif kind == "array":
            arrays[d] = _wrap_array(x, shape[d], d)
            order.append(("adv", p, d))
            d += 1
        else:  # a boolean mask over x.ndim dimensions
            m = x if x.ndim else x.reshape(1)
            want = shape[d:d + m.ndim]
            if m.shape != want:
                raise IndexingError(f"boolean index of shape {m.shape} does not match dimensions "
                                    f"{list(range(d, d + m.ndim))} of extents {want}")
            for dd, a in zip(range(d, d + m.ndim), np.nonzero(m)):
                arrays[dd] = a.astype(np.int64)
                order.append(("adv", p, dd))
            d += m.ndim

    adv_shape = None
    slots: list = []
    if arrays:
        try:
            adv_shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays.values())))
        except ValueError:
            raise IndexingError("shape mismatch: indexing arrays could not be broadcast together with shapes "
                                + " ".join(str(a.shape) for a in arrays.values())) from None
        for dd, a in arrays.items():
            specs[dd] = Pick(np.broadcast_to(a, adv_shape).reshape(-1))
        places = sorted({p for kind, p, _ in order if kind in ("adv", "int")})
        adjacent = places == list(range(places[0], places[-1] + 1))
        if not adjacent:
            slots.append(("adv",))
        for kind, p, dd in order:
            if kind == "dim":
                slots.append(("dim", dd))
            elif kind == "new":
                slots.append(("new",))
            elif adjacent and p == places[0] and ("adv",) not in slots:
                slots.append(("adv",))
    else:
        slots = [("dim", dd) if kind == "dim" else ("new",) for kind, _, dd in order if kind != "int"]
    out_shape: list = []
    for s in slots:
        out_shape.extend(adv_shape if s[0] == "adv" else (1,) if s[0] == "new" else (specs[s[1]].count,))
    return Index(tuple(specs), tuple(slots), adv_shape, tuple(out_shape))


# --------------------------------------------------------------------------- loop IR on the host


_BIN = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod,
        "&": operator.and_, ">>": operator.rshift, "<<": operator.lshift, "==": operator.eq,
        "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "and": np.logical_and, "or": np.logical_or}
_CALLS = {"np.intp": lambda x: np.asarray(x).astype(np.intp) if np.ndim(x) else int(x),
          "min": np.minimum, "max": np.maximum}


def evaluate(e: ir.Expr, env: dict):
    """The value of a read hook's loop-IR expression on the host (ints or NumPy arrays)."""
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, ir.Var):
        return env[e.name]
    if isinstance(e, ir.Index):
        return evaluate(e.value, env)
    if isinstance(e, ir.Load):
        index = tuple(evaluate(i, env) for i in e.index)
        return env[e.array][index[0] if len(index) == 1 else index]
    if isinstance(e, ir.Bin):
        return _BIN[e.op](evaluate(e.left, env), evaluate(e.right, env))
    if isinstance(e, ir.Neg):
        return -evaluate(e.operand, env)
    if isinstance(e, ir.Call) and e.fn in _CALLS:
        return _CALLS[e.fn](*(evaluate(a, env) for a in e.args))
    if isinstance(e, ir.Select):
        return np.where(evaluate(e.cond, env), evaluate(e.then, env), evaluate(e.orelse, env))
    raise UnsupportedOperation(f"cannot evaluate the read hook expression {e!r} on the host")


_ACCESS: dict = {}


def _access(size: int, lo: int) -> LevelAccess:
    acc = _ACCESS.get((size, lo))
    if acc is None:
        acc = _ACCESS[(size, lo)] = LevelAccess("pos", "crd", ir.Const(size), ir.Const(lo))
        if len(_ACCESS) > 4096:
            _ACCESS.clear()
    return acc


def _segment(lt: LevelType, acc, env, p: int, run_end) -> tuple[int, int]:
    if type(lt).segment is LevelType.segment:          # the default: pos[p], pos[p + 1]
        pos = env["pos"]
        return int(pos[p]), int(pos[p + 1])
    end = None if run_end is None else ir.Const(run_end)
    s, e = lt.segment(acc, ir.Const(p), end)
    return int(evaluate(s, env)), int(evaluate(e, env))


def _coordinates(lt: LevelType, acc, env, s: int, e: int) -> np.ndarray:
    """Coordinates at positions ``[s, e)`` of one segment (stateful levels decode from its start)."""
    q = np.arange(s, e, dtype=np.int64)
    scope = dict(env, q=q)
    if lt.stateful:
        steps = np.broadcast_to(np.asarray(evaluate(lt.coord_step(acc, ir.Var("q")), scope), dtype=np.int64),
                                q.shape)
        return int(evaluate(lt.coord_start(acc), scope)) + np.cumsum(steps)
    if type(lt).coordinate is LevelType.coordinate:
        return env["crd"][s:e]
    return np.broadcast_to(np.asarray(evaluate(lt.coordinate(acc, ir.Var("q")), scope)), q.shape)


def _find(lt: LevelType, acc, env, s: int, e: int, c: int) -> list:
    """Position runs ``[a, b)`` in ``[s, e)`` holding coordinate ``c``."""
    if s >= e:
        return []
    if lt.ordered and not lt.stateful and type(lt).coordinate is LevelType.coordinate:
        crd = env["crd"][s:e]
        a = int(np.searchsorted(crd, c, "left"))
        if lt.unique:
            return [(s + a, s + a + 1)] if a < len(crd) and crd[a] == c else []
        b = int(np.searchsorted(crd, c, "right"))
        return [(s + a, s + b)] if b > a else []
    hits = np.flatnonzero(_coordinates(lt, acc, env, s, e) == c) + s
    return [(int(h), int(h) + 1) for h in hits]


def _each(runs):
    for a, b in runs:
        yield from range(a, b)


def locate(t: Tensor, coords) -> tuple[np.ndarray, list]:
    """The values array and the positions in it of the entries stored at ``coords``
    (in-range dimension coordinates): a walk down the levels with their read hooks."""
    fmt, layout = t.format, t._layout
    level_coords = fmt.level_coordinates(coords)
    buffers, values = t._buffers, t._values
    nb = fmt.batch_levels
    if nb:
        b = tuple(int(c) for c in level_coords[:nb])
        buffers = {key: buf[b] for key, buf in buffers.items()}
        values = values[b]
    runs = [(0, 1)]
    for k in range(nb, fmt.nlevels):
        lt = fmt.levels[k].type
        c = int(level_coords[k])
        size, lo = layout.level_shape[k], layout.origins[k]
        if not lo <= c < lo + size:
            return values, []
        env = {"pos": buffers.get((k, "pos")), "crd": buffers.get((k, "crd"))}
        acc = _access(size, lo)
        found: list = []
        if lt.locate:
            if type(lt).locate_position is LevelType.locate_position:
                if len(runs) == 1 and runs[0][1] - runs[0][0] == 1:
                    q = runs[0][0] * size + c - lo
                    found = [(q, q + 1)]
                else:
                    found = [(p * size + c - lo, p * size + c - lo + 1) for p in _each(runs)]
            else:
                for p in _each(runs):
                    q = int(evaluate(lt.locate_position(acc, ir.Const(p), ir.Const(c)), env))
                    found.append((q, q + 1))
        elif lt.one_child:
            for a, b in runs:
                found += _find(lt, acc, env, *_segment(lt, acc, env, a, b), c)
        elif len(runs) == 1 and runs[0][1] - runs[0][0] == 1:
            found = _find(lt, acc, env, *_segment(lt, acc, env, runs[0][0], None), c)
        else:
            for p in _each(runs):
                found += _find(lt, acc, env, *_segment(lt, acc, env, p, None), c)
        runs = found
        if not runs:
            return values, []
    if len(runs) == 1 and runs[0][1] - runs[0][0] == 1:
        return values, [runs[0][0]]
    return values, list(_each(runs))


def lookup(t: Tensor, coords):
    """``t[coords]`` for integer coordinates: a NumPy scalar (duplicates summed, 0 if not stored)."""
    values, positions = locate(t, coords)
    if not positions:
        return t.dtype.type(0)
    if len(positions) == 1:
        return values[positions[0]][()]
    return values[positions].sum(dtype=t.dtype)


# --------------------------------------------------------------------------- views and gathers


def _leading(fmt: TensorFormat) -> int | None:
    """The dimension the first level walks, when views and gathers of its coordinates work:
    a plain dimension no other level uses, the level batch, locate, or iterated in order without
    state, and no level whose segments may leave gaps (loose_compressed)."""
    if fmt.ndim < 1:
        return None
    lv0 = fmt.levels[0]
    if not isinstance(lv0.expr, Dimension):
        return None
    name = lv0.expr.name
    if any(name in lv.expr.variables() for lv in fmt.levels[1:]):
        return None
    if any(isinstance(lv.type, LooseCompressed) for lv in fmt.levels):
        return None
    t0 = lv0.type
    if not (t0.locate or (t0.ordered and not t0.stateful and not t0.one_child
                          and type(t0).coordinate is LevelType.coordinate)):
        return None
    return [d.name for d in fmt.dims].index(name)


def _first_positions(t: Tensor, lo: int, hi: int) -> tuple[int, int]:
    """Level-0 positions ``[a, b)`` of the coordinates ``[lo, hi)``."""
    lt = t.format.levels[0].type
    origin = t._layout.origins[0]
    if lt.locate:
        return lo - origin, hi - origin
    env = {"pos": t._buffers[(0, "pos")], "crd": t._buffers[(0, "crd")]}
    s, e = _segment(lt, _access(t.level_shape[0], origin), env, 0, None)
    crd = env["crd"][s:e]
    return s + int(np.searchsorted(crd, lo, "left")), s + int(np.searchsorted(crd, hi, "left"))


def _crd_range(lt: LevelType, crd, a: int, b: int):
    if type(lt).decode_crd is LevelType.decode_crd:
        return crd[a:b]
    return lt.encode_crd(lt.decode_crd(crd, b)[a:])


def _shape_with(shape, d: int, n: int) -> tuple:
    return tuple(n if k == d else m for k, m in enumerate(shape))


def range_view(t: Tensor, d: int, lo: int, hi: int) -> Tensor:
    """``t`` restricted to coordinates ``[lo, hi)`` of dimension ``d`` (the first level's):
    ``crd`` and ``values`` are slices of ``t``'s buffers, ``pos`` is rebased."""
    fmt = t.format
    lt0 = fmt.levels[0].type
    a, b = _first_positions(t, lo, hi)
    shape = _shape_with(t.shape, d, hi - lo)
    if lt0.batched:
        buffers = {key: buf[a:b] for key, buf in t._buffers.items()}
        return Tensor(fmt, shape, buffers, t._values[a:b], device=t.device, package=t.package)
    buffers: dict = {}
    if not lt0.locate:
        pos, crd = t._buffers[(0, "pos")], t._buffers[(0, "crd")]
        buffers[(0, "pos")] = np.array([0, b - a], dtype=pos.dtype)
        buffers[(0, "crd")] = crd[a:b] if lo == 0 else (crd[a:b] - lo).astype(crd.dtype)
    starts = np.array([a, b], dtype=np.int64)
    for k in range(1, fmt.nlevels):
        lt = fmt.levels[k].type
        pos = t._buffers.get((k, "pos"))
        child = np.asarray(lt.child_starts(t.level_shape[k], pos, starts), dtype=np.int64)
        if pos is not None:
            buffers[(k, "pos")] = np.asarray(lt.batch_pos(pos, starts, 0, child[0])).astype(pos.dtype, copy=False)
        if (k, "crd") in t._buffers:
            buffers[(k, "crd")] = _crd_range(lt, t._buffers[(k, "crd")], int(child[0]), int(child[1]))
        starts = child
    values = t._values[int(starts[0]):int(starts[1])]
    return Tensor(fmt, shape, buffers, values, device=t.device, package=t.package)


@functools.lru_cache(maxsize=256)
def _without_first(fmt: TensorFormat, d: int) -> TensorFormat | None:
    try:
        return TensorFormat(tuple(x for k, x in enumerate(fmt.dims) if k != d), fmt.levels[1:],
                            fmt.pos_width, fmt.crd_width)
    except FormatError:
        return None


def drop_first(t: Tensor, d: int) -> Tensor | None:
    """A view of ``t`` (extent 1 in dimension ``d``, a dense or batch first level) without that
    dimension, or None when the remaining levels are not a format."""
    fmt = t.format
    lt0 = fmt.levels[0].type
    if not lt0.locate or fmt.ndim < 2:
        return None
    new = _without_first(fmt, d)
    if new is None:
        return None
    shape = tuple(n for k, n in enumerate(t.shape) if k != d)
    if lt0.batched:
        buffers = {(k - 1, name): buf[0] for (k, name), buf in t._buffers.items()}
        return Tensor(new, shape, buffers, t._values[0], device=t.device, package=t.package)
    buffers = {(k - 1, name): buf for (k, name), buf in t._buffers.items()}
    values = t._values[:t.nse]
    return Tensor(new, shape, buffers, values, device=t.device, package=t.package)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for every (s, n): vectorised."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return shift + np.arange(total, dtype=np.int64)


def gather(t: Tensor, d: int, idx: np.ndarray) -> Tensor | None:
    """``t`` with dimension ``d`` (a dense or batch first level's) taken at ``idx``: the
    subtrees of those coordinates copied in order, in ``t``'s format. None for other levels."""
    fmt = t.format
    lt0 = fmt.levels[0].type
    if not lt0.locate:
        return None
    shape = _shape_with(t.shape, d, len(idx))
    if lt0.batched:
        buffers = {key: buf[idx] for key, buf in t._buffers.items()}
        return Tensor(fmt, shape, buffers, t._values[idx], device=t.device, package=t.package)
    parents = np.asarray(idx, dtype=np.int64) - t._layout.origins[0]
    buffers: dict = {}
    for k in range(1, fmt.nlevels):
        lt = fmt.levels[k].type
        pos = t._buffers.get((k, "pos"))
        first = np.asarray(lt.child_starts(t.level_shape[k], pos, parents), dtype=np.int64)
        lengths = np.asarray(lt.child_starts(t.level_shape[k], pos, parents + 1), dtype=np.int64) - first
        children = ranges(first, lengths)
        if pos is not None:
            buffers[(k, "pos")] = prefix_sum(lengths).astype(pos.dtype, copy=False)
        if (k, "crd") in t._buffers:
            crd = t._buffers[(k, "crd")]
            if type(lt).decode_crd is LevelType.decode_crd:
                buffers[(k, "crd")] = crd[children]
            else:
                end = int(children.max()) + 1 if len(children) else 0
                buffers[(k, "crd")] = lt.encode_crd(lt.decode_crd(crd, end)[children])
        parents = children
    return Tensor(fmt, shape, buffers, t._values[parents], device=t.device, package=t.package)


def _narrow(t: Tensor, idx: Index) -> tuple[Tensor, Index]:
    """Views and gathers on the first level's dimension; the rest of the key, for what remains."""
    d = _leading(t.format)
    if d is None:
        return t, idx
    spec = idx.specs[d]
    if isinstance(spec, Take):
        v = range_view(t, d, spec.k, spec.k + 1)
        dropped = drop_first(v, d)
        return (dropped, idx.without(d)) if dropped is not None else (v, idx.with_spec(d, Take(0)))
    if isinstance(spec, Span):
        if spec.full(t.shape[d]):
            return t, idx
        lo, hi = spec.bounds()
        return range_view(t, d, lo, hi), idx.with_spec(d, Span(spec.start - lo, spec.step, spec.count))
    picks = [s for s in idx.specs if isinstance(s, Pick)]
    if len(picks) == 1 and len(idx.adv_shape) == 1:
        g = gather(t, d, spec.arr)
        if g is not None:
            slots = tuple(("dim", d) if s == ("adv",) else s for s in idx.slots)
            return g, replace(idx, specs=idx.with_spec(d, Span(0, 1, len(spec.arr))).specs, slots=slots,
                              adv_shape=None)
    return t, idx


# --------------------------------------------------------------------------- selection among entries


def keys(columns, extents) -> np.ndarray:
    """One int64 key per coordinate tuple (row-major), or ids from a joint sort when the
    extents' product does not fit."""
    if not columns:
        return np.zeros(0, dtype=np.int64)
    if math.prod(max(int(n), 1) for n in extents) < 2 ** 62:
        out = np.zeros(len(columns[0]), dtype=np.int64)
        for c, n in zip(columns, extents):
            out *= max(int(n), 1)
            out += c
        return out
    _, inverse = np.unique(np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=1), axis=0,
                           return_inverse=True)
    return inverse.reshape(-1)


def _joint_keys(a_cols, b_cols, extents) -> tuple[np.ndarray, np.ndarray]:
    if math.prod(max(int(n), 1) for n in extents) < 2 ** 62:
        return keys(a_cols, extents), keys(b_cols, extents)
    n = len(a_cols[0])
    both = keys([np.concatenate([a, b]) for a, b in zip(a_cols, b_cols)], [2 ** 62] * len(extents))
    return both[:n], both[n:]


def match(found: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For keys ``found`` (entries) and ``wanted`` (a query, may repeat): ``(e, k)`` with
    ``found[e] == wanted[k]`` for every such pair, e ascending."""
    order = np.argsort(wanted, kind="stable")
    sorted_keys = wanted[order]
    lo = np.searchsorted(sorted_keys, found, "left")
    hi = np.searchsorted(sorted_keys, found, "right")
    count = hi - lo
    e = np.repeat(np.arange(len(found), dtype=np.int64), count)
    return e, order[ranges(lo, count)]


def select(coords, idx: Index, shape) -> tuple[tuple, np.ndarray]:
    """Result coordinates of the entries at ``coords`` that ``idx`` keeps, and which entries
    they are (``sel``, with repeats where an integer array names a coordinate twice)."""
    n = len(coords[0]) if coords else 0
    mask = np.ones(n, dtype=bool)
    for d, spec in enumerate(idx.specs):
        c = coords[d]
        if isinstance(spec, Take):
            mask &= c == spec.k
        elif isinstance(spec, Span) and not spec.full(shape[d]):
            off = c - spec.start
            mask &= (off % spec.step == 0) & (off // spec.step >= 0) & (off // spec.step < spec.count)
    sel = np.flatnonzero(mask)
    advk = None
    if idx.advanced:
        adv = [d for d, s in enumerate(idx.specs) if isinstance(s, Pick)]
        if adv:
            found, wanted = _joint_keys([coords[d][sel] for d in adv], [idx.specs[d].arr for d in adv],
                                        [shape[d] for d in adv])
            e, advk = match(found, wanted)
            sel = sel[e]
        else:
            advk = np.zeros(len(sel), dtype=np.int64)
    out: list = []
    for s in idx.slots:
        if s[0] == "dim":
            spec = idx.specs[s[1]]
            c = coords[s[1]][sel]
            out.append(c if spec.full(shape[s[1]]) else (c - spec.start) // spec.step)
        elif s[0] == "new":
            out.append(np.zeros(len(sel), dtype=np.int64))
        else:
            out.extend(np.unravel_index(advk, idx.adv_shape) if idx.adv_shape else ())
    return tuple(np.asarray(c, dtype=np.int64) for c in out), sel


def candidates(t: Tensor, idx: Index) -> tuple[tuple, np.ndarray]:
    """The stored entries ``idx`` may keep: all of them, except that CSR and CSC test the
    coordinates of their compressed level first and find the rows of the hits only
    (``searchsorted`` in ``pos``), without expanding every entry's row."""
    fmt = t.format
    if not fmt.compressed_rows:
        return t.entries()
    names = [d.name for d in fmt.dims]
    minor = names.index(fmt.levels[1].expr.name)
    spec = idx.specs[minor]
    if isinstance(spec, Span) and spec.full(t.shape[minor]):
        return t.entries()
    pos = t._buffers[(1, "pos")]
    crd = t._buffers[(1, "crd")][:t.nse]
    if isinstance(spec, Take):
        hits = np.flatnonzero(crd == spec.k)
    elif isinstance(spec, Span):
        lo, hi = spec.bounds()
        hits = np.flatnonzero((crd >= lo) & (crd < hi))
    else:
        hits = np.flatnonzero(np.isin(crd, spec.arr))
    if len(hits) * max(1, int(np.log2(len(pos) + 1))) < len(crd):   # few hits: search their rows
        major = np.searchsorted(pos, hits, "right").astype(np.int64) - 1
    else:                                                             # many: expand every row once
        major = np.repeat(np.arange(len(pos) - 1, dtype=np.int64), np.diff(pos))[hits]
    minor_c = crd[hits].astype(np.int64)
    coords = (major, minor_c) if minor == 1 else (minor_c, major)
    return coords, t._values[hits]


def default_format(rank: int) -> TensorFormat:
    """A compressed vector, CSR, or COO of ``rank``."""
    from .. import formats

    if rank == 1:
        return TensorFormat.parse("(i) -> (i : compressed)")
    return formats.CSR if rank == 2 else formats.COO(rank)


def plain(fmt: TensorFormat) -> bool:
    """One plain dimension per level (no blocks, diagonals or scaled levels)."""
    return all(isinstance(lv.expr, Dimension) for lv in fmt.levels)


def result_format(fmt: TensorFormat, rank: int, advanced: bool) -> TensorFormat:
    if (rank == fmt.ndim and fmt.holds_any_pattern and not fmt.dense_storage
            and (not advanced or plain(fmt))):
        return fmt
    return default_format(rank)


def _share(t: Tensor) -> Tensor:
    return Tensor(t.format, t.shape, t._buffers, t._values, device=t.device, package=t.package)


@functools.lru_cache(maxsize=256)
def _all_dense(fmt: TensorFormat) -> bool:
    return fmt.all_dense


def integer_key(key, shape) -> list | None:
    """The coordinates of a key of one integer per dimension (the common ``A[i, j]``), checked
    and wrapped, without the general parse; None for any other key."""
    if type(key) is not tuple or len(key) != len(shape):
        if len(shape) == 1 and type(key) is int:
            return [_wrap(key, shape[0], 0)]
        return None
    out = []
    for d, (k, n) in enumerate(zip(key, shape)):
        if type(k) is not int:
            if not isinstance(k, np.integer):
                return None
            k = int(k)
        out.append(k + n if -n <= k < 0 else k if 0 <= k < n else _wrap(k, n, d))
    return out


def getitem(t: Tensor, key):
    """``t[key]`` (module docstring)."""
    if t.device != "cpu":
        t._require_host()
    if _all_dense(t.format):
        return _dense_getitem(t, key)
    coords = integer_key(key, t.shape)
    if coords is not None:
        return lookup(t, coords)
    idx = parse(key, t.shape)
    if idx.scalar:
        return lookup(t, [s.k for s in idx.specs])
    source, original = t.format, t
    t, idx = _narrow(t, idx)
    if idx.identity(t.shape):
        return t if t is not original else _share(t)
    coords, values = candidates(t, idx)
    out, sel = select(coords, idx, t.shape)
    fmt = result_format(source, len(idx.shape), idx.advanced)
    from ..ops.runtime import assemble       # entries still in CSR / CSC order: counted, not sorted

    result = assemble(out, values[sel], idx.shape, fmt)
    result._package = t.package
    return result


def _dense_view(t: Tensor) -> np.ndarray:
    """The array of an all-dense tensor, sharing its values."""
    from .tensor import _dense_permutation

    perm = _dense_permutation(t.format)
    return t._values[:t.nse].reshape(t.level_shape).transpose(np.argsort(perm))


def _numpy_key(key):
    items = key if isinstance(key, tuple) else (key,)
    out = tuple(_as_array(x) if not (x is None or x is Ellipsis or isinstance(x, slice) or _is_int(x)
                                     or isinstance(x, (bool, np.bool_))) else x for x in items)
    return out if isinstance(key, tuple) else out[0]


def _dense_getitem(t: Tensor, key):
    parse(key, t.shape)                      # ustc's errors, then NumPy's indexing
    out = _dense_view(t)[_numpy_key(key)]
    if np.ndim(out) == 0:
        return out[()] if isinstance(out, np.ndarray) else out
    return packages.wrap(out, t.package)


# --------------------------------------------------------------------------- assignment


def entry_positions(t: Tensor) -> tuple[tuple, object]:
    """Coordinates of every stored in-bounds entry and where its value lives in ``t._values``
    (an index array, or a tuple of them for batched storage)."""
    fmt = t.format
    if not fmt.batch_levels:
        coords, index = storage.unpack(t._layout, t._buffers, len(t._values))
        return coords, index
    ids = np.arange(t._values.size, dtype=np.int64).reshape(t._values.shape)
    buffers, flat = batch.flatten(fmt, t.level_shape, t._buffers, ids)
    coords, index = storage.unpack(t._layout, buffers, len(flat))
    return coords, np.unravel_index(flat[index], t._values.shape)


def subset(where, sel):
    return tuple(w[sel] for w in where) if isinstance(where, tuple) else where[sel]


def can_grow(fmt: TensorFormat) -> bool:
    """Entries can be inserted one by one: plain appendable levels that hold any pattern and no
    locate level below an iterated one (which would store a dense fiber per new entry)."""
    if not fmt.holds_any_pattern:
        return False
    iterated = False
    for lv in fmt.levels:
        if not isinstance(lv.expr, Dimension) or not lv.type.append:
            return False
        if lv.type.locate and not lv.type.batched:
            if iterated:
                return False
        elif not lv.type.locate:
            iterated = True
    return True


def grows_by_diagonals(fmt: TensorFormat) -> bool:
    """A 2-D format whose first level's coordinate is constant along a diagonal (DIA): a new
    diagonal is one new first-level coordinate."""
    if fmt.ndim != 2 or fmt.levels[0].type.locate:
        return False
    names = [d.name for d in fmt.dims]
    expr = fmt.levels[0].expr
    at = [expr.evaluate({names[0]: i, names[1]: j}) for i, j in ((0, 3), (1, 4), (2, 5))]
    return at[0] == at[1] == at[2] and expr.evaluate({names[0]: 0, names[1]: 4}) != at[0]


def format_name(fmt: TensorFormat) -> str:
    return f"{fmt.name} ({fmt})" if fmt.name else str(fmt)


def _why(fmt: TensorFormat) -> str:
    exprs = [lv.expr for lv in fmt.levels]
    if not fmt.holds_any_pattern:
        return "stores a fixed number of entries per group (n:m or one entry per coordinate above)"
    if any(isinstance(e, (FloorDiv, Mod)) for e in exprs):
        return "grows only by whole blocks"
    if not plain(fmt):
        return "grows only by whole diagonals"
    return "stores a dense fiber under each sparse coordinate"


def refuse_growth(fmt: TensorFormat, coords, count: int, what: str = "assignment") -> None:
    first = tuple(int(c[0]) for c in coords)
    raise UnsupportedOperation(
        f"{what}: {count} entr{'y' if count == 1 else 'ies'} not stored (the first at {first}) would need "
        f"to be inserted, but {format_name(fmt)} {_why(fmt)} and cannot take single entries; convert "
        f"first (A = A.convert('CSR') or 'COO'), assign, and convert back")


def grow(t: Tensor, coords, values) -> None:
    """Insert entries (not stored yet) into ``t``: its storage rebuilt in its own format."""
    old, vals = t.entries()
    allc = tuple(np.concatenate([np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)])
                 for a, b in zip(old, coords))
    allv = np.concatenate([vals, np.asarray(values, dtype=t.dtype)])
    new = Tensor._assembled(t.format, t.shape, allc, allv, t.package)
    replace_storage(t, new)


def replace_storage(t: Tensor, new: Tensor) -> None:
    """``t`` takes ``new``'s buffers and values (same format and shape)."""
    t._buffers, t._values, t._counts = new._buffers, new._values, new._counts


def _value_array(t: Tensor, value) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.to_dense()
    elif type(value).__module__.startswith("scipy.sparse"):
        value = value.toarray()
    v = packages.host_array(value) if not isinstance(value, numbers.Number) else np.asarray(value)
    if v.dtype.kind == "c" and t.dtype.kind != "c" and np.any(v.imag != 0):
        raise UnsupportedOperation(f"cannot assign complex values to a {t.dtype} tensor; use A.astype(complex)")
    return v


def setitem(t: Tensor, key, value, *, diagonals: bool = False) -> None:
    """``t[key] = value`` (module docstring). ``diagonals``: a format that grows by whole
    diagonals may take new ones (``setdiag``)."""
    t._require_host()
    v = _value_array(t, value)
    if t.format.all_dense:
        parse(key, t.shape)
        _dense_view(t)[_numpy_key(key)] = v
        return
    coords = integer_key(key, t.shape)
    if coords is not None:
        return _set_one(t, coords, v, diagonals)
    idx = parse(key, t.shape)
    if idx.scalar:
        return _set_one(t, [s.k for s in idx.specs], v, diagonals)
    _set_many(t, idx, v, diagonals)


def _set_one(t: Tensor, coords, v: np.ndarray, diagonals: bool) -> None:
    if v.size != 1:
        raise ShapeError(f"cannot assign {v.size} values to the single entry {tuple(coords)}")
    x = v.reshape(()).astype(t.dtype)
    values, positions = locate(t, coords)
    if positions:
        values[positions[0]] = x
        if len(positions) > 1:
            values[positions[1:]] = 0
    elif x != 0:
        coords = tuple(np.array([c]) for c in coords)
        if not (can_grow(t.format) or (diagonals and grows_by_diagonals(t.format))):
            refuse_growth(t.format, coords, 1)
        grow(t, coords, np.array([x]))


def _set_many(t: Tensor, idx: Index, v: np.ndarray, diagonals: bool) -> None:
    try:
        target = np.broadcast_to(v, idx.shape)
    except ValueError:
        raise ShapeError(f"cannot assign values of shape {v.shape} to an index of shape {idx.shape}") from None
    coords, where = entry_positions(t)
    if v.size == 1 and v.reshape(-1)[0] == 0:     # zeros: only stored entries change
        _, sel = select(coords, idx, t.shape)
        t._values[subset(where, sel)] = 0
        return
    address = addressed(idx, t.shape)
    flat = np.ascontiguousarray(target).reshape(-1).astype(t.dtype)
    akeys = keys(list(address), t.shape) if address else np.zeros(0, dtype=np.int64)
    # NumPy: the last assignment to a repeated coordinate wins
    last = len(akeys) - 1 - np.unique(akeys[::-1], return_index=True)[1]
    akeys, flat, address = akeys[last], flat[last], tuple(a[last] for a in address)
    skeys = keys(list(coords), t.shape)
    e, k = match(skeys, akeys)
    stored = np.zeros(len(akeys), dtype=bool)
    stored[k] = True
    missing = np.flatnonzero(~stored & (flat != 0))
    if len(missing) and not (can_grow(t.format) or (diagonals and grows_by_diagonals(t.format))):
        refuse_growth(t.format, tuple(a[missing] for a in address), len(missing))
    # duplicates in storage: the first copy takes the value, the others 0
    order = np.lexsort((e, k))
    e, k = e[order], k[order]
    first = np.ones(len(e), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    t._values[subset(where, e[first])] = flat[k[first]]
    if (~first).any():
        t._values[subset(where, e[~first])] = 0
    if len(missing):
        grow(t, tuple(a[missing] for a in address), flat[missing])


def addressed(idx: Index, shape) -> tuple:
    """The coordinates (one array per dimension) of every element ``idx`` names, in the
    result's row-major order."""
    total = math.prod(idx.shape)
    axes = np.unravel_index(np.arange(total, dtype=np.int64), idx.shape) if idx.shape else ()
    where: dict = {}
    adv_axes: tuple = ()
    a = 0
    for s in idx.slots:
        if s[0] == "adv":
            adv_axes = tuple(range(a, a + len(idx.adv_shape)))
            a += len(idx.adv_shape)
        else:
            if s[0] == "dim":
                where[s[1]] = a
            a += 1
    out = []
    for d, spec in enumerate(idx.specs):
        if isinstance(spec, Take):
            out.append(np.full(total, spec.k, dtype=np.int64))
        elif isinstance(spec, Span):
            out.append(spec.start + spec.step * np.asarray(axes[where[d]], dtype=np.int64))
        else:
            grid = spec.arr.reshape(idx.adv_shape)
            out.append(np.asarray(grid[tuple(axes[x] for x in adv_axes)], dtype=np.int64).reshape(total))
    return tuple(out)
