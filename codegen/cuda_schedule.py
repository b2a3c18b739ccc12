"""How a loop-IR function's iterations map to CUDA threads: analysis and the schedule heuristic.

:func:`mapping` reads the loop IR only (never formats):

* the outermost loop the lowering marked ``parallel`` (no two iterations write the
  same output element) is spread over threads and stores plainly;
* otherwise the first top-level loop whose iterations carry nothing but register
  sums is spread and its output updates become atomic adds;
* otherwise one thread runs the function (a sparse output appended serially).

On top of the spread loop, :class:`Schedule` picks one of

* ``thread_per_row``: a grid-stride loop, a thread per iteration;
* ``warp_per_row``: ``width`` lanes per iteration stride through its innermost row
  reduction and combine their sums with warp shuffles (the shape ``acc = 0; for p in
  segment(i): acc += e; y[i] += f(acc)``, :func:`row_reduction`);
* ``merge_path``: the same shape, with rows and entries together split evenly over
  the threads (a merge-path search per thread over the segment ends): skewed rows
  cost no more than their entries, and only the two rows a thread shares with its
  neighbours are added atomically (:func:`merge_rows`);
* ``block_tile``: ``width`` lanes per iteration stride through an inner dense loop
  whose iterations write different output elements — the rows of a BSR/BSC block, or
  the columns of a dense SpMM operand (coalesced) (:func:`tile_loop`);
* ``serial``: one thread.

A kernel that writes a sparse output in its own format by chunks (:func:`writes_chunks`)
always runs thread_per_row: a thread per chunk of the writer's table of counts.

:func:`choose_schedule` picks from row statistics (:func:`vector_width`, the skewed
levels) and lane buckets of small extents (:func:`lane_bucket`); a caller's choice
wins wherever it applies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from . import loopir as ir
from .roles import SCALARS, Kind, Role

SCHEDULES = ("thread_per_row", "warp_per_row", "merge_path", "block_tile", "serial")
#: folds (``Assign.op`` / ``Store.op``) that CUDA can apply atomically, and the ``cuda.atomic`` function
ATOMIC = {"+": "add", "min": "min", "max": "max"}
LANED = ("warp_per_row", "block_tile")
#: schedules whose threads may read a row's values in vector loads (a thread's row, or a block row)
VECTOR_KINDS = ("thread_per_row", "block_tile")
WARP = 32
#: 32-bit registers of one sm_90 multiprocessor; ptxas allocates them to a thread in units of 8
REGISTERS_PER_SM = 65536
SCALAR_ROLES = SCALARS  # parameters the host passes as numbers (a launch may read them)
#: the load intrinsics generated kernels import (``codegen.cuda_loads``): read-only scalar and vector loads
LOADS = ("ldg", "ldg2", "ldg4", "ldg8", "element_address")
LOADS_MODULE = "ustc.codegen.cuda_loads"
#: parameters a kernel only reads: its operands' level buffers and values, dense operands
READ_KINDS = frozenset({Kind.POS, Kind.CRD, Kind.VALS, Kind.ARRAY})


@dataclass(frozen=True)
class Schedule:
    """How a kernel's iterations map to CUDA threads (see the module docstring)."""

    kind: str = "thread_per_row"
    width: int = WARP        # lanes per iteration (warp_per_row, block_tile): 2, 4, 8, 16 or 32
    threads: int = 256       # threads per block
    max_blocks: int = 4096   # grid-stride loops cover any trip count with at most this many blocks
    loop: str = ""           # block_tile: the variable of the loop lanes share ("": the innermost one)
    reason: str = field(default="", compare=False)
    min_blocks: int = 2      # blocks of `threads` each multiprocessor must hold at once (launch bounds)
    readonly_loads: bool = True  # arrays the kernel never writes are read through ld.global.nc (readonly_arrays)
    vector: int = 0          # thread_per_row / block_tile: a row's values this many a load (vectored_row)

    def __post_init__(self):
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown CUDA schedule {self.kind!r} (schedules: {', '.join(SCHEDULES)})")
        if self.width not in (2, 4, 8, 16, 32) or self.threads % WARP or self.threads <= 0:
            raise ValueError(f"bad schedule {self}: width in 2..32 (a power of two), threads a multiple of 32")
        if self.min_blocks < 1 or self.threads * self.min_blocks > 2048:
            raise ValueError(f"bad schedule {self}: min_blocks >= 1 and at most 2048 threads per multiprocessor")
        if self.vector not in (0, 2, 4, 8) or (self.vector and self.kind not in VECTOR_KINDS):
            raise ValueError(f"bad schedule {self}: vector loads of 2, 4 or 8 values, "
                             f"{' or '.join(VECTOR_KINDS)} only")

    @property
    def max_registers(self) -> int:
        """The register budget of a thread: the multiprocessor's registers shared by
        ``min_blocks`` blocks of ``threads`` (rounded down to ptxas' unit of 8), at most 255.
        The kernel declares it as launch bounds ``(threads, min_blocks)``, so ptxas keeps to
        it (spilling rather than exceeding: the static checks require zero spills)."""
        return min(255, REGISTERS_PER_SM // (self.threads * self.min_blocks) // 8 * 8)

    def describe(self) -> str:
        text = f"{self.kind}" + (f"(width={self.width})" if self.kind in LANED else "")
        text = text[:-1] + f", loop={self.loop})" if self.kind == "block_tile" and self.loop else text
        text += ", one thread" if self.kind == "serial" else f", {self.threads} threads/block"
        return text + (f" — {self.reason}" if self.reason else "")


def vector_width(mean: float, longest: int) -> int:
    """Lanes per row for rows of this mean length (0: a thread per row is better).

    Short rows (mean < 4) keep a thread each; longer ones get the power of two at or
    above the mean, up to a warp; skewed rows (:func:`skewed`) a warp."""
    if skewed(mean, longest):
        return WARP
    if mean < 4:
        return 0
    width = 4
    while width < mean and width < WARP:
        width *= 2
    return width


def skewed(mean: float, longest: int) -> bool:
    """The longest row is over 32× the mean (and at least 64 long): rows need balancing."""
    return longest > 32 * max(mean, 1.0) and longest >= 64


def lane_bucket(extent: int) -> int:
    """Lanes worth giving a dense loop of ``extent`` iterations: the power of two at or above
    it, at most a warp (1 for a single iteration). Buckets keep cache keys few."""
    width = 1
    while width < extent and width < WARP:
        width *= 2
    return width


# -- how a function maps to threads -------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    loop: ir.For | None           # spread over threads; None: one thread runs the function
    atomic: bool = False          # iterations may update the same output element
    warp: ir.For | None = None    # the row reduction loop (warp_per_row, merge_path)
    acc: str = ""                 # its register sum
    tile: ir.For | None = None    # the dense loop lanes share (block_tile)
    vector: "VectorRow | None" = None   # the row whose values are read a vector at a time (Schedule.vector)


def mapping(fn: ir.Function, warp: bool = False) -> Mapping:
    """The spread loop of ``fn``; with ``warp``, also its row reduction when it has one."""
    body = fn.body
    for k, s in enumerate(body):
        if not isinstance(s, ir.For):
            continue
        pre, post = body[:k], body[k + 1:]
        if not all(isinstance(p, (ir.Assign, ir.Comment)) for p in pre):
            break
        if s.parallel and not post:
            found = row_reduction(s, fn) if warp else None
            return Mapping(s, False, *found) if found else Mapping(s)
        if _distributable(s, pre, post):  # a parallel loop whose rows all add into one sum, too
            return Mapping(s, atomic=True)
        break
    return Mapping(None)


def _assigned(body) -> set[str]:
    names = set()
    for s in ir.walk(body):
        if isinstance(s, ir.Assign):
            names.add(s.name)
        elif isinstance(s, ir.For):
            names.add(s.var)
    return names


def _read(body) -> set[str]:
    return {n for s in ir.walk(body) for e in ir.children(s) for n in ir.variables(e)}


def substitute(e: ir.Expr, name: str, by: ir.Expr) -> ir.Expr:
    """``e`` with the variable ``name`` replaced by ``by``."""
    if e == ir.Var(name):
        return by
    if isinstance(e, (ir.Var, ir.Const)):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, ir.Expr):
            changes[f.name] = substitute(value, name, by)
        elif isinstance(value, tuple):
            changes[f.name] = tuple(substitute(v, name, by) for v in value)
    return dataclasses.replace(e, **changes)


def _distributable(loop: ir.For, pre, post) -> bool:
    """Iterations share only register sums started before the loop (``acc = 0``, ``acc += e``)
    and update outputs with ``+=``; the sums are added to outputs after the loop."""
    stmts = list(ir.walk(loop.body))
    if any(isinstance(s, (ir.Return, ir.While)) or (isinstance(s, ir.Store) and not _atomic(s))
           for s in stmts):
        return False
    before = {p.name: p for p in pre if isinstance(p, ir.Assign)}
    carried = _assigned(loop.body) & set(before)
    for name in carried:
        if not isinstance(before[name].value, ir.Const):
            return False
        ops = {s.op for s in stmts if isinstance(s, ir.Assign) and s.name == name}
        if len(ops) != 1 or not ops <= set(ATOMIC) or \
                any(s.op != next(iter(ops)) for s in post if isinstance(s, ir.Store)):
            return False
        others = [s for s in stmts if not (isinstance(s, ir.Assign) and s.name == name)]
        if any(name in ir.variables(e) for s in others for e in ir.children(s)):
            return False
    for s in post:
        if not (isinstance(s, ir.Store) and _atomic(s)):
            return False
    return True


def _atomic(s: ir.Store) -> bool:
    """A store threads may fold into the same element concurrently."""
    return s.accumulate and s.op in ATOMIC and s.atomic


def row_reduction(loop: ir.For, fn: ir.Function):
    """``(reduction loop, accumulator)`` when ``loop`` is ``acc = 0; <assigns>; for p: ...;
    acc += e; <stores of acc at the loop variable>`` — the shape lanes can share."""
    body = loop.body
    loops = [k for k, s in enumerate(body) if isinstance(s, ir.For)]
    if len(loops) != 1 or loop.step != 1:
        return None
    k = loops[0]
    inner, pre, post = body[k], body[:k], body[k + 1:]
    if inner.parallel or inner.step != 1 or not inner.body:
        return None
    last = inner.body[-1]
    if not (isinstance(last, ir.Assign) and last.op in ATOMIC):  # lanes combine with shuffles, folds of +, min, max
        return None
    acc = last.name
    if not all(isinstance(s, ir.Assign) and s.name != acc and not s.op for s in inner.body[:-1]):
        return None
    if not any(isinstance(s, ir.Assign) and s.name == acc and isinstance(s.value, ir.Const) for s in pre):
        return None
    if not all(isinstance(s, ir.Assign) for s in pre) or not post:
        return None
    allowed = {loop.var, acc} | _scalars(fn)
    for s in post:
        if not isinstance(s, ir.Store) or not _read((s,)) <= allowed:
            return None
        if s.accumulate and s.op != last.op:
            return None
    return inner, acc


def _scalars(fn: ir.Function) -> set[str]:
    return {p.name for p in fn.params if p.role.kind in SCALAR_ROLES}


def merge_rows(fn: ir.Function, m: Mapping) -> bool:
    """Whether ``m``'s row reduction can run merge-path: each row's segment starts where the
    previous one stops (``stop(i) == start(i + 1)``, bounds read only ``i`` and parameters),
    and every store adds a value linear in the sum (so a row split between threads adds up)."""
    if m.warp is None or m.loop.step != 1:
        return False
    var = m.loop.var
    params = {p.name for p in fn.params}
    if not (ir.variables(m.warp.start) | ir.variables(m.warp.stop)) <= params | {var}:
        return False
    if substitute(m.warp.start, var, ir.add(ir.Var(var), 1)) != m.warp.stop:
        return False
    post = m.loop.body[m.loop.body.index(m.warp) + 1:]
    return all(_atomic(s) and (_linear(s.value, m.acc) if s.op == "+" else s.value == ir.Var(m.acc))
               for s in post)


def _linear(e: ir.Expr, acc: str) -> bool:
    """``e`` is ``c * acc`` for some ``c`` free of ``acc`` (so ``e(a + b) == e(a) + e(b)``)."""
    if e == ir.Var(acc):
        return True
    if isinstance(e, ir.Neg):
        return _linear(e.operand, acc)
    if isinstance(e, ir.Bin) and e.op == "*":
        return (_linear(e.left, acc) and acc not in ir.variables(e.right)) or \
            (_linear(e.right, acc) and acc not in ir.variables(e.left))
    return False


def tile_loops(m: Mapping) -> list[ir.For]:
    """Dense loops inside the spread loop that lanes may share, outermost first: their
    iterations are independent (every name they assign is set afresh each iteration and
    not read after the loop) and write different output elements (a store index is the
    loop variable, or ``x + var`` with ``x`` fixed) or add atomically."""
    if m.loop is None or m.warp is not None:
        return []
    found = []
    for s in ir.walk(m.loop.body):
        if isinstance(s, ir.For) and s.step == 1 and _independent(s, m):
            found.append(s)
    return found


def tile_width(fn: ir.Function, loop: ir.For, lanes: dict, scope=()) -> int:
    """Lanes for ``loop`` from ``lanes`` (:func:`lane_bucket` per ``(tensor, level)`` size and
    per index extent): the smallest bucket among the parameters bounding it, or of the
    tile it runs over (``start = max(lo, ..)``, ``stop = min(hi, ..)`` with ``hi = min(lo + c, ..)``
    assigned in ``scope``: at most ``c`` iterations). 0: unknown."""
    roles = {p.name: p.role for p in fn.params}
    widths = [lanes.get(_lane_key(roles[n]), 0) for n in ir.variables(loop.stop) if n in roles]
    widths = [w for w in widths if w] + [lane_bucket(c) for c in _constant_bounds(loop.stop)]
    span = _tile_span(loop, {s.name: s.value for s in ir.walk(scope) if isinstance(s, ir.Assign) and not s.op})
    if span is not None:
        widths.append(lane_bucket(span))
    return min(widths) if widths else 0


def _constant_bounds(stop: ir.Expr) -> list[int]:
    """Constant upper bounds of a loop's ``stop`` (itself, or an argument of its ``min``): a level
    size the host made a constant (``codegen.cuda_blocks``) bounds a block loop as its parameter did."""
    terms = stop.args if isinstance(stop, ir.Call) and stop.fn == "min" else (stop,)
    return [int(t.value) for t in terms if isinstance(t, ir.Const) and isinstance(t.value, int) and t.value > 0]


def _tile_span(loop: ir.For, assigns: dict) -> int | None:
    def args(e, fn):
        return e.args if isinstance(e, ir.Call) and e.fn == fn else (e,)

    lows = set(args(loop.start, "max"))
    for hi in args(loop.stop, "min"):
        for bound in args(assigns.get(hi.name), "min") if isinstance(hi, ir.Var) else ():
            if isinstance(bound, ir.Bin) and bound.op == "+" and bound.left in lows \
                    and isinstance(bound.right, ir.Const):
                return int(bound.right.value)
    return None


def _lane_key(role: Role):
    if role.kind is Kind.SIZE:
        return (role.tensor, role.level)
    if role.kind is Kind.EXTENT:
        return role.index
    return None


def _independent(loop: ir.For, m: Mapping) -> bool:
    stmts = list(ir.walk(loop.body))
    if any(isinstance(s, (ir.Return, ir.While)) for s in stmts):
        return False
    fresh = {s.name for s in stmts if isinstance(s, ir.Assign) and not s.op} | \
        {s.var for s in stmts if isinstance(s, ir.For)}
    if any(isinstance(s, ir.Assign) and s.name not in fresh for s in stmts):
        return False  # a sum carried from one iteration to the next
    if (fresh | {loop.var}) & _read_outside(m.loop.body, loop):
        return False
    top = {s.name: s.value for s in loop.body if isinstance(s, ir.Assign) and not s.op}
    stores = [s for s in stmts if isinstance(s, ir.Store)]
    return bool(stores) and (m.atomic or all(_injective(s, loop.var, top) for s in stores))


def _read_outside(body, inner: ir.For) -> set[str]:
    """Names read in ``body`` outside the subtree of ``inner``."""
    out: set[str] = set()
    for s in body:
        if s is inner:
            continue
        out |= {n for e in ir.children(s) for n in ir.variables(e)}
        for attr in ("body", "orelse"):
            out |= _read_outside(getattr(s, attr, ()), inner)
    return out


def _injective(store: ir.Store, var: str, top: dict) -> bool:
    for e in store.index:
        e = e.value if isinstance(e, ir.Index) else e
        if isinstance(e, ir.Var) and e.name in top:
            e = top[e.name]
        if e == ir.Var(var):
            return True
        if isinstance(e, ir.Bin) and e.op == "+":
            for mine, other in ((e.left, e.right), (e.right, e.left)):
                if mine == ir.Var(var) and var not in ir.variables(other) and not (ir.variables(other) & set(top)):
                    return True
    return False


def reduced_level(fn: ir.Function, m: Mapping):
    """``(tensor, level)`` whose segments the row reduction loop walks (for row statistics)."""
    if m.warp is None:
        return None
    roles = {p.name: p.role for p in fn.params}
    for e in (m.warp.start, m.warp.stop):
        if isinstance(e, ir.Call) and e.fn == "np.intp":  # a signed view of an index load
            e = e.args[0]
        role = roles.get(e.array) if isinstance(e, ir.Load) else None
        if role is not None and role.kind is Kind.POS:
            return role.tensor, role.level
    return None


def readonly_arrays(fn: ir.Function) -> frozenset[str]:
    """Operand parameters ``fn`` loads and never writes (no store, atomic update or sort names
    them): no thread changes them while the kernel runs, so their loads may take the read-only
    data path (``ld.global.nc``, :mod:`codegen.cuda_loads`). The host passes each parameter
    its own buffer (an output is never also an operand under another name)."""
    written, loaded, scalar = set(), set(), set()
    for s in ir.walk(fn.body):
        if isinstance(s, (ir.Store, ir.Sort)):
            written.add(s.array)
        for e in (e for c in ir.children(s) for e in ir.nodes(c) if isinstance(e, ir.Load)):
            (loaded if e.index else scalar).add(e.array)   # a 0-d array keeps its plain load
    operands = {p.name for p in fn.params if p.role.kind in READ_KINDS}
    return frozenset((loaded & operands) - written - scalar)


def vector_size(itemsize: int, nbytes: int = 16) -> int:
    """Elements of ``itemsize`` bytes one load of ``nbytes`` (8 or 16) moves: 2, 4 or 8 (0: none)."""
    n = nbytes // itemsize if itemsize and nbytes % itemsize == 0 and nbytes in (8, 16) else 0
    return n if n in (2, 4, 8) else 0


class VectorRow(NamedTuple):
    """A row loop whose values are read ``n`` a load (``codegen.cuda_vector``): ``array[at]``
    with ``at = offset + row.var`` (``at`` is the loop variable itself and ``offset`` 0 for a
    row of CSR or delta; a block row's position for BSR). ``length``: the row's constant
    stride (a block's width), 0 when rows have any length."""

    row: ir.For
    array: str
    at: str
    offset: ir.Expr = ir.Const(0)
    length: int = 0


def vector_row(fn: ir.Function, m: Mapping) -> VectorRow | None:
    """The row when the spread loop of ``m`` walks one serial row loop (step 1, straight-line
    body: no nested loops) that loads an operand's values at its loop variable and never
    writes them: the loads vector loads can serve, in order."""
    if m.loop is None or m.warp is not None or m.tile is not None:
        return None
    rows = [s for s in m.loop.body if isinstance(s, ir.For)]
    if len(rows) != 1 or not _straight(rows[0]):
        return None
    row = rows[0]
    values = _readonly_values(fn)
    for s in ir.walk(row.body):
        for c in ir.children(s):
            for e in ir.nodes(c):
                if isinstance(e, ir.Load) and e.array in values and _at(e, row.var):
                    return VectorRow(row, e.array, row.var)
    return None


def block_row(fn: ir.Function, m: Mapping) -> VectorRow | None:
    """The first block row inside the spread loop of ``m`` (not the loop lanes share): a
    straight-line serial loop whose body first sets ``at = X * c + var`` (``c`` a constant:
    a block's width, made one by ``codegen.cuda_blocks``) and then loads an operand's
    never-written values at ``at``: ``c`` consecutive values, read in order."""
    if m.loop is None or m.warp is not None:
        return None
    values = _readonly_values(fn)
    for row in ir.walk(m.loop.body):
        if not isinstance(row, ir.For) or row is m.tile or not _straight(row):
            continue
        assigned = _assigned(row.body)
        for k, s in enumerate(row.body):
            found = _block_position(s, row.var, assigned)
            if found is None:
                continue
            offset, c = found
            loads = [e for t in row.body[k + 1:] for x in ir.walk((t,)) for ch in ir.children(x)
                     for e in ir.nodes(ch) if isinstance(e, ir.Load) and e.array in values and _at(e, s.name)]
            if loads:
                return VectorRow(row, loads[0].array, s.name, offset, c)
    return None


def _straight(row: ir.For) -> bool:
    """A serial step-1 loop with a straight-line body that never assigns its variable."""
    return row.step == 1 and not row.parallel and row.var not in _assigned(row.body) and not any(
        isinstance(s, (ir.For, ir.While, ir.Return, ir.Sort, ir.Alloc)) for s in ir.walk(row.body))


def _block_position(s: ir.Stmt, var: str, assigned: set):
    """``(X * c, c)`` when ``s`` is the only assignment of its name in the row, ``name = X * c + var``
    with ``X`` fixed over the row."""
    if not isinstance(s, ir.Assign) or s.op or not isinstance(s.value, ir.Bin) or s.value.op != "+":
        return None
    for offset, step in ((s.value.left, s.value.right), (s.value.right, s.value.left)):
        if step != ir.Var(var) or not isinstance(offset, ir.Bin) or offset.op != "*":
            continue
        if ir.variables(offset) & (assigned | {var}):
            continue
        c = next((t.value for t in (offset.left, offset.right) if isinstance(t, ir.Const)), None)
        if isinstance(c, int) and c > 1:
            return offset, c
    return None


def _at(e: ir.Load, name: str) -> bool:
    return e.index in ((ir.Index(ir.Var(name)),), (ir.Var(name),))


def _readonly_values(fn: ir.Function) -> set[str]:
    return {p.name for p in fn.params if p.role.kind is Kind.VALS} & readonly_arrays(fn)


def vectored_row(fn: ir.Function, m: Mapping) -> VectorRow | None:
    """The row a kernel mapped as ``m`` reads its values of in vector loads: a thread's row
    (:func:`vector_row`), else a block row (:func:`block_row`)."""
    return vector_row(fn, m) or block_row(fn, m)


def _vectored(fn: ir.Function, schedule: Schedule, dtypes: dict | None) -> Schedule:
    """``schedule`` with vector loads of the row loop's values where it has one whose operand's
    dtype (``dtypes``: tensor -> dtype name) makes 2, 4 or 8 values 16 bytes (8 bytes for a
    block row whose width 16 bytes do not divide)."""
    if schedule.kind not in VECTOR_KINDS or not dtypes:
        return schedule
    found = vectored_row(fn, planned(fn, dataclasses.replace(schedule, vector=0)))
    if found is None:
        return schedule
    tensor = {p.name: p.role.tensor for p in fn.params if p.role.kind is Kind.VALS}[found.array]
    item = ITEMSIZE.get(str(dtypes.get(tensor)), 0)
    eight = vector_size(item, 8) if found.length and item >= 2 else 0   # 8-byte loads: block rows of 2- to 4-byte values
    sizes = [n for n in (vector_size(item), eight) if n and (not found.length or found.length % n == 0)]
    if not sizes:
        return schedule
    n = sizes[0]
    why = f"{n} values of {found.array} a {n * item * 8}-bit load"
    return dataclasses.replace(schedule, vector=n, reason=f"{schedule.reason}; {why}" if schedule.reason else why)


#: bytes a value of each dtype the kernels read takes (bfloat16 travels as uint16 bits)
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "complex64": 8,
            "complex128": 16, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


# -- the heuristic ---------------------------------------------------------------------------

def choose_schedule(fn: ir.Function, widths: dict | None = None, override=None, simulator: bool = False,
                    lanes: dict | None = None, skew: frozenset = frozenset(), dtypes: dict | None = None) -> Schedule:
    """The schedule for ``fn``: ``override`` (a :class:`Schedule`, a kind, or ``"warp_per_row:8"``)
    where it applies; else merge_path when the reduced level is in ``skew``; else warp_per_row
    when its ``widths[(tensor, level)]`` (:func:`vector_width`) is non-zero; else block_tile
    when a shareable dense loop gets at least 2 ``lanes``; else thread_per_row (serial when
    nothing is parallel), whose row loop reads its values in 128-bit vector loads where
    ``dtypes`` (tensor -> dtype name) make them whole (:func:`vector_row`)."""
    base = {"threads": WARP, "max_blocks": 2} if simulator else {}
    request = _parse(override, base)
    m = mapping(fn, warp=True)
    if m.loop is None:
        return Schedule("serial", threads=WARP, max_blocks=1, reason="no loop runs in parallel")
    if writes_chunks(fn) and (request is None or request.kind != "serial"):
        why = "" if request is None else f"{request.kind} requested, but "
        return Schedule(**base, reason=why + "the writer's chunks carry insertion state: a thread per chunk")
    if request is not None:
        return _vectored(fn, _requested(fn, m, request, base), dtypes)
    level = reduced_level(fn, m)
    if level in skew and merge_rows(fn, m):
        return Schedule("merge_path", **base, reason=f"rows of {level[0]} level {level[1]} are skewed: "
                                                      "rows and entries split evenly over threads")
    width = (widths or {}).get(level, 0) if level is not None else 0
    if width:
        return Schedule("warp_per_row", width, **base, reason=f"rows of {level[0]} level {level[1]}: "
                                                               f"{width} lanes by mean row length")
    for loop in reversed(tile_loops(m)):
        width = tile_width(fn, loop, lanes or {}, m.loop.body)
        if width >= 2:
            return _vectored(fn, Schedule("block_tile", width, loop=loop.var, **base,
                                          reason=f"{width} lanes share the dense loop over {loop.var}"), dtypes)
    reason = "no shared row reduction" if m.warp is None else "short rows"
    return _vectored(fn, Schedule(**base, reason=reason + (", atomic updates" if m.atomic else "")), dtypes)


def writes_chunks(fn: ir.Function) -> bool:
    """``fn`` writes a sparse output in its own format by chunks (``codegen.writer``; it takes the
    table of per-chunk counts): each chunk's insertion state runs from its first entry to its
    last, so a chunk is one thread's and no lanes share a loop inside it."""
    return any(p.role.kind is Kind.OUT_COUNTS for p in fn.params)


def _requested(fn: ir.Function, m: Mapping, request: Schedule, base: dict) -> Schedule:
    kind = request.kind
    if kind == "serial":
        return Schedule("serial", threads=WARP, max_blocks=1, reason="requested")
    if kind in ("warp_per_row", "merge_path") and m.warp is None:
        return Schedule(**base, reason=f"{kind} requested but the kernel has no shared row reduction")
    if kind == "merge_path" and not merge_rows(fn, m):
        return Schedule(**base, reason="merge_path requested but the row segments are not contiguous")
    if kind == "block_tile":
        loops = [s for s in tile_loops(m) if s.var == request.loop or not request.loop]
        if not loops:
            return Schedule(**base, reason="block_tile requested but no dense loop can share lanes")
        return dataclasses.replace(request, loop=loops[-1].var, reason="requested")
    return dataclasses.replace(request, reason="requested")


def _parse(override, base: dict) -> Schedule | None:
    """``"kind"``, ``"kind:width"`` or ``"block_tile:width:loop"``."""
    if override is None or isinstance(override, Schedule):
        return override
    kind, _, rest = str(override).partition(":")
    width, _, loop = rest.partition(":")
    return Schedule(kind.strip(), int(width) if width else WARP, loop=loop.strip(), **base)


def planned(fn: ir.Function, schedule: Schedule) -> Mapping:
    """The mapping a kernel is emitted with under ``schedule``."""
    if schedule.kind == "serial":
        return Mapping(None)
    m = mapping(fn, warp=schedule.kind in ("warp_per_row", "merge_path"))
    if schedule.kind == "block_tile":
        loops = [s for s in tile_loops(Mapping(m.loop, m.atomic)) if s.var == schedule.loop or not schedule.loop]
        m = Mapping(m.loop, m.atomic, tile=loops[-1]) if loops else Mapping(m.loop, m.atomic)
    elif schedule.kind == "merge_path" and not merge_rows(fn, m):
        return Mapping(m.loop, m.atomic)
    elif schedule.kind == "thread_per_row":
        m = Mapping(m.loop, m.atomic)
    else:
        return m
    return dataclasses.replace(m, vector=vectored_row(fn, m)) if schedule.vector else m
